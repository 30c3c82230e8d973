"""Liveness of the API's dependencies: Postgres and Redis."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response, status
from sqlalchemy import text

from app.api.deps import RedisDep
from app.api.schemas import Health

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    responses={503: {"model": Health, "description": "Postgres or Redis failing (named)."}},
)
def health(request: Request, redis: RedisDep, response: Response) -> Health:
    """200 when both answer; 503 naming the failing one (with its error) otherwise."""
    db_state = redis_state = "ok"
    try:
        with request.app.state.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any driver error means "not healthy", reported not raised
        logger.warning("health: database check failed: %s", exc)
        db_state = f"error: {exc.__class__.__name__}: {exc}"[:300]
    try:
        redis.ping()
    except Exception as exc:
        logger.warning("health: redis check failed: %s", exc)
        redis_state = f"error: {exc.__class__.__name__}: {exc}"[:300]
    healthy = db_state == "ok" and redis_state == "ok"
    if not healthy:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(status="ok" if healthy else "degraded", db=db_state, redis=redis_state)
