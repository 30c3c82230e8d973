"""Rollouts end to end: real Celery worker processes, Redis, PostgreSQL, env server and the
scripted LLM server, each a subprocess; faults injected into the real parts.

Redelivery after ``kill -9`` is Celery's own: the broker's ``visibility_timeout`` is 16 s
here and the surviving worker scans for expired messages every 4 s, so it restores the dead
worker's unacknowledged messages within about 20 s; the reconciler is not running in that
test. The Redis-flush test relies on the reconciler
(default queue timeout: it reads the broker to find the lost messages).
Rollouts get 6 attempts with retries 2, 4, 8, 8, 8 s apart (capped at half the visibility
timeout), which outlasts a restart of the env server on a busy machine; the LLM-down test
enqueues with 2 attempts to stay short. Outages (env, LLM unreachable) do not use up
attempts for the first 30 s of a rollout's failures (``outage_budget_s``, 300 s by default).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.processes import llm_stats, set_llm_fault
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import func, select, update

from app.core.endpoint import (
    ENDPOINT_KEY,
    EndpointStatus,
    PolicyEndpoint,
    publish_endpoint,
    publish_policy,
)
from app.db.lifecycle import FINAL_ROLLOUT_STATUSES, AttemptStatus, PolicyVersionStatus
from app.db.models import Attempt, LlmCall, PolicyVersion, Rollout, Step
from app.db.session import session_scope
from workers.reconciler import broker_rollout_ids

pytestmark = pytest.mark.slow

BASE_LATENCY_MS = 20.0
HISTORY_STEPS = 2  # not the default (4): the workers must take it from their settings


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("rollout-stack")
    settings = isolated_settings(
        make_database,
        redis_url,
        root,
        worker_heartbeat_s=1.0,
        broker_visibility_timeout_s=16.0,
        retry_backoff_s=2.0,
        max_attempts=6,
        llm_retry_budget_s=2.0,
        llm_backoff_initial_s=0.1,
        llm_backoff_max_s=0.5,
        llm_timeout_s=2.0,
        env_timeout_s=5.0,
        step_timeout_s=10.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
        agent_history_steps=HISTORY_STEPS,
        outage_budget_s=30.0,
    )
    with RolloutStack.start(root, settings, llm_latency_ms=BASE_LATENCY_MS) as running:
        running.redis.delete(ENDPOINT_KEY)
        yield running


@pytest.fixture(autouse=True)
def healthy(stack: RolloutStack) -> Iterator[None]:
    """Every test starts and ends with a healthy LLM, no published endpoint, all workers up."""
    yield
    set_llm_fault(stack.llm, "ok", latency_ms=BASE_LATENCY_MS)
    stack.redis.delete(ENDPOINT_KEY)
    for worker in stack.workers:
        if not worker.alive():
            worker.start()
    if not stack.env.alive():
        stack.env.start()


def _attempt_errors(stack: RolloutStack, ids: list[uuid.UUID]) -> list[tuple[str, str | None]]:
    with session_scope(stack.sessions) as session:
        rows = session.execute(
            select(Attempt.status, Attempt.error).where(Attempt.rollout_id.in_(ids))
        ).all()
    return [(str(status), error) for status, error in rows]


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def _every_message_unacked(stack: RolloutStack, ids: list[uuid.UUID]) -> bool:
    """Every rollout of ``ids`` still to finish has its message in kombu's unacked index:
    taken by a worker, and recorded as taken."""
    with session_scope(stack.sessions) as session:
        pending = {
            str(rollout_id)
            for rollout_id in session.scalars(
                select(Rollout.id).where(
                    Rollout.id.in_(ids), Rollout.status.not_in(FINAL_ROLLOUT_STATUSES)
                )
            )
        }
    return pending <= broker_rollout_ids(stack.redis, queues=())


def test_200_rollouts_on_2_workers_x_8_threads_all_complete(stack: RolloutStack) -> None:
    goals = stack.goal_ids + stack.goal_ids[:5]
    ids = stack.enqueue(goal_ids=goals, group_size=10)
    assert len(ids) == 200
    counts = stack.wait(ids, timeout_s=300)
    assert counts == {"succeeded": 200}
    stack.check_training_data(ids)
    with session_scope(stack.sessions) as session:
        workers = set(session.scalars(select(Rollout.worker).where(Rollout.id.in_(ids))))
        rewards = session.scalars(select(Rollout.reward).where(Rollout.id.in_(ids))).all()
    assert len(workers) == 2, f"both worker processes took jobs: {workers}"
    assert sum(r == 1.0 for r in rewards) > 150, "the oracle policy solves most goals"


def test_kill_9_worker_mid_episode_is_redelivered_without_duplicate_data(
    stack: RolloutStack,
) -> None:
    set_llm_fault(stack.llm, "ok", latency_ms=300)
    victim = stack.workers[0]
    # No more rollouts than the two workers hold at once (8 threads each, one message a
    # thread), and the kill once every message is in kombu's unacked index: a message a
    # worker has popped but not yet recorded there (a few ms after its BRPOP) dies with
    # it, and only the reconciler sends it again (its own tests), not the redelivery
    # this test is about.
    ids = stack.enqueue(goal_ids=stack.goal_ids[:8], group_size=2)
    _wait_for(
        lambda: len(stack.running_attempts(victim)) >= 3 and _every_message_unacked(stack, ids),
        60,
        "victim never got work, or messages stayed on the queue",
    )
    killed = stack.running_attempts(victim)
    victim.kill()
    # Visibility 16 s + a 4 s restore scan + the episodes: well under a minute. Before
    # kombu 5.7 the scan ran every 100 s whatever the settings said.
    counts = stack.wait(ids, timeout_s=60)
    assert counts == {"succeeded": len(ids)}
    stack.check_training_data(ids)
    with session_scope(stack.sessions) as session:
        statuses = dict(
            session.execute(select(Attempt.id, Attempt.status).where(Attempt.id.in_(killed))).all()
        )
    assert set(statuses.values()) == {AttemptStatus.LOST}, statuses


def test_llm_5xx_and_timeouts_for_a_while_are_retried(stack: RolloutStack) -> None:
    set_llm_fault(stack.llm, "error_5xx", count=6)
    ids = stack.enqueue(goal_ids=stack.goal_ids[:3], group_size=2)
    assert stack.wait(ids, timeout_s=60) == {"succeeded": 6}
    set_llm_fault(stack.llm, "timeout", count=2, timeout_s=30)
    ids = stack.enqueue(goal_ids=stack.goal_ids[:2])
    assert stack.wait(ids, timeout_s=60) == {"succeeded": 2}
    stats = llm_stats(stack.llm)
    assert "error_5xx" in str(stats) and "timeout" in str(stats), stats
    stack.check_training_data(ids)


def test_llm_down_past_budget_fails_attempts_then_rollout_with_reason(
    stack: RolloutStack,
) -> None:
    set_llm_fault(stack.llm, "error_5xx")
    two_attempts = stack.settings.model_copy(update={"max_attempts": 2})
    ids = stack.enqueue(goal_ids=stack.goal_ids[:2], settings=two_attempts)
    assert stack.wait(ids, timeout_s=150) == {"failed": 2}
    errors = _attempt_errors(stack, ids)
    assert len(errors) > 4, "the outage's first 30 s of attempts were not counted"
    assert all(status == "failed" and "LLMUnavailable" in error for status, error in errors)
    with session_scope(stack.sessions) as session:
        rows = session.execute(
            select(Rollout.last_error, Rollout.attempts, Rollout.max_attempts).where(
                Rollout.id.in_(ids)
            )
        ).all()
    for reason, attempts, max_attempts in rows:
        assert attempts == max_attempts > 2
        assert reason.startswith(f"failed after {attempts} attempts: LLMUnavailable")
        assert "HTTP 5" in reason


def test_env_server_restart_mid_episode_fails_attempt_and_retries(stack: RolloutStack) -> None:
    set_llm_fault(stack.llm, "ok", latency_ms=250)
    ids = stack.enqueue(goal_ids=stack.goal_ids[:6])
    _wait_for(lambda: any(stack.running_attempts(w) for w in stack.workers), 30, "nothing started")
    time.sleep(0.5)
    stack.env.restart()
    counts = stack.wait(ids, timeout_s=120)
    errors = [e for status, e in _attempt_errors(stack, ids) if status == "failed"]
    assert counts == {"succeeded": 6}, errors
    assert errors and all(e.startswith("env error") for e in errors), errors
    stack.check_training_data(ids)


def test_env_server_down_15s_is_waited_out_without_using_up_attempts(
    stack: RolloutStack,
) -> None:
    """3 attempts (the default): the outage's failed attempts are recorded but not counted,
    so every rollout succeeds once the env server is back."""
    three = stack.settings.model_copy(update={"max_attempts": 3})
    stack.env.stop()
    ids = stack.enqueue(goal_ids=stack.goal_ids[:8], settings=three)
    time.sleep(15)
    stack.env.start()
    back = time.monotonic()
    assert stack.wait(ids, timeout_s=120) == {"succeeded": 8}
    recovery_s = time.monotonic() - back
    stack.check_training_data(ids)
    errors = [e for status, e in _attempt_errors(stack, ids) if status == "failed"]
    assert errors and all(e.startswith("env error") for e in errors), errors
    with session_scope(stack.sessions) as session:
        attempts = session.scalars(select(Rollout.attempts).where(Rollout.id.in_(ids))).all()
    assert max(attempts) > 3, "more tries than max_attempts: the outage's did not count"
    print(f"env down 15s: all 8 rollouts succeeded {recovery_s:.1f}s after it came back")


def test_redis_flushed_while_queued_postgres_restores_jobs_and_endpoint(
    stack: RolloutStack,
) -> None:
    """Default queue timeout (an hour): the reconciler finds the lost messages by reading
    the broker, and the endpoint record comes back from the active policy version."""
    assert stack.settings.rollout_queue_timeout_s == 3600.0
    with session_scope(stack.sessions) as session:
        published = PolicyEndpoint(base_url=stack.llm.url, model="policy", version=7)
        publish_policy(session, stack.redis, published)
    try:
        for worker in stack.workers:
            worker.stop()
        ids = stack.enqueue(goal_ids=stack.goal_ids[:5], group_size=2)
        assert stack.redis.llen("rollouts") >= 10
        stack.redis.flushdb()  # the test session's own Redis db only
        flushed = time.monotonic()
        for worker in stack.workers:
            worker.start()
        time.sleep(1.5)
        assert stack.statuses(ids) == {"queued": 10}, "the jobs are gone with the flush"
        assert stack.wait(ids, timeout_s=120, reconcile=True) == {"succeeded": 10}
        recovery_s = time.monotonic() - flushed
        stack.check_training_data(ids)
        with session_scope(stack.sessions) as session:
            versions = set(
                session.scalars(
                    select(LlmCall.policy_version)
                    .join(Attempt, Attempt.id == LlmCall.attempt_id)
                    .where(Attempt.rollout_id.in_(ids))
                )
            )
            attempts = set(session.scalars(select(Rollout.attempts).where(Rollout.id.in_(ids))))
        assert versions == {7}, "the restored endpoint, not the settings' fallback (v0)"
        assert attempts == {1}
        print(f"redis flush: all 10 rollouts succeeded {recovery_s:.1f}s after the flush")
    finally:
        with session_scope(stack.sessions) as session:
            session.execute(
                update(PolicyVersion)
                .where(PolicyVersion.version == 7)
                .values(status=PolicyVersionStatus.RETIRED)
            )


def test_prompts_show_the_configured_number_of_previous_steps(stack: RolloutStack) -> None:
    set_llm_fault(stack.llm, "garbage", count=2)  # two invalid steps first: a longer episode
    [rollout_id] = stack.enqueue(goal_ids=stack.goal_ids[:1])
    assert stack.wait([rollout_id], timeout_s=60) == {"succeeded": 1}
    with session_scope(stack.sessions) as session:
        prompts = session.scalars(
            select(LlmCall.request_messages)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id == rollout_id)
            .order_by(LlmCall.index)
        ).all()
    assert len(prompts) >= HISTORY_STEPS + 2, "the episode is long enough to cut its history"
    for index, messages in enumerate(prompts):
        shown = min(index, HISTORY_STEPS)
        if index:
            assert f"Previous steps (the last {shown} of {index}):" in messages[-1]["content"]


def test_malformed_model_output_is_invalid_steps_and_episode_goes_on(
    stack: RolloutStack,
) -> None:
    set_llm_fault(stack.llm, "garbage", count=4)
    ids = stack.enqueue(goal_ids=stack.goal_ids[:2])
    assert stack.wait(ids, timeout_s=60) == {"succeeded": 2}
    with session_scope(stack.sessions) as session:
        invalid = session.execute(
            select(Step.valid, Step.info)
            .join(Attempt, Attempt.id == Step.attempt_id)
            .where(Attempt.rollout_id.in_(ids), Step.valid.is_(False))
        ).all()
        attempts = session.scalar(select(func.max(Rollout.attempts)).where(Rollout.id.in_(ids)))
    assert len(invalid) >= 4
    assert all(info.get("error") for _, info in invalid)
    assert attempts == 1, "invalid output does not fail the attempt"


def test_new_policy_version_mid_run_is_recorded_and_nothing_fails(
    stack: RolloutStack,
) -> None:
    set_llm_fault(stack.llm, "ok", latency_ms=100)
    ids = stack.enqueue(goal_ids=stack.goal_ids, group_size=2)
    _wait_for(lambda: stack.statuses(ids).get("succeeded", 0) >= 4, 60, "no progress")
    publish_endpoint(stack.redis, PolicyEndpoint(base_url=stack.llm.url, model="policy", version=1))
    assert stack.wait(ids, timeout_s=120) == {"succeeded": len(ids)}
    stack.check_training_data(ids)
    with session_scope(stack.sessions) as session:
        calls = session.execute(
            select(LlmCall.attempt_id, LlmCall.index, LlmCall.policy_version)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id.in_(ids), Attempt.status == AttemptStatus.SUCCEEDED)
            .order_by(LlmCall.attempt_id, LlmCall.index)
        ).all()
        spans = session.execute(
            select(Rollout.policy_version_min, Rollout.policy_version_max).where(
                Rollout.id.in_(ids)
            )
        ).all()
    versions = {c.policy_version for c in calls}
    assert versions == {0, 1}
    by_attempt: dict[int, list[int]] = {}
    for call in calls:
        by_attempt.setdefault(call.attempt_id, []).append(call.policy_version)
    assert all(seq == sorted(seq) for seq in by_attempt.values()), "versions never go back"
    assert any(high == 1 for _, high in spans)


def test_paused_endpoint_workers_wait_then_resume(stack: RolloutStack) -> None:
    paused = PolicyEndpoint(
        base_url=stack.llm.url, model="policy", version=2, status=EndpointStatus.PAUSED
    )
    publish_endpoint(stack.redis, paused)
    ids = stack.enqueue(goal_ids=stack.goal_ids[:4])
    _wait_for(lambda: stack.statuses(ids).get("running", 0) == 4, 30, "not picked up")
    requests_before = llm_stats(stack.llm)["requests"]
    time.sleep(3)
    assert stack.statuses(ids) == {"running": 4}, "paused: workers wait, nothing fails"
    assert llm_stats(stack.llm)["requests"] == requests_before, "no LLM call while paused"
    serving = PolicyEndpoint(base_url=stack.llm.url, model="policy", version=2)
    publish_endpoint(stack.redis, serving)
    assert stack.wait(ids, timeout_s=60) == {"succeeded": 4}
    with session_scope(stack.sessions) as session:
        spans = session.execute(
            select(Rollout.attempts, Rollout.policy_version_min).where(Rollout.id.in_(ids))
        ).all()
    assert all(attempts == 1 and low == 2 for attempts, low in spans), spans
