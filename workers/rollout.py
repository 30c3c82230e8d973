"""One delivery of a rollout job: open an attempt, play the episode, record the outcome.

Idempotent and safe to deliver more than once (jobs are acknowledged late):

- a finished rollout is a no-op, and so is a rollout whose running attempt is alive
  (its worker's heartbeat keeps the deadline ahead): that message is a duplicate;
- otherwise every delivery opens a new attempt (previous + 1); an attempt left
  ``running`` by a dead worker is marked ``lost`` and its rows are never used for training;
- a failed attempt (LLM unavailable, env error, budget exceeded, ...) is recorded with
  its reason and the rollout is queued again until ``max_attempts``, then failed.
"""

from __future__ import annotations

import logging
import uuid
from enum import StrEnum
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from app.core.enqueue import SAMPLING_KEYS, on_commit, send_after_commit
from app.core.env_client import EnvError
from app.core.llm import LLMError, Sampling
from app.db.session import session_scope
from workers.agent import run_episode
from workers.external_agent import ExternalAgentError, play_external_attempt
from workers.persistence import (
    AttemptStart,
    AttemptSuperseded,
    EpisodeOutcome,
    fail_attempt,
    finish_attempt,
    start_attempt,
)
from workers.recording import AttemptRecorder, EpisodeBudgetExceeded, LogPublisher
from workers.runtime import WorkerRuntime, liveness_s

logger = logging.getLogger(__name__)


class Outcome(StrEnum):
    """What one delivery did (for logs and tests)."""

    NOOP = "noop"
    SUCCEEDED = "succeeded"
    RETRY = "retry"
    FAILED = "failed"
    SUPERSEDED = "superseded"


def sampling_from(settings_sampling: Sampling, overrides: dict[str, Any] | None) -> Sampling:
    """The enqueued sampling parameters over the settings' defaults."""
    if not overrides:
        return settings_sampling
    known = {k: v for k, v in overrides.items() if k in SAMPLING_KEYS}
    return Sampling(**{**settings_sampling.__dict__, **known})


def retry_delay_s(backoff_s: float, attempt_number: int) -> float:
    """Exponential: ``backoff_s * 2 ** (number - 1)``, so retries outlast a short outage
    (an env server restarting) instead of burning every attempt in a second. The caller
    caps it at half the broker's visibility timeout."""
    return backoff_s * 2 ** (attempt_number - 1)


def _failure(exc: BaseException) -> tuple[str, bool]:
    """``(reason, retryable)`` of an exception that ended an attempt."""
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


def execute_rollout(runtime: WorkerRuntime, celery: Celery, rollout_id: uuid.UUID) -> Outcome:
    """Run one delivery of ``rollout_id`` (see the module docstring)."""
    settings = runtime.settings
    with session_scope(runtime.sessions) as session:
        start = start_attempt(
            session, rollout_id, worker=runtime.worker, liveness_s=liveness_s(settings)
        )
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
    )
    runtime.active.add(rollout_id)
    try:
        return _play(runtime, celery, start, recorder, publisher)
    finally:
        runtime.active.discard(rollout_id)


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
            result = run_episode(
                runtime.env,
                runtime.llm,
                start.goal_id,
                recorder,
                max_steps=settings.max_steps,
                mode=settings.agent_mode,
                sampling=sampling_from(Sampling.from_settings(settings), start.sampling),
                history_steps=settings.agent_history_steps,
                constrain_actions=settings.agent_constrain_actions,
                worker=runtime.worker,
                rollout=f"{str(start.rollout_id)[:8]}#{start.number}",
            )
    except AttemptSuperseded as exc:
        logger.warning("rollout %s attempt %d superseded: %s", start.rollout_id, start.number, exc)
        publisher.publish("superseded")
        return Outcome.SUPERSEDED
    except Exception as exc:
        reason, retryable = _failure(exc)
        if reason.startswith("unexpected"):
            logger.exception("rollout %s attempt %d crashed", start.rollout_id, start.number)
        return _record_failure(runtime, celery, start, recorder, publisher, reason, retryable)
    outcome = EpisodeOutcome(
        reward=result.reward, num_steps=result.num_steps, reward_parts=result.reward_parts
    )
    with session_scope(runtime.sessions) as session:
        finished = finish_attempt(
            session,
            start.attempt_id,
            outcome,
            recorder.take_pending(),
            policy_versions=None if agent_url else result.policy_versions,
        )
    if not finished:
        publisher.publish("superseded")
        return Outcome.SUPERSEDED
    publisher.publish("succeeded", reward=result.reward, steps=result.num_steps)
    return Outcome.SUCCEEDED


def _record_failure(
    runtime: WorkerRuntime,
    celery: Celery,
    start: AttemptStart,
    recorder: AttemptRecorder,
    publisher: LogPublisher,
    reason: str,
    retryable: bool,
) -> Outcome:
    logger.warning("rollout %s attempt %d failed: %s", start.rollout_id, start.number, reason)
    with session_scope(runtime.sessions) as session:
        decision = fail_attempt(
            session,
            start.attempt_id,
            reason,
            queue_timeout_s=runtime.settings.rollout_queue_timeout_s,
            rows=recorder.take_pending(),
            retryable=retryable,
        )
        if decision.retry:
            jobs = [(start.rollout_id, decision.mode)]
            # Redis hands an ETA message held longer than the visibility timeout to a
            # second worker, so the delay stays well below it.
            delay = min(
                retry_delay_s(runtime.settings.retry_backoff_s, start.number),
                runtime.limits.visibility_s / 2,
            )
            on_commit(session, lambda: send_after_commit(celery, jobs, countdown=delay))
    if decision.superseded:
        return Outcome.SUPERSEDED
    publisher.publish("failed", reason=reason, retry=decision.retry)
    return Outcome.RETRY if decision.retry else Outcome.FAILED
