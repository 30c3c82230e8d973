"""The Celery app, built from :class:`~app.config.Settings` (never at import).

``celery -A workers.celery_app worker`` finds :data:`app` through the module's
``__getattr__``, which builds it on first access from :func:`app.config.get_settings`.

Delivery guarantees: tasks are acknowledged late and a task whose worker process dies is
rejected back to the queue (``task_acks_late`` + ``task_reject_on_worker_lost``); each
worker thread reserves one message at a time (``worker_prefetch_multiplier=1``), so a
killed worker holds back at most ``concurrency`` messages. Redis hands an unacknowledged
message to another worker after the broker's ``visibility_timeout``; the task is
idempotent (see :mod:`workers.tasks`), so a second delivery is safe.

There is no result backend: Postgres, not Celery, records what a rollout produced.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from celery import Celery, bootsteps
from celery.worker.request import Request

from app.config import Settings, get_settings

ROLLOUT_TASK = "workers.rollout.run"
QUEUE_ROLLOUTS = "rollouts"
QUEUE_EVAL = "eval"
QUEUES = (QUEUE_ROLLOUTS, QUEUE_EVAL)

# Seconds between the soft limit (the task records the failure) and the hard kill.
HARD_LIMIT_GRACE_S = 30.0
# Seconds a message stays invisible beyond the hard limit, so that Redis never hands a
# task that is still within its limits to a second worker.
VISIBILITY_GRACE_S = 60.0


@dataclass(frozen=True)
class TimeLimits:
    """How long one rollout may take, derived from the longest allowed episode.

    ``episode_s = max_steps * step_timeout_s + episode_margin_s`` (every step is bounded by
    ``step_timeout_s``: one LLM call plus one env request); ``soft_s = episode_s``;
    ``hard_s = soft_s + 30``; ``visibility_s = hard_s + 60`` unless
    ``broker_visibility_timeout_s`` overrides it (tests make it short to see redelivery
    quickly). Under the threads pool Celery cannot enforce soft/hard limits, so the task
    also stops an episode itself once ``episode_s`` has passed.
    """

    episode_s: float
    soft_s: float
    hard_s: float
    visibility_s: float


def time_limits(settings: Settings) -> TimeLimits:
    episode = settings.max_steps * settings.step_timeout_s + settings.episode_margin_s
    hard = episode + HARD_LIMIT_GRACE_S
    visibility = settings.broker_visibility_timeout_s or hard + VISIBILITY_GRACE_S
    return TimeLimits(episode_s=episode, soft_s=episode, hard_s=hard, visibility_s=visibility)


def restore_interval_s(visibility_s: float) -> float:
    """Seconds between scans for expired unacknowledged messages: a quarter of the
    visibility timeout, between 1 and 10 s."""
    return max(1.0, min(10.0, visibility_s / 4))


def queue_for_mode(mode: str) -> str:
    """Train rollouts go to ``rollouts``, eval rollouts to ``eval`` (separate worker pools)."""
    return QUEUE_EVAL if str(mode) == "eval" else QUEUE_ROLLOUTS


class _LoopWaker:
    """A pipe the worker's event loop reads: a byte written to it ends the loop's sleep."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        hub.add_reader(self._read, self._drain)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # a byte already pending is enough
            os.write(self._write, b"\0")

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        self._hub.remove_reader(self._read)
        os.close(self._read)
        os.close(self._write)


_waker: _LoopWaker | None = None


def wake_event_loop() -> None:
    """Make the worker's event loop run a turn now (a no-op outside a worker)."""
    waker = _waker
    if waker is not None:
        waker.wake()


class LoopWaker(bootsteps.StartStopStep):
    """Lets a pool thread wake the event loop once it has acknowledged its message.

    With ``task_acks_late`` and ``worker_prefetch_multiplier=1`` a worker whose threads
    are all busy holds no BRPOP on Redis; kombu issues the next one at the top of an
    event-loop turn. A thread of the threads pool acknowledging its task does not wake
    the loop, which sleeps until its next timer, up to a second: measured, threads stood
    idle for 0.7-0.9 s between 1.2-s episodes. :class:`WakingRequest` wakes it instead.
    """

    requires = ("celery.worker.components:Hub",)

    def start(self, worker: Any) -> None:
        global _waker
        if getattr(worker, "hub", None) is not None:
            _waker = _LoopWaker(worker.hub)

    def stop(self, worker: Any) -> None:
        global _waker
        waker, _waker = _waker, None
        if waker is not None:
            waker.close()


class WakingRequest(Request):
    """A task request that wakes the event loop once its message is settled, so the
    freed thread gets the next message at once (see :class:`LoopWaker`)."""

    def acknowledge(self) -> None:
        super().acknowledge()
        wake_event_loop()

    def reject(self, requeue: bool = False) -> None:
        super().reject(requeue=requeue)
        wake_event_loop()


def create_celery(settings: Settings) -> Celery:
    """A Celery app on the configured Redis, with the rollout task registered."""
    limits = time_limits(settings)
    broker = settings.resolved_redis_url()
    celery = Celery("wsrl", broker=broker, include=["workers.tasks"])
    celery.conf.update(
        task_default_queue=QUEUE_ROLLOUTS,
        task_routes={ROLLOUT_TASK: {"queue": QUEUE_ROLLOUTS}},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_soft_time_limit=limits.soft_s,
        task_time_limit=limits.hard_s,
        task_serializer="json",
        accept_content=["json"],
        task_send_sent_event=True,
        worker_send_task_events=True,
        worker_prefetch_multiplier=1,
        worker_pool="threads",
        worker_concurrency=settings.worker_concurrency,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": limits.visibility_s,
            # kombu scans for expired unacknowledged messages every interval x throttle
            # seconds (100 s by default); scan every few seconds instead, so a dead
            # worker's jobs come back about visibility_timeout after it died.
            "unacked_restore_interval": restore_interval_s(limits.visibility_s),
            "unacked_restore_throttle": 1,
            # Pub/sub of events is scoped to the Redis db, so two deployments (or test
            # runs) on one Redis server do not see each other's workers.
            "fanout_prefix": True,
            "fanout_patterns": True,
        },
    )
    celery.steps["worker"].add(LoopWaker)
    return celery


_app: Celery | None = None


def get_app() -> Celery:
    """The process-wide app, built once from :func:`get_settings`."""
    global _app
    if _app is None:
        _app = create_celery(get_settings())
    return _app


def __getattr__(name: str) -> Celery:
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
