"""Trajectories: the steps and LLM calls of one attempt of a rollout, as JSON."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import SessionDep
from app.api.schemas import Trajectory, error_responses
from app.api.services.trajectories import load_trajectory

router = APIRouter(prefix="/v1/rollouts", tags=["trajectories"])


@router.get(
    "/{rollout_id}/trajectory",
    response_model=Trajectory,
    responses=error_responses({404: "Unknown rollout or attempt, or not started."}),
)
def get_trajectory(
    rollout_id: uuid.UUID,
    session: SessionDep,
    attempt: Annotated[
        int | None,
        Query(ge=1, le=2**31 - 1, description="Attempt number; default: the final attempt."),
    ] = None,
    tokens: Annotated[
        bool, Query(description="Include token ids and logprobs of every LLM call.")
    ] = False,
) -> Trajectory:
    """The final attempt is the succeeded one when there is one, else the latest; 404 for
    an unknown rollout or attempt, or a rollout that has not started. Token ids and
    logprobs only with ``tokens=true``; their counts always."""
    return load_trajectory(session, rollout_id, attempt=attempt, tokens=tokens)
