"""Cancelling rollouts (``app.core.enqueue.cancel_rollouts``, ``wsrl cancel``): queued ones
are never played, running ones stop at the worker's next heartbeat and are never recorded
as played, finished ones are left alone. End to end on a real worker process, env server
and scripted LLM (slow calls and long episodes, so that cancelled episodes are still
running when the cancel commits)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.factories import make_goal, make_rollout
from helpers.processes import REPO, WSRL, child_env, llm_stats
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.celery import queue_for_mode
from app.core.enqueue import cancel_rollouts
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Attempt, LlmCall, Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope

LATENCY_MS = 400.0
STEPS = 14  # an episode of 14 calls runs for about 6 s
HEARTBEAT_S = 1.0


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("cancel-stack")
    settings = isolated_settings(make_database, redis_url, root, worker_heartbeat_s=HEARTBEAT_S)
    with RolloutStack.start(
        root,
        settings,
        workers=1,
        concurrency=2,
        llm_latency_ms=LATENCY_MS,
        llm_policy="oracle-long",
        episode_steps=STEPS,
    ) as running:
        yield running


def _attempts(stack: RolloutStack, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, str, str]]:
    with session_scope(stack.sessions) as session:
        rows = session.execute(
            select(Attempt.rollout_id, Attempt.status, Attempt.error).where(
                Attempt.rollout_id.in_(ids)
            )
        ).all()
    return [(r.rollout_id, str(r.status), r.error or "") for r in rows]


def _wait_until(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_cancelled_rollouts_are_neither_played_nor_recorded(stack: RolloutStack) -> None:
    ids = stack.enqueue(goal_ids=stack.goal_ids[:6], mode="eval")
    _wait_until(lambda: stack.statuses(ids)["running"] == 2)  # the worker's two threads

    with session_scope(stack.sessions) as session:
        cancelled = cancel_rollouts(session, "cancelled: by the test", ids=ids)
    assert sorted(cancelled) == sorted(ids)
    assert stack.statuses(ids) == {"cancelled": 6}
    attempts = _attempts(stack, ids)
    assert [(status, error) for _, status, error in attempts] == [
        ("failed", "cancelled: by the test")
    ] * 2, "the running attempts end with the cancel"

    # The worker stops the two episodes it was playing and takes the four jobs still in
    # the broker: none of it may change a row.
    queue = queue_for_mode("eval")
    _wait_until(lambda: stack.redis.llen(queue) == 0)
    time.sleep(HEARTBEAT_S + 3 * LATENCY_MS / 1000)  # longer than the episodes take to stop
    assert stack.statuses(ids) == {"cancelled": 6}
    assert _attempts(stack, ids) == attempts, "no attempt opened or finished after the cancel"
    with session_scope(stack.sessions) as session:
        rollouts = session.scalars(select(Rollout).where(Rollout.id.in_(ids))).all()
        calls = session.scalar(
            select(func.count())
            .select_from(LlmCall)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id.in_(ids))
        )
    assert all(r.reward is None and r.finished_at is not None for r in rollouts)
    assert all(r.last_error == "cancelled: by the test" for r in rollouts)
    assert calls == 0, "a cancelled episode's calls were written"
    worker_log = stack.workers[0].tail(200)
    assert "Traceback" not in worker_log, worker_log


def _env_sessions(stack: RolloutStack) -> int:
    """The env server's live sessions (``/health``)."""
    return httpx.get(f"{stack.env.url}/health", timeout=5.0).json()["sessions"]


