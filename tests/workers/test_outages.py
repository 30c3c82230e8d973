"""How the rollout task tells outages from episode failures, and waits out a database."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError

from app.core.env_client import EnvError
from app.core.llm import LLMBadResponse, LLMRequestRejected, LLMUnavailable
from workers.recording import EpisodeBudgetExceeded
from workers.rollout import infrastructure_failure, until_recorded


def _db_down() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("connection refused"))


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        (EnvError("env server unreachable"), True),
        (EnvError("-> 503", status_code=503), True),
        (EnvError("-> 404: unknown session (env restarted)", status_code=404), True),
        (EnvError("-> 422: bad action", status_code=422), False),
        (LLMUnavailable("HTTP 503 for 120s"), True),
        (LLMRequestRejected("HTTP 400", status_code=400), False),
        (LLMBadResponse("not a chat completion"), False),
        (_db_down(), True),
        (RedisConnectionError("refused"), True),
        (EpisodeBudgetExceeded("too long"), False),
    ],
)
def test_infrastructure_failure(exc: BaseException, outage: bool) -> None:
    assert infrastructure_failure(exc) is outage


def test_until_recorded_waits_for_the_database() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def write() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise _db_down()
        return "recorded"

    result = until_recorded(
        write, budget_s=60, backoff_s=0.5, backoff_max_s=1.0, what="test", sleep=sleeps.append
    )
    assert result == "recorded"
    assert sleeps == [0.5, 1.0, 1.0]


def test_until_recorded_gives_up_after_the_budget() -> None:
    def write() -> None:
        raise _db_down()

    with pytest.raises(OperationalError):
        until_recorded(write, budget_s=0.2, backoff_s=0.05, backoff_max_s=0.05, what="test")


def test_until_recorded_raises_other_errors_at_once() -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        until_recorded(write, budget_s=60, backoff_s=0.5, backoff_max_s=1.0, what="test")
    assert calls == [1]
