"""Batch selection against the real schema: complete, fresh, untrained groups only."""

import uuid

from helpers.factories import make_goal, make_rollout
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, LlmCall, Rollout
from trainer.ready_groups import load_ready_groups, record_train_step

S, R, F = RolloutStatus.SUCCEEDED, RolloutStatus.RUNNING, RolloutStatus.FAILED


def add_group(session: Session, goal_id: int, statuses, version: int = 5, reward=1.0) -> uuid.UUID:
    group = uuid.uuid4()
    for i, status in enumerate(statuses):
        done = status == S
        rollout = make_rollout(
            session,
            goal_id,
            status=status,
            group_id=group,
            sample_index=i,
            reward=reward - 0.5 * i if done else None,
            policy_version_min=version if done else None,
        )
        if done:
            add_attempt(session, rollout, AttemptStatus.FAILED, version, tokens=[99])
            add_attempt(session, rollout, AttemptStatus.SUCCEEDED, version, tokens=[7, 8])
    return group


def add_attempt(session, rollout: Rollout, status, version: int, tokens: list[int]) -> None:
    attempt = Attempt(
        rollout_id=rollout.id, number=2 if status == AttemptStatus.SUCCEEDED else 1, status=status
    )
    session.add(attempt)
    session.flush()
    for index in range(2):
        session.add(
            LlmCall(
                attempt_id=attempt.id,
                index=index,
                policy_version=version + index,
                request_messages=[],
                prompt_token_ids=[1, 2, 3],
                response_token_ids=tokens,
                response_logprobs=[-0.5] * len(tokens),
            )
        )
    session.flush()


def test_only_complete_fresh_groups_loaded_with_succeeded_attempt_calls(empty_db_session) -> None:
    db_session = empty_db_session
    make_goal(db_session, 91001)
    ready = add_group(db_session, 91001, [S, S, F])
    add_group(db_session, 91001, [S, R])  # incomplete
    add_group(db_session, 91001, [S, S], version=1)  # stale
    records, selection = load_ready_groups(db_session, current_version=6, max_staleness=2, limit=4)
    assert {r.group_id for r in records} == {str(ready)}
    assert len(records) == 2 and records[0].reward == 1.0 and records[1].reward == 0.5
    assert [c.response_token_ids for c in records[0].calls] == [[7, 8], [7, 8]]
    assert [c.policy_version for c in records[0].calls] == [5, 6]
    assert selection.incomplete == 1 and selection.stale == 1
    assert selection.staleness_histogram == {1: 1}


def test_trained_group_never_loaded_again(db_session) -> None:
    make_goal(db_session, 91002)
    add_group(db_session, 91002, [S, S])
    records, _ = load_ready_groups(db_session, current_version=5, max_staleness=0, limit=4)
    assert len(records) == 2
    ids, groups = [r.rollout_id for r in records], [r.group_id for r in records]
    record_train_step(db_session, 910, 6, ids, groups, {"loss": 1.0})
    again, selection = load_ready_groups(db_session, current_version=5, max_staleness=0, limit=4)
    assert again == [] and selection.selected == []
    steps = db_session.scalars(
        select(Rollout.train_step).where(Rollout.id.in_([uuid.UUID(r.rollout_id) for r in records]))
    ).all()
    assert steps == [910, 910]


def test_a_diverged_steps_metrics_are_recorded(db_session) -> None:
    """A loss gone NaN and numpy numbers (what a backend's tensors give) in a step's
    metrics: the standard library's encoder wrote ``NaN``, which ``jsonb`` refuses, and
    raised on numpy's float32, so the step failed to commit. Stored as ``null`` and
    numbers."""
    import numpy as np

    from app.db.models import TrainStep

    make_goal(db_session, 91003)
    add_group(db_session, 91003, [S, S])
    records, _ = load_ready_groups(db_session, current_version=5, max_staleness=0, limit=4)
    metrics = {"losses/total": float("nan"), "grad_norm": np.float32(1.5), "tokens": np.int64(9)}
    record_train_step(db_session, 911, 6, [r.rollout_id for r in records], [], metrics)
    db_session.flush()
    stored = db_session.scalars(select(TrainStep.metrics).where(TrainStep.step == 911)).one()
    assert stored == {"losses/total": None, "grad_norm": 1.5, "tokens": 9}
