"""Pipeline statistics in one JSON document (the numbers `wsrl status` shows)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import RedisDep, SessionDep
from app.api.schemas import Stats
from app.api.services.stats import collect_stats
from app.db.lifecycle import RolloutMode

router = APIRouter(prefix="/v1/stats", tags=["stats"])


@router.get("", response_model=Stats)
def get_stats(
    session: SessionDep,
    redis: RedisDep,
    window_minutes: Annotated[
        int, Query(ge=1, le=1440, description="Window of completed_per_minute.")
    ] = 5,
    mode: Annotated[
        RolloutMode | None, Query(description="Only this mode in by_policy_version.")
    ] = None,
) -> Stats:
    """Queue depth per Celery queue, rollouts in flight and by status, throughput, and
    mean reward / success rate of finished episodes per policy version."""
    return collect_stats(session, redis, window_minutes=window_minutes, mode=mode)
