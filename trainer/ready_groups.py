"""The SQL side of batch selection: group summaries in, training records out.

Postgres decides what is done: a group is read from ``rollouts`` (train mode, no
``train_step`` yet), selected by the pure :func:`trainer.batches.select_groups`, and its
succeeded rollouts are loaded with the LLM calls of their one succeeded attempt (calls
of failed or lost attempts are never mixed in).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, LlmCall, Rollout, TrainStep
from trainer.batches import GroupSummary, Selection, select_groups
from trainer.samples import CallRecord, RolloutRecord


def untrained_groups(session: Session) -> list[GroupSummary]:
    """Every train group none of whose rollouts was trained yet, oldest first."""
    succeeded = Rollout.status == RolloutStatus.SUCCEEDED
    rows = session.execute(
        select(
            Rollout.group_id,
            func.array_agg(Rollout.status),
            func.min(Rollout.policy_version_min).filter(succeeded),
        )
        .where(Rollout.mode == RolloutMode.TRAIN)
        .group_by(Rollout.group_id)
        .having(func.bool_and(Rollout.train_step.is_(None)))
        .order_by(func.min(Rollout.created_at))
    ).all()
    return [GroupSummary(str(g), tuple(str(s) for s in st), v) for g, st, v in rows]


def trainable_calls(
    session: Session, rollout_ids: Sequence[uuid.UUID]
) -> dict[Any, list[CallRecord]]:
    """Rollout id -> its succeeded attempt's trainable calls, in order: the columns a
    train step reads, not the conversation (``request_messages``), whose JSON took 0.4 of
    the read's time for 256 ten-call trajectories (docs/benchmarks.md)."""
    rows = session.execute(
        select(
            Attempt.rollout_id,
            LlmCall.prompt_token_ids,
            LlmCall.response_token_ids,
            LlmCall.response_logprobs,
            LlmCall.policy_version,
            LlmCall.structured_outputs,
        )
        .join(LlmCall, LlmCall.attempt_id == Attempt.id)
        .where(
            Attempt.rollout_id.in_(rollout_ids),
            Attempt.status == AttemptStatus.SUCCEEDED,
            LlmCall.trainable.is_(True),
        )
        .order_by(Attempt.rollout_id, LlmCall.index)
    ).all()
    calls: dict[Any, list[CallRecord]] = {rid: [] for rid in rollout_ids}
    for rollout_id, prompt, response, logprobs, version, structured_outputs in rows:
        calls[rollout_id].append(
            CallRecord(
                prompt or [],
                response or [],
                logprobs or [],
                version if version is not None else -1,
                structured_outputs,
            )
        )
    return calls


def rollout_records(session: Session, group_ids: Sequence[str]) -> list[RolloutRecord]:
    """The succeeded rollouts of ``group_ids`` with their calls, grouped by group."""
    rollouts = session.scalars(
        select(Rollout)
        .where(
            Rollout.group_id.in_([uuid.UUID(g) for g in group_ids]),
            Rollout.status == RolloutStatus.SUCCEEDED,
        )
        .order_by(Rollout.group_id, Rollout.sample_index)
    ).all()
    calls = trainable_calls(session, [r.id for r in rollouts])
    return [
        RolloutRecord(str(r.id), str(r.group_id), float(r.reward or 0.0), calls[r.id])
        for r in rollouts
    ]


def load_ready_groups(
    session: Session,
    current_version: int,
    max_staleness: int,
    limit: int,
    min_succeeded: int = 2,
) -> tuple[list[RolloutRecord], Selection]:
    """Up to ``limit`` complete, fresh, untrained groups as training records."""
    selection = select_groups(
        untrained_groups(session), current_version, max_staleness, limit, min_succeeded
    )
    records = rollout_records(session, [g.group_id for g in selection.selected])
    return records, selection


def record_train_step(
    session: Session,
    step: int,
    policy_version: int,
    rollout_ids: Sequence[str],
    group_ids: Sequence[str],
    metrics: dict[str, float],
) -> None:
    """Writes the train step (``rollouts_used``: the ``rollout_ids`` trained on) and marks
    every still unmarked rollout of ``group_ids`` (the groups trained on and those retired)
    with it, in the caller's transaction."""
    session.add(
        TrainStep(
            step=step,
            policy_version=policy_version,
            rollouts_used=len(rollout_ids),
            metrics=metrics,
        )
    )
    session.flush()
    session.execute(
        update(Rollout)
        .where(
            Rollout.group_id.in_([uuid.UUID(g) for g in group_ids]),
            Rollout.train_step.is_(None),
        )
        .values(train_step=step)
    )
