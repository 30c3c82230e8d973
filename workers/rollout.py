"""One delivery of a rollout job: open an attempt, play the episode, record the outcome.

Idempotent and safe to deliver more than once (jobs are acknowledged late):

- a finished rollout is a no-op, and so is a rollout whose running attempt is alive
  (its worker's heartbeat keeps the deadline ahead): that message is a duplicate;
- otherwise every delivery opens a new attempt (previous + 1); an attempt left
  ``running`` by a dead worker is marked ``lost`` and its rows are never used for training;
- a failed attempt (LLM unavailable, env error, budget exceeded, ...) is recorded with
  its reason and the rollout is queued again until ``max_attempts``, then failed;
- the built-in agent plays the agent protocol published with the policy
  (:func:`played_protocol`); a worker whose explicit settings contradict it fails the
  attempt before playing a step (reason ``worker settings: agent protocol mismatch: ...``,
  logged as an error), and the rollout is queued again for another worker;
- an infrastructure failure (env server, LLM server, Postgres or Redis unreachable) is
  not the episode's: while ``outage_budget_s`` lasts (5 minutes by default, counted from
  the rollout's first failed attempt) it does not use up an attempt, and retries back off
  up to ``retry_backoff_max_s``, so a rollout outlives a minute-long outage of any part;
- a delivery never ends without its outcome recorded: while Postgres is unreachable the
  worker thread keeps the (unacknowledged) message and retries writing, within the same
  budget; past it the task rejects the message back to the queue
  (:func:`workers.tasks.run_rollout`) rather than acknowledging it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from redis.exceptions import RedisError

from app.core.agent import AgentProtocol, AgentProtocolMismatch, agent_protocol
from app.core.endpoint import EndpointUnavailable
from app.core.enqueue import on_commit, send_after_commit
from app.core.env_client import EnvError
from app.core.llm import LLMError, LLMUnavailable, Sampling
from app.db.session import DATABASE_DOWN, session_scope
from app.environments import get_environment
from workers.external_agent import ExternalAgentError, play_external_attempt
from workers.persistence import (
    AttemptStart,
    AttemptSuperseded,
    EpisodeOutcome,
    FailureDecision,
    fail_attempt,
    finish_attempt,
    start_attempt,
)
from workers.player import run_episode
from workers.recording import AttemptRecorder, EpisodeBudgetExceeded, LogPublisher
from workers.runtime import WorkerRuntime, liveness_s

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Outcome(StrEnum):
    """What one delivery did (for logs and tests)."""

    NOOP = "noop"
    SUCCEEDED = "succeeded"
    RETRY = "retry"
    FAILED = "failed"
    SUPERSEDED = "superseded"


def retry_delay_s(backoff_s: float, attempt_number: int) -> float:
    """Exponential: ``backoff_s * 2 ** (number - 1)``, so retries outlast a short outage
    (an env server restarting) instead of burning every attempt in a second. The caller
    caps it at half the broker's visibility timeout."""
    return backoff_s * 2 ** (attempt_number - 1)


def infrastructure_failure(exc: BaseException) -> bool:
    """An outage of a part the episode depends on, not something the episode did: the env
    server unreachable, failing (5xx, 429) or restarted (it forgot the session: 404/410),
    the LLM server unavailable past its retry budget, Postgres or Redis unreachable."""
    if isinstance(exc, EnvError):
        return exc.retryable or exc.status_code in (404, 410)
    return isinstance(exc, (LLMUnavailable, EndpointUnavailable, RedisError, *DATABASE_DOWN))


def played_protocol(runtime: WorkerRuntime) -> AgentProtocol:
    """The agent protocol of this attempt: the published policy's (read once, as the
    episode starts), else the worker's settings when the publisher named none. Raises
    :class:`AgentProtocolMismatch` when a setting this worker was given explicitly
    contradicts the published protocol."""
    endpoint = runtime.endpoints.current()
    if endpoint.protocol is None:
        return AgentProtocol.from_settings(runtime.settings)
    source = f"policy v{endpoint.version} (the protocol its trainer published)"
    return agent_protocol(runtime.settings, source, endpoint.protocol.to_dict())


