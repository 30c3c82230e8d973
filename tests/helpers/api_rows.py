"""Rows of the pipeline's tables, committed the way workers write them (for API tests)."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, PolicyVersion, Rollout, Step
from app.db.session import session_scope
from app.webshop.success import is_success

TOKEN = "api-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Rows:
    """Commits goals, rollouts, attempts, steps and calls the way workers would."""

    engine: Engine
    goal_ids: list[int] = field(default_factory=list)

    def goal(
        self, split: str = "test", instruction: str | None = None, spec: dict | None = None
    ) -> int:
        """A WebShop goal, or with ``spec`` a BabyAI one (its fields in ``spec``)."""
        goal_id = random.randint(10_000_000, 2_000_000_000)
        webshop = {
            "spec": {
                "asin": f"B{goal_id:09d}",
                "attributes": ["soft"],
                "goal_options": {"color": "blue"},
                "price_upper": 50.0,
            }
        }
        with session_scope(self.engine) as session:
            session.add(
                Goal(
                    id=goal_id,
                    split=split,
                    instruction=instruction
                    or f"i need item {goal_id}, price lower than 50 dollars",
                    **({"environment": "babyai", "spec": spec} if spec else webshop),
                )
            )
        self.goal_ids.append(goal_id)
        return goal_id

    def rollout(
        self,
        goal_id: int | None = None,
        *,
        status: RolloutStatus = RolloutStatus.QUEUED,
        mode: RolloutMode = RolloutMode.TRAIN,
        group_id: uuid.UUID | None = None,
        reward: float | None = None,
        versions: tuple[int, int] | None = None,
        finished_ago_s: float | None = None,
        last_error: str | None = None,
    ) -> uuid.UUID:
        rollout_id = uuid.uuid4()
        finished = (
            None
            if finished_ago_s is None
            else datetime.now(UTC) - timedelta(seconds=finished_ago_s)
        )
        with session_scope(self.engine) as session:
            session.add(
                Rollout(
                    id=rollout_id,
                    goal_id=goal_id if goal_id is not None else self.goal(),
                    group_id=group_id or uuid.uuid4(),
                    mode=mode,
                    status=status,
                    reward=reward,
                    success=None if reward is None else is_success(reward),
                    policy_version_min=versions[0] if versions else None,
                    policy_version_max=versions[1] if versions else None,
                    finished_at=finished,
                    last_error=last_error,
                )
            )
        return rollout_id

    def attempt(
        self,
        rollout_id: uuid.UUID,
        number: int,
        *,
        status: AttemptStatus = AttemptStatus.RUNNING,
        reward: float | None = None,
        steps: list[dict[str, Any]] | None = None,
        calls: list[dict[str, Any]] | None = None,
    ) -> int:
        with session_scope(self.engine) as session:
            attempt = Attempt(rollout_id=rollout_id, number=number, status=status, reward=reward)
            session.add(attempt)
            session.flush()
            for index, step in enumerate(steps or []):
                session.add(Step(attempt_id=attempt.id, index=index, **step))
            for index, call in enumerate(calls or []):
                session.add(LlmCall(attempt_id=attempt.id, index=index, **call))
            return attempt.id


def recorded_calls(engine: Engine, attempt_id: int) -> list[LlmCall]:
    """The attempt's ``llm_calls`` rows, in call order."""
    with Session(engine) as session:
        query = select(LlmCall).where(LlmCall.attempt_id == attempt_id).order_by(LlmCall.index)
        return list(session.scalars(query))


def fresh_version(engine: Engine) -> int:
    """A policy version above every recorded one (the session shares one database)."""
    with engine.connect() as connection:
        highest = connection.scalar(select(func.max(PolicyVersion.version))) or 1_000_000
    return highest + random.randint(1, 1_000)
