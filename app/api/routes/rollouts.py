"""Rollouts: enqueue and cancel episodes (POST, token required), read their status (GET)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from app.api.deps import SessionDep, WriteAuth
from app.api.errors import get_or_404
from app.api.schemas import (
    UNAUTHORIZED,
    UNPARSABLE,
    AttemptOut,
    RolloutCancel,
    RolloutCreate,
    RolloutDetail,
    RolloutOut,
    RolloutPage,
    RolloutsCancelled,
    RolloutsCreated,
    error_responses,
)
from app.core.enqueue import (
    EnqueueError,
    IdempotencyConflict,
    cancel_rollouts,
    enqueue_rollouts,
)
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Rollout

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])
writes = APIRouter(
    prefix="/v1/rollouts",
    tags=["rollouts"],
    dependencies=[WriteAuth],
    responses=error_responses(UNAUTHORIZED),
)


@writes.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=RolloutsCreated,
    responses=error_responses(
        {
            **UNPARSABLE,
            409: "Idempotency-Key reused for another request.",
            413: "Body over WSRL_API_MAX_BODY_BYTES.",
            422: "Invalid body, unknown goals, or count above the split's goals.",
        }
    ),
)
def create_rollouts(
    body: RolloutCreate,
    session: SessionDep,
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(
            min_length=1,
            max_length=200,
            pattern=r"^[\x21-\x7e]+$",
            description="Makes a retry safe: the same request with the same key returns "
            "the rollouts of the first and creates none; another request with it is a 409.",
        ),
    ] = None,
) -> RolloutsCreated:
    """Queue ``group_size`` rollouts per goal; the messages go out once the rows are committed.

    Goals are the given ``goal_ids`` or ``count`` goals of ``split``. The samples of one
    goal share a group id. Unknown goals, a ``count`` above the split's goals or bad
    sampling values are a 422. Idempotent per ``Idempotency-Key``.
    """
    try:
        ids = enqueue_rollouts(
            session,
            request.app.state.celery,
            goal_ids=body.goal_ids,
            split=body.split,
            count=body.count,
            group_size=body.group_size,
            mode=body.mode.value,
            start=body.start.value,
            agent_url=str(body.agent_url) if body.agent_url else None,
            sampling=body.sampling.as_dict() if body.sampling else None,
            settings=request.app.state.settings,
            allow_fewer=False,
            idempotency_key=idempotency_key,
        )
    except IdempotencyConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    except EnqueueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    return RolloutsCreated(ids=ids, count=len(ids))


@writes.post(
    "/cancel",
    response_model=RolloutsCancelled,
    responses=error_responses({**UNPARSABLE, 422: "Invalid body: no ids and no mode."}),
)
def cancel(body: RolloutCancel, session: SessionDep) -> RolloutsCancelled:
    """Cancel the chosen rollouts that have not finished.

    A queued one is never played (its job is a no-op when a worker takes it); a running
    one's attempt ends ``failed`` and its worker records nothing of it. Finished rollouts
    and unknown ids are left out of the answer; repeating the request cancels nothing more.
    """
    reason = "cancelled: POST /v1/rollouts/cancel"
    ids = cancel_rollouts(session, reason, ids=body.ids, mode=body.mode)
    return RolloutsCancelled(ids=ids, count=len(ids))


@router.get("", response_model=RolloutPage)
def list_rollouts(
    session: SessionDep,
    status_: Annotated[RolloutStatus | None, Query(alias="status")] = None,
    mode: RolloutMode | None = None,
    goal_id: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    group_id: uuid.UUID | None = None,
    policy_version: Annotated[
        int | None,
        Query(ge=0, le=2**31 - 1, description="Rollouts with a call served by this version."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RolloutPage:
    """Newest first; ``total`` counts every match, ``items`` holds one page."""
    conditions = []
    if status_ is not None:
        conditions.append(Rollout.status == status_)
    if mode is not None:
        conditions.append(Rollout.mode == mode)
    if goal_id is not None:
        conditions.append(Rollout.goal_id == goal_id)
    if group_id is not None:
        conditions.append(Rollout.group_id == group_id)
    if policy_version is not None:
        conditions.append(Rollout.policy_version_min <= policy_version)
        conditions.append(Rollout.policy_version_max >= policy_version)
    total = session.scalar(select(func.count()).select_from(Rollout).where(*conditions)) or 0
    rows = session.scalars(
        select(Rollout)
        .where(*conditions)
        .order_by(Rollout.created_at.desc(), Rollout.group_id, Rollout.sample_index)
        .limit(limit)
        .offset(offset)
    ).all()
    return RolloutPage(
        total=total,
        limit=limit,
        offset=offset,
        items=[RolloutOut.model_validate(row) for row in rows],
    )


@router.get(
    "/{rollout_id}",
    response_model=RolloutDetail,
    responses=error_responses({404: "Unknown rollout."}),
)
def get_rollout(rollout_id: uuid.UUID, session: SessionDep) -> RolloutDetail:
    """Status, outcome and every attempt of one rollout."""
    rollout = get_or_404(session, Rollout, rollout_id, options=[selectinload(Rollout.attempt_rows)])
    return RolloutDetail(
        **RolloutOut.model_validate(rollout).model_dump(),
        attempt_history=[AttemptOut.model_validate(a) for a in rollout.attempt_rows],
    )
