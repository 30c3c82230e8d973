"""A second environment through the whole pipeline: BabyAI, served over AgentGym's protocol
by ``wsrl env babyai``, played by a Celery worker process against the local trainer's
policy server, recorded in Postgres and trained on, exactly as WebShop is."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.processes import babyai_server
from sqlalchemy import func, select

from app.config import Settings
from app.db.lifecycle import RolloutStatus
from app.db.models import Goal, LlmCall, Rollout, Step, TrainStep
from app.db.session import session_scope
from app.environments import BABYAI_GOAL_IDS, ENVIRONMENTS, goals_of

pytestmark = pytest.mark.slow

VERBS = ("turn left", "turn right", "move forward", "go to ", "pickup ", "drop", "toggle",
         "go through ")  # fmt: skip


def test_the_tiny_pipeline_trains_on_babyai(
    fresh_settings: Settings, sessions, babyai_checkpoint: Path, tmp_path: Path, train_two_steps
) -> None:
    server = babyai_server(tmp_path, fresh_settings).start()
    settings = fresh_settings.model_copy(
        update={
            "babyai_url": server.url,
            "max_steps": 3,
            "llm_max_tokens": 12,
            "agent_constrain_actions": True,
        }
    )
    try:
        with session_scope(sessions) as session:
            added = goals_of(session, settings, ENVIRONMENTS["babyai"], "train")
            assert added == 800  # 8 levels x 100 seeds, both splits
            assert goals_of(session, settings, ENVIRONMENTS["babyai"], "train") == 0
        train_two_steps(settings, babyai_checkpoint, tmp_path, "babyai")
        with session_scope(sessions) as session:
            trained = session.execute(
                select(Rollout.goal_id, Rollout.reward, Rollout.success, Rollout.train_step).where(
                    Rollout.train_step.is_not(None)
                )
            ).all()
            environments = set(
                session.scalars(
                    select(Goal.environment).where(Goal.id.in_([r.goal_id for r in trained]))
                )
            )
            actions = set(session.scalars(select(Step.action).where(Step.valid)))
            calls = session.scalar(
                select(func.count())
                .select_from(LlmCall)
                .where(LlmCall.response_token_ids.is_not(None))
            )
            failed = session.scalar(
                select(func.count()).where(Rollout.status == RolloutStatus.FAILED)
            )
            steps = session.scalars(select(TrainStep.step).order_by(TrainStep.step)).all()
            metrics = dict(session.execute(select(TrainStep.step, TrainStep.metrics)).all())
        assert environments == {"babyai"}
        assert all(r.goal_id >= BABYAI_GOAL_IDS for r in trained)
        assert len(trained) == 2 * 2 * 4  # two steps of two groups of four
        assert all(r.reward is not None and r.success == (r.reward > 0) for r in trained)
        # Replies limited to the listed actions: every step is one of BabyAI's.
        assert actions and all(a.startswith(VERBS) for a in actions), actions
        assert calls and failed == 0 and steps == [1, 2]
        for step in steps:  # the step's success is BabyAI's (reward > 0), not WebShop's
            mine = [r.success for r in trained if r.train_step == step]
            assert metrics[step]["reward/success"] == pytest.approx(sum(mine) / len(mine))
    finally:
        server.stop()
