"""The chaos run's invariants hold on whole rows and fail, by name, on each kind of break."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis
from helpers.training_rows import S, add_group
from sqlalchemy import text

from app.chaos.invariants import CHECKS, Window, check_all
from app.config import Settings
from app.core.endpoint import ENDPOINT_KEY, EndpointStatus, PolicyEndpoint
from app.db.lifecycle import PolicyVersionStatus
from app.db.models import PolicyVersion, TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope


@pytest.fixture
def world(fresh_settings: Settings):
    """Two trained groups (step 1, version 1 published), their attempts whole, the endpoint
    in Redis; yields a function that applies a break in SQL and returns the violations."""
    engine = make_engine(fresh_settings)
    sessions = make_sessionmaker(engine)
    client = redis.Redis.from_url(fresh_settings.resolved_redis_url())
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    with session_scope(sessions) as session:
        for version in (0, 1):
            session.add(
                PolicyVersion(
                    version=version,
                    base_url="http://x/v1",
                    model="policy",
                    status=PolicyVersionStatus.ACTIVE if version else PolicyVersionStatus.RETIRED,
                    created_at=long_ago + timedelta(seconds=version),
                )
            )
        session.flush()
        groups = [add_group(session, [S, S], version=0) for _ in range(2)]
        session.add(TrainStep(step=1, policy_version=1, rollouts_used=4))
        session.flush()
        session.execute(
            text("UPDATE rollouts SET train_step = 1, num_steps = 0, created_at = :t"),
            {"t": long_ago + timedelta(seconds=2)},
        )
        session.execute(
            text(
                "UPDATE attempts a SET reward = r.reward, started_at = :t, finished_at = :t "
                "FROM rollouts r WHERE r.id = a.rollout_id"
            ),
            {"t": long_ago + timedelta(seconds=3)},
        )
    client.set(ENDPOINT_KEY, PolicyEndpoint("http://x/v1", "policy", 1).to_json())
    window = Window(datetime.now(UTC), max_staleness=1)

    def violations(sql: str | None = None, **params: object) -> dict[str, list[str]]:
        with session_scope(sessions) as session:
            if sql is not None:
                session.execute(text(sql), {"group": groups[0], **params})
            return check_all(session, client, window)

    yield violations
    client.delete(ENDPOINT_KEY)
    engine.dispose()


def failing(found: dict[str, list[str]]) -> set[str]:
    return {name for name, lines in found.items() if lines}


def test_whole_rows_pass_every_check(world: Callable[..., dict]) -> None:
    found = world()
    assert set(found) == set(CHECKS) and not failing(found), found


BREAKS = {
    "half a group trained": (
        "UPDATE rollouts SET train_step = NULL WHERE group_id = :group AND sample_index = 0",
        "groups_trained_whole_once",
    ),
    "a second succeeded attempt": (
        "INSERT INTO attempts (rollout_id, number, status, reward) SELECT id, 2, 'succeeded', "
        "reward FROM rollouts WHERE group_id = :group AND sample_index = 0",
        "rollouts_end_once",
    ),
    "an attempt left running": (
        "INSERT INTO attempts (rollout_id, number, status) SELECT id, 2, 'running' "
        "FROM rollouts WHERE group_id = :group AND sample_index = 0",
        "rollouts_end_once",
    ),
    "a rollout left queued": (
        "UPDATE rollouts SET status = 'queued', train_step = NULL WHERE group_id = :group",
        "rollouts_end_once",
    ),
    "a failed rollout": (
        "UPDATE rollouts SET status = 'failed', last_error = 'env error', train_step = NULL "
        "WHERE group_id = :group",
        "no_rollout_failed",
    ),
    "a call missing": (
        "DELETE FROM llm_calls WHERE index = 0 AND attempt_id = (SELECT min(id) FROM attempts)",
        "winning_attempt_whole",
    ),
    "a step missing": (
        "UPDATE rollouts SET num_steps = 1 WHERE group_id = :group",
        "winning_attempt_whole",
    ),
    "a train step skipped": (
        "INSERT INTO train_steps (step, policy_version) VALUES (3, 1)",
        "steps_and_versions_contiguous",
    ),
    "a call under a version never published": (
        "UPDATE llm_calls SET policy_version = 7",
        "calls_under_a_serving_version",
    ),
    "the endpoint behind Postgres": (
        "INSERT INTO policy_versions (version, status) VALUES (2, 'active')",
        "endpoint_is_newest_serving",
    ),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_break_fails_its_check(world: Callable[..., dict], name: str) -> None:
    sql, check = BREAKS[name]
    assert check in failing(world(sql)), name


def test_a_stale_call_fails_the_staleness_bound(world: Callable[..., dict]) -> None:
    """Versions 2 and 3 were out before the attempts began: calls at 0 are 3 behind."""
    found = world(
        "INSERT INTO policy_versions (version, status, created_at) VALUES "
        "(2, 'retired', :t), (3, 'retired', :t)",
        t=datetime.now(UTC) - timedelta(hours=2),
    )
    assert "calls_under_a_serving_version" in failing(found)


def test_the_endpoint_must_be_serving(world: Callable[..., dict], fresh_settings) -> None:
    client = redis.Redis.from_url(fresh_settings.resolved_redis_url())
    paused = PolicyEndpoint("http://x/v1", "policy", 1, EndpointStatus.PAUSED)
    client.set(ENDPOINT_KEY, paused.to_json())
    assert failing(world()) == {"endpoint_is_newest_serving"}
