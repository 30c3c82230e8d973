"""Factories for tests: goals and rollouts in the database, and recorded LLM calls."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.core.llm import LLMCall
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Goal, Rollout


@contextmanager
def rollback_session(engine: Engine) -> Iterator[Session]:
    """A Session inside one outer transaction that is rolled back at the end (its commits
    become savepoints), so a test's rows are gone after it and other tests never see them."""
    connection = engine.connect()
    transaction = connection.begin()
    session = Session(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()


def make_goal(session: Session, goal_id: int, *, split: str = "train", **fields: Any) -> Goal:
    goal = Goal(
        id=goal_id,
        split=split,
        instruction=fields.pop("instruction", f"Find me item {goal_id}"),
        spec=fields.pop("spec", {"asin": f"B{goal_id:09d}"}),
        **fields,
    )
    session.add(goal)
    session.flush()
    return goal


def make_rollout(
    session: Session,
    goal_id: int,
    *,
    status: RolloutStatus = RolloutStatus.QUEUED,
    mode: RolloutMode = RolloutMode.TRAIN,
    max_attempts: int = 3,
    **fields: Any,
) -> Rollout:
    rollout = Rollout(
        id=fields.pop("id", uuid.uuid4()),
        goal_id=goal_id,
        group_id=fields.pop("group_id", uuid.uuid4()),
        mode=mode,
        status=status,
        max_attempts=max_attempts,
        **fields,
    )
    session.add(rollout)
    session.flush()
    return rollout


def make_llm_call(**fields: Any) -> LLMCall:
    """A trainable text-mode call (one prompt and one response token); ``fields`` override."""
    defaults: dict[str, Any] = {
        "messages": [],
        "tools": None,
        "response_text": "search[lamp]",
        "tool_calls": [],
        "reasoning_text": None,
        "prompt_token_ids": [1],
        "response_token_ids": [2],
        "response_logprobs": [-0.1],
        "finish_reason": "stop",
        "latency_ms": 1.0,
        "policy_version": 0,
        "model": "policy",
        "trainable": True,
    }
    return LLMCall(**{**defaults, **fields})
