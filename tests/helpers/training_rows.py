"""Hand-made finished rollouts (attempts + LLM calls) for trainer tests, committed for real."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout
from app.db.session import session_scope

S, R, F = RolloutStatus.SUCCEEDED, RolloutStatus.RUNNING, RolloutStatus.FAILED


def ensure_goal(session: Session, goal_id: int = 1, split: str = "train") -> int:
    if session.get(Goal, goal_id) is None:
        session.add(
            Goal(id=goal_id, split=split, instruction="buy a mug", spec={"asin": "B000000001"})
        )
        session.flush()
    return goal_id


def add_group(
    session: Session,
    statuses: Sequence[RolloutStatus],
    *,
    version: int = 0,
    rewards: Sequence[float] | None = None,
    goal_id: int = 1,
) -> uuid.UUID:
    """One GRPO group; succeeded rollouts get one succeeded attempt with two LLM calls
    (the second extends the first, so trajectory mode joins them)."""
    ensure_goal(session, goal_id)
    group = uuid.uuid4()
    rewards = (
        list(rewards) if rewards is not None else [1.0 - 0.5 * i for i in range(len(statuses))]
    )
    for i, status in enumerate(statuses):
        done = status == S
        rollout = Rollout(
            goal_id=goal_id,
            group_id=group,
            sample_index=i,
            mode=RolloutMode.TRAIN,
            status=status,
            reward=rewards[i] if done else None,
            success=rewards[i] == 1.0 if done else None,
            policy_version_min=version if done else None,
            policy_version_max=version if done else None,
        )
        session.add(rollout)
        session.flush()
        if done:
            add_calls(session, rollout, version)
    return group


def add_calls(session: Session, rollout: Rollout, version: int) -> None:
    attempt = Attempt(rollout_id=rollout.id, number=1, status=AttemptStatus.SUCCEEDED)
    session.add(attempt)
    session.flush()
    first_prompt, first_response = [1, 20, 21, 22], [30, 31 + rollout.sample_index, 2]
    second_prompt = [*first_prompt, *first_response, 40, 41]
    for index, (prompt, response) in enumerate(
        [(first_prompt, first_response), (second_prompt, [50, 51, 2])]
    ):
        session.add(
            LlmCall(
                attempt_id=attempt.id,
                index=index,
                policy_version=version,
                request_messages=[],
                prompt_token_ids=prompt,
                response_token_ids=response,
                response_logprobs=[-1.0] * len(response),
            )
        )
    session.flush()


def finish_running(session: Session, group: uuid.UUID, version: int) -> None:
    """Turns the group's running rollouts into succeeded ones with calls at ``version``."""
    for rollout in session.query(Rollout).filter(Rollout.group_id == group).all():
        if rollout.status == R:
            rollout.status, rollout.reward, rollout.success = S, 0.0, False
            rollout.policy_version_min = rollout.policy_version_max = version
            add_calls(session, rollout, version)


def train_steps_of(sessions, groups: list[uuid.UUID]) -> dict[uuid.UUID, set]:
    """The train steps each group's rollouts are marked with (None: not trained)."""
    with session_scope(sessions) as session:
        rows = session.execute(
            select(Rollout.group_id, Rollout.train_step).where(Rollout.group_id.in_(groups))
        ).all()
    found: dict[uuid.UUID, set] = {g: set() for g in groups}
    for group, step in rows:
        found[group].add(step)
    return found
