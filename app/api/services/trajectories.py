"""Reading one attempt of a rollout back: its steps and LLM calls (the API and `wsrl show`)."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer, joinedload

from app.api.errors import NotFoundError, get_or_404
from app.api.schemas import AttemptOut, LlmCallOut, StepOut, Trajectory
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt, LlmCall, Rollout, Step

_TOKEN_COLUMNS = (LlmCall.prompt_token_ids, LlmCall.response_token_ids, LlmCall.response_logprobs)


def load_trajectory(
    session: Session, rollout_id: uuid.UUID, *, attempt: int | None = None, tokens: bool = False
) -> Trajectory:
    """Attempt ``attempt`` of the rollout, or its final one: the succeeded attempt when
    there is one, else the latest. Token ids and logprobs only with ``tokens`` (they are
    most of the payload); their counts always. Raises :class:`NotFoundError`."""
    rollout = get_or_404(session, Rollout, rollout_id, options=[joinedload(Rollout.goal)])
    chosen = _pick_attempt(session, rollout_id, attempt)
    steps = session.scalars(
        select(Step).where(Step.attempt_id == chosen.id).order_by(Step.index)
    ).all()
    return Trajectory(
        rollout_id=rollout.id,
        goal_id=rollout.goal_id,
        instruction=rollout.goal.instruction,
        mode=rollout.mode,
        rollout_status=rollout.status,
        attempt=AttemptOut.model_validate(chosen),
        reward=chosen.reward,
        reward_parts=chosen.reward_parts,
        steps=[StepOut.model_validate(step) for step in steps],
        llm_calls=_llm_calls(session, chosen.id, with_tokens=tokens),
    )


def _pick_attempt(session: Session, rollout_id: uuid.UUID, number: int | None) -> Attempt:
    query = select(Attempt).where(Attempt.rollout_id == rollout_id)
    if number is not None:
        found = session.scalar(query.where(Attempt.number == number))
        if found is None:
            raise NotFoundError(f"unknown attempt {number} of rollout {rollout_id}")
        return found
    attempts = session.scalars(query.order_by(Attempt.number.desc())).all()
    if not attempts:
        raise NotFoundError(f"rollout {rollout_id} has no attempt yet (it is still queued)")
    succeeded = [a for a in attempts if a.status == AttemptStatus.SUCCEEDED]
    return succeeded[0] if succeeded else attempts[0]


def _llm_calls(session: Session, attempt_id: int, *, with_tokens: bool) -> list[LlmCallOut]:
    # Packed int32 bytea: four bytes per token.
    prompt_len = func.length(LlmCall.prompt_token_ids) // 4
    response_len = func.length(LlmCall.response_token_ids) // 4
    query = (
        select(LlmCall, prompt_len, response_len)
        .where(LlmCall.attempt_id == attempt_id)
        .order_by(LlmCall.index)
    )
    if not with_tokens:
        query = query.options(*(defer(column) for column in _TOKEN_COLUMNS))
    calls = []
    for call, num_prompt, num_response in session.execute(query):
        out = LlmCallOut(
            index=call.index,
            policy_version=call.policy_version,
            model=call.model,
            request_messages=call.request_messages,
            response_text=call.response_text,
            finish_reason=call.finish_reason,
            latency_ms=call.latency_ms,
            trainable=call.trainable,
            num_prompt_tokens=num_prompt,
            num_response_tokens=num_response,
        )
        if with_tokens:
            out.prompt_token_ids = call.prompt_token_ids
            out.response_token_ids = call.response_token_ids
            out.response_logprobs = call.response_logprobs
        calls.append(out)
    return calls