def _failure(exc: BaseException) -> tuple[str, bool]:
    """``(reason, retryable)`` of an exception that ended an attempt."""
    if isinstance(exc, AgentProtocolMismatch):
        # Retryable: the rollout goes back to the queue, where a worker configured to play
        # the published protocol (or this one, fixed) takes it; nothing is played wrong.
        return f"worker settings: {exc}", True
    if isinstance(exc, EnvError):
        # Even a 404/410 is worth another attempt: a restarted env server forgets its
        # sessions, and the next attempt opens a new one.
        return f"env error: {exc.reason}", True
    if isinstance(exc, LLMError):
        return f"{type(exc).__name__}: {exc}", True
    if isinstance(exc, ExternalAgentError):
        return f"external agent: {exc.reason}", True
    if isinstance(exc, EpisodeBudgetExceeded):
        return f"timeout: {exc}", True
    if isinstance(exc, SoftTimeLimitExceeded):
        return "timeout: Celery soft time limit exceeded", True
    return f"unexpected {type(exc).__name__}: {exc}", True


def until_recorded(
    write: Callable[[], T],
    *,
    budget_s: float,
    backoff_s: float,
    backoff_max_s: float,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``write`` (one transaction) until Postgres takes it or ``budget_s`` passes.

    Only an unreachable database is retried (connection refused, dropped, server shutting
    down); any other error is raised at once. The caller's message stays unacknowledged
    meanwhile, so nothing is acknowledged that was not recorded.
    """
    deadline = time.monotonic() + budget_s
    delay = backoff_s
    while True:
        try:
            return write()
        except DATABASE_DOWN as exc:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            logger.warning("database unreachable while %s; retrying in %.1fs: %s", what, delay, exc)
            sleep(min(delay, remaining))
            delay = min(delay * 2, backoff_max_s)


def _record(runtime: WorkerRuntime, write: Callable[[], T], what: str) -> T:
    settings = runtime.settings
    return until_recorded(
        write,
        budget_s=settings.outage_budget_s,
        backoff_s=settings.llm_backoff_initial_s,
        backoff_max_s=settings.llm_backoff_max_s,
        what=what,
    )


def execute_rollout(runtime: WorkerRuntime, celery: Celery, rollout_id: uuid.UUID) -> Outcome:
    """Run one delivery of ``rollout_id`` (see the module docstring)."""
    settings = runtime.settings

    def open_attempt() -> AttemptStart | None:
        with session_scope(runtime.sessions) as session:
            return start_attempt(
                session, rollout_id, worker=runtime.worker, liveness_s=liveness_s(settings)
            )

    start = _record(runtime, open_attempt, f"starting rollout {rollout_id}")
    if start is None:
        logger.info(
            "rollout %s: finished, out of attempts or running elsewhere; nothing to run",
            rollout_id,
        )
        return Outcome.NOOP
    publisher = LogPublisher(
        runtime.redis,
        settings.logs_channel,
        rollout_id=rollout_id,
        attempt=start.number,
        worker=runtime.worker,
        queue=runtime.log_queue,
    )
    publisher.publish("started", goal=start.goal_id, mode=start.mode)
    recorder = AttemptRecorder(
        runtime.sessions,
        start.attempt_id,
        publisher,
        flush_every=settings.record_flush_every,
        budget_s=runtime.limits.episode_s,
        stopped=lambda: runtime.active.stopped(start.attempt_id),
    )
    runtime.active.add(start.attempt_id, rollout_id)
    try:
        return _play(runtime, celery, start, recorder, publisher)
    finally:
        runtime.active.discard(start.attempt_id)


def _play(
    runtime: WorkerRuntime,
    celery: Celery,
    start: AttemptStart,
    recorder: AttemptRecorder,
    publisher: LogPublisher,
) -> Outcome:
    settings = runtime.settings
    try:
        # --- external agent (agent-as-a-service): see workers/external_agent.py ---
        agent_url = start.agent_url or settings.default_agent_url
        if agent_url:
            result = play_external_attempt(runtime, start, recorder, agent_url)
        else:
            environment = get_environment(start.environment, settings)
            result = run_episode(
                runtime.env_client(environment),
                runtime.llm,
                start.goal_id,
                recorder,
                protocol=played_protocol(runtime),
                environment=environment,
                goal_spec=start.goal_spec,
                instruction=start.instruction,
                sampling=Sampling.from_settings(settings).overridden(start.sampling),
                start=start.start,
                worker=runtime.worker,
                rollout=f"{str(start.rollout_id)[:8]}#{start.number}",
            )
    except AttemptSuperseded as exc:
        logger.warning("rollout %s attempt %d superseded: %s", start.rollout_id, start.number, exc)
        publisher.publish("superseded")
        return Outcome.SUPERSEDED
    except Exception as exc:
        reason, retryable = _failure(exc)
        infrastructure = infrastructure_failure(exc)
        if reason.startswith("unexpected") and not infrastructure:
            logger.exception("rollout %s attempt %d crashed", start.rollout_id, start.number)
        if isinstance(exc, AgentProtocolMismatch):
            logger.error("worker %s refuses rollout %s: %s", runtime.worker, start.rollout_id, exc)
        return _record_failure(
            runtime, celery, start, recorder, publisher, reason, retryable, infrastructure
        )
    outcome = EpisodeOutcome(
        reward=result.reward,
        num_steps=result.num_steps,
        success=result.success,
        reward_parts=result.reward_parts,
    )
    pending = recorder.take_pending()

    def finish() -> bool:
        with session_scope(runtime.sessions) as session:
            return finish_attempt(
                session,
                start.attempt_id,
                outcome,
                pending,
                policy_versions=None if agent_url else result.policy_versions,
            )

    finished = _record(runtime, finish, f"finishing rollout {start.rollout_id}")
    if not finished:
        publisher.publish("superseded")
        return Outcome.SUPERSEDED
    publisher.publish(
        "succeeded", reward=result.reward, steps=result.num_steps, success=result.success
    )
    return Outcome.SUCCEEDED


def _record_failure(
    runtime: WorkerRuntime,
    celery: Celery,
    start: AttemptStart,
    recorder: AttemptRecorder,
    publisher: LogPublisher,
    reason: str,
    retryable: bool,
    infrastructure: bool = False,
) -> Outcome:
    logger.warning("rollout %s attempt %d failed: %s", start.rollout_id, start.number, reason)
    settings = runtime.settings
    pending = recorder.take_pending()
    # Redis hands an ETA message held longer than the visibility timeout to a second
    # worker, so the delay stays well below it.
    delay = min(
        retry_delay_s(settings.retry_backoff_s, start.number),
        settings.retry_backoff_max_s,
        runtime.limits.visibility_s / 2,
    )

    def record() -> FailureDecision:
        with session_scope(runtime.sessions) as session:
            decision = fail_attempt(
                session,
                start.attempt_id,
                reason,
                queue_timeout_s=settings.rollout_queue_timeout_s,
                rows=pending,
                retryable=retryable,
                outage_budget_s=settings.outage_budget_s if infrastructure else None,
            )
            if decision.retry:
                jobs = [(start.rollout_id, decision.mode)]
                on_commit(session, lambda: send_after_commit(celery, jobs, countdown=delay))
            return decision

    decision = _record(runtime, record, f"recording the failure of rollout {start.rollout_id}")
    if decision.free:
        logger.info(
            "rollout %s attempt %d: infrastructure failure, attempt not counted; retry in %.0fs",
            start.rollout_id,
            start.number,
            delay,
        )
    if decision.superseded:
        return Outcome.SUPERSEDED
    publisher.publish("failed", reason=reason, retry=decision.retry)
    return Outcome.RETRY if decision.retry else Outcome.FAILED
