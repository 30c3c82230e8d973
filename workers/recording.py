"""The episode recorder of the rollout task: rows to Postgres, log lines to Redis.

Steps and LLM calls are buffered and written in batches (every ``record_flush_every``
records, and with the attempt's final transaction), so a 10-step episode costs about two
transactions instead of twenty. Each record is taken from the buffer once, so no row is
written twice; a flush is idempotent on ``(attempt_id, index)`` all the same, and the
built-in agent's successful finish copies its rows in
(``workers.persistence._copy_new_rows``). A flush that finds its attempt no longer
``running`` raises :class:`~workers.persistence.AttemptSuperseded`, which stops the
episode early; so does the next record after the worker's heartbeat found the attempt's
rollout no longer running (``stopped``: cancelled, or ended by another attempt).

Log lines (``[TASK]/[STEP]/[DONE]``) and lifecycle events are published as JSON on the
``logs_channel`` pub/sub channel for ``wsrl watch`` (in batches, from the worker's
:class:`~workers.log_queue.PublishQueue`); publishing is best effort and never fails an
episode.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.orm import Session, sessionmaker

from app.core.agent import NO_ACTION, StepRecord
from app.core.llm import LLMCall, call_row
from app.core.redis_client import db_channel
from app.db.session import session_scope
from app.db.types import without_nul
from workers.log_queue import PublishQueue
from workers.persistence import AttemptSuperseded, PendingRows, write_rows

logger = logging.getLogger(__name__)

# Keys of the env's step info that are not worth a row (the next prompt shows them).
_DROPPED_INFO = frozenset({"available_actions"})


class EpisodeBudgetExceeded(RuntimeError):
    """The episode ran longer than ``max_steps x step_timeout_s + margin``."""


def step_row(step: StepRecord) -> dict[str, Any]:
    """A ``steps`` row; the raw reply and the latency split go into ``info``."""
    info = {k: v for k, v in step.info.items() if k not in _DROPPED_INFO}
    info.update(
        reply=step.reply,
        error=step.error,
        llm_latency_ms=step.llm_latency_ms,
        env_latency_ms=step.env_latency_ms,
        policy_version=step.policy_version,
    )
    return {
        "index": step.index,
        "action": without_nul(step.action if step.action is not None else NO_ACTION),
        "observation": without_nul(step.observation),
        "reward": step.reward,
        "done": step.done,
        "valid": step.valid,
        "latency_ms": step.latency_ms,
        "info": info,  # jsonb: the engine's serializer replaces NULs
    }


class LogPublisher:
    """Best-effort JSON messages on the logs channel, tagged with rollout and attempt.

    With a ``queue`` (the worker's) messages go out from its thread in batches; without
    one each is published at once.
    """

    def __init__(
        self,
        redis: Redis,
        channel: str,
        *,
        rollout_id: uuid.UUID,
        attempt: int,
        worker: str,
        queue: PublishQueue | None = None,
    ) -> None:
        self._redis = redis
        self._channel = db_channel(redis, channel)
        self._queue = queue
        self._base = {"rollout": str(rollout_id), "attempt": attempt, "worker": worker}

    def publish(self, kind: str, **fields: Any) -> None:
        if self._queue is not None and not self._queue.wanted(self._channel):
            return  # nobody listens (PublishQueue)
        message = {**self._base, "kind": kind, "ts": time.time(), **fields}
        payload = orjson.dumps(message, default=str)
        if self._queue is not None:
            self._queue.put(self._channel, payload)
            return
        try:
            self._redis.publish(self._channel, payload)
        except RedisError as exc:
            logger.debug("could not publish %s log: %s", kind, exc)


class AttemptRecorder:
    """Buffers one attempt's records and writes them in batches (an ``EpisodeRecorder``)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        attempt_id: int,
        publisher: LogPublisher,
        *,
        flush_every: int,
        budget_s: float,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self._sessions = sessions
        self._stopped = stopped
        self.attempt_id = attempt_id
        self._publisher = publisher
        self._flush_every = max(1, flush_every)
        self._deadline = time.monotonic() + budget_s
        self._budget_s = budget_s
        self.pending = PendingRows()
        self.num_calls = 0

    def on_llm_call(self, call: LLMCall) -> None:
        self.pending.calls.append(call_row(self.num_calls, call))
        self.num_calls += 1
        self._after_record()

    def on_step(self, step: StepRecord) -> None:
        self.pending.steps.append(step_row(step))
        self._after_record()

    def on_log(self, line: str) -> None:
        self._publisher.publish("log", line=line)

    def _after_record(self) -> None:
        if self._stopped():
            raise AttemptSuperseded(
                "its rollout is no longer running (cancelled, or ended by another attempt): "
                f"stopped after {self.num_calls} LLM calls"
            )
        if len(self.pending) >= self._flush_every:
            self.flush()
        if time.monotonic() > self._deadline:
            raise EpisodeBudgetExceeded(
                f"episode exceeded its budget of {self._budget_s:g}s "
                "(max_steps x step_timeout_s + episode_margin_s)"
            )

    def flush(self) -> None:
        """Write the buffered rows now (one transaction)."""
        if not self.pending:
            return
        rows = self.pending.take()
        with session_scope(self._sessions) as session:
            write_rows(session, self.attempt_id, rows)

    def take_pending(self) -> PendingRows:
        """The rows not written yet, for the attempt's final transaction."""
        return self.pending.take()
