"""How the rollout task tells outages from episode failures, waits out a database, and
keeps a message it could not record (a real worker on an embedded PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.stack import RolloutStack
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.core.env_client import EnvError
from app.core.llm import LLMBadResponse, LLMRequestRejected, LLMUnavailable
from app.db import migrate
from app.embedded.ports import free_port
from workers.reconciler import broker_rollout_ids
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


@pytest.mark.slow
def test_message_not_recorded_past_the_budget_goes_back_to_the_queue(
    services_dir_factory: Callable[[str], Path], redis_url: str, tmp_path: Path
) -> None:
    """PostgreSQL down longer than the outage budget (2 s here) when a worker takes the
    message: the worker gives up recording, and the message stays in the broker (not
    acknowledged), so the rollout is played once the database is back, no reconciler."""
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("unrecorded-pg"))
    port = free_port()
    url = server.start(port)
    try:
        migrate.upgrade(url)
        settings = Settings(
            _env_file=None,
            database_url=url,
            redis_url=redis_url,
            data_dir=tmp_path / "data",
            outage_budget_s=2.0,
        )
        with RolloutStack.start(tmp_path, settings, workers=1, concurrency=1) as stack:
            (worker,) = stack.workers
            worker.stop()
            (rollout_id,) = stack.enqueue(goal_ids=stack.goal_ids[:1])
            server.stop()
            worker.start()
            deadline = time.monotonic() + 60
            while worker.log_text(current_run=True).count("database unreachable") < 3:
                assert time.monotonic() < deadline, worker.tail()
                time.sleep(0.2)
            time.sleep(3.0)  # the budget has passed for the first delivery
            worker.stop()  # warm shutdown: settles the message it holds
            assert str(rollout_id) in broker_rollout_ids(stack.redis), worker.tail()
            assert server.start(port) == url
            worker.start()
            assert stack.wait([rollout_id], timeout_s=60) == {"succeeded": 1}
            stack.check_training_data([rollout_id])
    finally:
        server.stop()
