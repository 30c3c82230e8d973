"""The Celery app every producer and the workers share: queues, task name, limits, config.

Built from :class:`~app.config.Settings`, never at import. The API, the trainer and the CLI
enqueue with :func:`create_celery`; the worker process adds its own pieces on top
(:mod:`workers.celery_app`: the task module and the event-loop waker).

Delivery guarantees: tasks are acknowledged late and a task whose worker process dies is
rejected back to the queue (``task_acks_late`` + ``task_reject_on_worker_lost``); each
worker thread reserves one message at a time (``worker_prefetch_multiplier=1``), so a
killed worker holds back at most ``concurrency`` messages. Redis hands an unacknowledged
message to another worker after the broker's ``visibility_timeout``: kombu scans for such
messages only every 100 s, so the workers scan every :func:`restore_interval_s` seconds
themselves (:class:`workers.celery_app.RestoreUnacked`). The task is idempotent (see
:mod:`workers.rollout`), so a second delivery is safe.

There is no result backend: Postgres, not Celery, records what a rollout produced.
"""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from app.config import Settings
from app.core.redis_client import REDIS_CONNECT_TIMEOUT_S

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


def restore_interval_s(visibility_s: float) -> int:
    """Whole seconds between the workers' scans for expired unacknowledged messages: a
    quarter of the visibility timeout, between 1 and 10 s."""
    return max(1, min(10, int(visibility_s / 4)))


def queue_for_mode(mode: str) -> str:
    """Train rollouts go to ``rollouts``, eval rollouts to ``eval`` (separate worker pools)."""
    return QUEUE_EVAL if str(mode) == "eval" else QUEUE_ROLLOUTS


def create_celery(settings: Settings) -> Celery:
    """A Celery app on the configured Redis, configured as the workers consume."""
    limits = time_limits(settings)
    broker = settings.resolved_redis_url()
    celery = Celery("wsrl", broker=broker)
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
            # Pub/sub of events is scoped to the Redis db, so two deployments (or test
            # runs) on one Redis server do not see each other's workers.
            "fanout_prefix": True,
            "fanout_patterns": True,
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
        },
    )
    return celery