@pytest.mark.slow
def test_a_running_episode_stops_at_the_next_heartbeat_after_its_cancel(
    stack: RolloutStack,
) -> None:
    """Two episodes of 14 calls (about 6 s) are cancelled as they start: each stops within
    a heartbeat and the call in flight, closing its env session, rather than playing on."""
    ids = stack.enqueue(goal_ids=stack.goal_ids[:2], mode="eval")
    _wait_until(lambda: stack.statuses(ids)["running"] == 2)
    _wait_until(lambda: _env_sessions(stack) == 2)
    calls_before = llm_stats(stack.llm)["completions"]
    cancelled_at = time.monotonic()
    with session_scope(stack.sessions) as session:
        assert sorted(cancel_rollouts(session, "cancelled: by the test", ids=ids)) == sorted(ids)

    _wait_until(lambda: _env_sessions(stack) == 0, timeout_s=3 * STEPS * LATENCY_MS / 1000)
    stopped_s = time.monotonic() - cancelled_at
    calls = llm_stats(stack.llm)["completions"] - calls_before
    # Up to a heartbeat (1 s) of calls and those in flight: 6 an episode at most (3 here),
    # where playing on makes 12 or more (26-28 here), for about 6 s.
    assert calls <= 12, f"{calls} LLM calls after the cancel, in {stopped_s:.1f} s"
    assert stopped_s < HEARTBEAT_S + 3 * LATENCY_MS / 1000 + 1.0, stopped_s
    assert stack.statuses(ids) == {"cancelled": 2}
    _wait_until(lambda: stack.workers[0].tail(100).count("is no longer running") >= 2)
    assert "Traceback" not in stack.workers[0].tail(200)


def test_cancel_leaves_finished_rollouts_alone_and_needs_a_choice(db_session: Session) -> None:
    make_goal(db_session, 901)
    done = make_rollout(db_session, 901, status=RolloutStatus.SUCCEEDED, reward=1.0)
    failed = make_rollout(db_session, 901, status=RolloutStatus.FAILED)
    queued = make_rollout(db_session, 901, mode=RolloutMode.EVAL)
    train = make_rollout(db_session, 901)

    chosen = [done.id, failed.id, queued.id, uuid.uuid4()]
    assert cancel_rollouts(db_session, "cancelled: test", ids=chosen) == [queued.id]
    for rollout, status in ((done, "succeeded"), (failed, "failed"), (train, "queued")):
        db_session.refresh(rollout)
        assert rollout.status == status
    with pytest.raises(ValueError, match="ids or a mode"):
        cancel_rollouts(db_session, "cancelled: test")


@pytest.mark.slow
def test_wsrl_cancel_by_mode_and_by_id(make_database, redis_url: str, tmp_path: Path) -> None:
    """Postgres only: the jobs of these rollouts were never sent (no worker runs)."""
    settings = isolated_settings(make_database, redis_url, tmp_path)
    engine = make_engine(settings, pool_size=1)
    with session_scope(make_sessionmaker(engine)) as session:
        make_goal(session, 1)
        evals = [make_rollout(session, 1, mode=RolloutMode.EVAL).id for _ in range(3)]
        trains = [make_rollout(session, 1).id for _ in range(2)]
        done = make_rollout(session, 1, status=RolloutStatus.SUCCEEDED, reward=0.5).id

    def wsrl_cancel(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*WSRL, "cancel", *args],
            env=child_env(settings),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    by_mode = wsrl_cancel("--mode", "eval")
    assert by_mode.returncode == 0, by_mode.stderr
    assert by_mode.stdout.strip() == "cancelled 3 rollouts"
    by_id = wsrl_cancel(str(trains[0]), str(done), str(uuid.uuid4()))
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.splitlines() == [
        "cancelled 1 rollouts",
        "2 of the ids given had finished or do not exist",
    ]
    with session_scope(make_sessionmaker(engine)) as session:
        status = {r.id: r.status for r in session.execute(select(Rollout.id, Rollout.status))}
    engine.dispose()
    assert [status[i] for i in evals] == ["cancelled"] * 3
    assert [status[i] for i in trains] == ["cancelled", "queued"]
    assert status[done] == "succeeded"

    for args, message in (
        ((), "give rollout ids or --mode"),
        (("not-a-uuid",), "not a rollout id: 'not-a-uuid'"),
        (("--mode", "both"), "--mode must be train or eval, not 'both'"),
    ):
        bad = wsrl_cancel(*args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert message in bad.stderr, bad.stderr
