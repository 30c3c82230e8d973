"""Episode openings end to end: a real Celery worker process plays rollouts enqueued with
each start against the env server and the scripted LLM server (subprocesses), and
PostgreSQL holds what it recorded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import select

from app.db.lifecycle import RolloutStart
from app.db.models import Attempt, LlmCall, Rollout, Step
from app.db.session import session_scope

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("openings-stack")
    settings = isolated_settings(
        make_database,
        redis_url,
        root,
        llm_timeout_s=5.0,
        llm_retry_budget_s=5.0,
        env_timeout_s=5.0,
        step_timeout_s=10.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
    )
    with RolloutStack.start(root, settings, workers=1, concurrency=4) as running:
        yield running


def _recorded(stack: RolloutStack, rollout_id: uuid.UUID) -> tuple[Rollout, list, list]:
    with session_scope(stack.sessions) as session:
        rollout = session.get(Rollout, rollout_id)
        assert rollout is not None
        session.expunge(rollout)
        steps = session.execute(
            select(Step.action, Step.valid, Step.reward, Step.info)
            .join(Attempt, Attempt.id == Step.attempt_id)
            .where(Attempt.rollout_id == rollout_id)
            .order_by(Step.index)
        ).all()
        prompts = session.scalars(
            select(LlmCall.request_messages)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id == rollout_id)
            .order_by(LlmCall.index)
        ).all()
    return rollout, list(steps), list(prompts)


def test_item_start_records_the_opening_then_the_policy_plays_from_the_item_page(
    stack: RolloutStack,
) -> None:
    goals = stack.goal_ids[:2]
    item = stack.enqueue(goal_ids=goals, start="item")
    search = stack.enqueue(goal_ids=goals)
    assert stack.wait(item + search, timeout_s=90) == {"succeeded": 4}

    for rollout_id in item:
        rollout, steps, prompts = _recorded(stack, rollout_id)
        assert rollout.start is RolloutStart.ITEM
        opening, played = steps[:2], steps[2:]
        assert [a.split("[")[0] for a, *_ in opening] == ["search", "click"]
        assert all(valid and info["opening"] for _, valid, _, info in opening)
        assert played and not any(info.get("opening") for *_, info in played)
        assert len(prompts) == len(played), "no LLM call for an opening step"
        first = prompts[0][-1]["content"]
        assert "click[buy now]" in first and f"Step 2: {opening[1][0]}" in first
        assert rollout.num_steps == len(steps)
        assert rollout.reward == played[-1][2], "the reward is the env's, on the last step"

    for rollout_id in search:
        rollout, steps, prompts = _recorded(stack, rollout_id)
        assert rollout.start is RolloutStart.SEARCH
        assert not any(info.get("opening") for *_, info in steps)
        assert len(prompts) == len(steps) and rollout.reward == 1.0
        assert "Previous steps: none" in prompts[0][-1]["content"]
