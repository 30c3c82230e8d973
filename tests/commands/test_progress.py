"""What ``wsrl dev`` prints per train step, read from Postgres while the trainer writes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers.factories import make_goal, make_rollout
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import migrate
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Rollout, TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.progress import TrainingProgress
from trainer.loop import merge_metrics


@pytest.fixture
def sessions(
    make_database: Callable[[], str], test_settings: Settings
) -> Iterator[sessionmaker[Session]]:
    """Sessions on a fresh, migrated database."""
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(test_settings.model_copy(update={"database_url": url}))
    try:
        yield make_sessionmaker(engine)
    finally:
        engine.dispose()


def test_a_step_is_printed_once_with_its_phase_times(sessions: sessionmaker[Session]) -> None:
    progress = TrainingProgress(sessions, since=datetime.now(UTC) - timedelta(minutes=1))
    with session_scope(sessions) as session:  # committed; times merged after the sync
        session.add(TrainStep(step=1, policy_version=1, metrics={"reward/mean": 0.5}))
    assert progress.new_step_lines() == []
    with session_scope(sessions) as session:
        merge_metrics(session, 1, {"time/step_s": 12.5, "time/wait_s": 3.0})
    [line] = progress.new_step_lines()
    assert "v1" in line and "reward 0.500" in line and "step time 12.5s (wait 3.0s)" in line
    assert progress.new_step_lines() == []
    with session_scope(sessions) as session:  # a step whose merge never came is printed
        session.add(TrainStep(step=2, policy_version=1, metrics={"reward/mean": 0.1}))
        session.add(TrainStep(step=3, policy_version=2, metrics={"time/step_s": 1.0}))
    assert [line.split()[1] for line in progress.new_step_lines()] == ["2", "3"]


def test_a_step_without_an_update_says_why_its_version_stayed(
    sessions: sessionmaker[Session],
) -> None:
    """`make dev` printed `step 13  v12 ... step time 0.0s` after `step 12  v12` and left a
    newcomer to guess why the version stayed."""
    progress = TrainingProgress(sessions, since=datetime.now(UTC) - timedelta(minutes=1))
    with session_scope(sessions) as session:
        metrics = {"reward/mean": 0.5, "time/step_s": 2.0}
        session.add(TrainStep(step=1, policy_version=1, metrics=metrics))
        metrics = {"reward/mean": 1.0, "time/step_s": 0.0, "update/skipped": 1.0}
        session.add(TrainStep(step=2, policy_version=1, metrics=metrics))
    updated, skipped = progress.new_step_lines()
    assert "no update" not in updated
    assert skipped.endswith("no update: every group's rewards were equal")


def test_a_held_out_round_is_printed_once_when_all_its_episodes_finished(
    sessions: sessionmaker[Session],
) -> None:
    done, queued = RolloutStatus.SUCCEEDED, RolloutStatus.QUEUED
    with session_scope(sessions) as session:
        make_goal(session, 94001)
    with session_scope(sessions) as session:  # a round from before `wsrl dev` started
        make_rollout(session, 94001, status=done, mode=RolloutMode.EVAL, reward=0.2,
                     policy_version_min=0, policy_version_max=0)  # fmt: skip
    progress = TrainingProgress(sessions, since=datetime.now(UTC))
    with session_scope(sessions) as session:  # one round of two episodes, one still queued
        make_rollout(session, 94001, status=done, mode=RolloutMode.EVAL, reward=1.0,
                     success=True, policy_version_min=10, policy_version_max=11)  # fmt: skip
        pending = make_rollout(session, 94001, status=queued, mode=RolloutMode.EVAL)
        pending_id = pending.id
    assert progress.new_eval_lines() == []
    with session_scope(sessions) as session:
        finished = session.get(Rollout, pending_id)
        finished.status, finished.reward, finished.success = done, 0.5, False
        finished.policy_version_min = finished.policy_version_max = 12
    assert progress.new_eval_lines() == ["held-out v10-12: 2 episodes, reward 0.750, success 50.0%"]
    assert progress.new_eval_lines() == []
