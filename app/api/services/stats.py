"""Pipeline statistics: the Celery side from Redis, the RL side from Postgres.

Queue depth is the length of each Celery queue's Redis list (messages not yet taken by
a worker); "in flight" is the number of rollouts in ``running``. Both the stats route and
the Prometheus collector read them through here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from redis import Redis
from sqlalchemy import Integer, func, or_, select
from sqlalchemy.orm import Session

from app.api.schemas import Stats, VersionStats
from app.core.celery import QUEUES
from app.core.failures import INFRASTRUCTURE_MARKERS
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Rollout


def queue_depths(redis: Redis, queues: tuple[str, ...] = QUEUES) -> dict[str, int]:
    """Messages waiting per Celery queue (one pipelined LLEN per queue)."""
    pipe = redis.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
    return {queue: int(depth) for queue, depth in zip(queues, pipe.execute(), strict=True)}


def rollouts_by_status(session: Session) -> dict[str, int]:
    """Count of rollouts per status (every status present, zero included)."""
    counts = {
        state: count
        for state, count in session.execute(
            select(Rollout.status, func.count()).group_by(Rollout.status)
        )
    }
    return {state.value: int(counts.get(state, 0)) for state in RolloutStatus}


def by_policy_version(session: Session, mode: RolloutMode | None = None) -> list[VersionStats]:
    """Reward and success of finished episodes, by the newest version that served them."""
    query = (
        select(
            Rollout.policy_version_max,
            func.count(),
            func.avg(Rollout.reward),
            func.avg(Rollout.success.cast(Integer)),
        )
        .where(Rollout.status == RolloutStatus.SUCCEEDED)
        .group_by(Rollout.policy_version_max)
        .order_by(Rollout.policy_version_max.asc().nulls_first())
    )
    if mode is not None:
        query = query.where(Rollout.mode == mode)
    return [
        VersionStats(
            policy_version=version,
            rollouts=int(count),
            mean_reward=None if reward is None else float(reward),
            success_rate=None if success is None else float(success),
        )
        for version, count, reward, success in session.execute(query)
    ]


def failed_infrastructure(session: Session) -> int:
    """Failed rollouts whose last error names a part of the deployment
    (:func:`app.core.failures.infrastructure_reason`, in SQL)."""
    markers = INFRASTRUCTURE_MARKERS
    names_a_part = or_(*(Rollout.last_error.contains(m, autoescape=True) for m in markers))
    count = session.scalar(
        select(func.count())
        .select_from(Rollout)
        .where(Rollout.status == RolloutStatus.FAILED, names_a_part)
    )
    return int(count or 0)


def completed_per_minute(session: Session, window_minutes: int) -> float:
    """Rollouts that finished (succeeded or failed) per minute over the last window."""
    since = datetime.now(UTC) - timedelta(minutes=window_minutes)
    done = session.scalar(
        select(func.count())
        .select_from(Rollout)
        .where(
            Rollout.status.in_([RolloutStatus.SUCCEEDED, RolloutStatus.FAILED]),
            Rollout.finished_at >= since,
        )
    )
    return (done or 0) / window_minutes


def collect_stats(
    session: Session, redis: Redis, *, window_minutes: int, mode: RolloutMode | None
) -> Stats:
    statuses = rollouts_by_status(session)
    return Stats(
        queue_depth=queue_depths(redis),
        in_flight=statuses[RolloutStatus.RUNNING.value],
        by_status=statuses,
        failed_infrastructure=failed_infrastructure(session),
        completed_per_minute=completed_per_minute(session, window_minutes),
        window_minutes=window_minutes,
        by_policy_version=by_policy_version(session, mode),
    )
