"""The scheduler keeps batch_groups x (1 + max_staleness) groups queued or running."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers.training_rows import R, S, add_group, ensure_goal
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.celery import create_celery
from app.db import migrate
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import Goal, Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.scheduler import Scheduler, outstanding_groups


@pytest.fixture
def database(
    make_database: Callable[[], str], test_settings: Settings
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """Settings on an empty, migrated database of this test alone, and its sessions."""
    url = make_database()
    migrate.upgrade(url)
    settings = test_settings.model_copy(update={"database_url": url})
    engine = make_engine(settings)
    yield settings, make_sessionmaker(engine)
    engine.dispose()


def test_top_up_fills_to_target_counting_queued_and_running_groups(database) -> None:
    settings, sessions = database
    with session_scope(sessions) as session:
        for goal in range(1, 6):
            ensure_goal(session, goal)
        add_group(session, [S, R])  # outstanding: one rollout still running
        add_group(session, [S, S])  # finished: not outstanding
    scheduler = Scheduler(
        create_celery(settings), settings, group_size=2, target_groups=4,
        sampling={"max_tokens": 16},
    )  # fmt: skip
    with session_scope(sessions) as session:
        assert outstanding_groups(session) == 1
        assert scheduler.top_up(session) == 3
    with session_scope(sessions) as session:
        assert outstanding_groups(session) == 4
        assert scheduler.top_up(session) == 0
        queued = session.scalars(
            select(Rollout).where(Rollout.status == RolloutStatus.QUEUED)
        ).all()
        assert len(queued) == 6 and {r.sampling["max_tokens"] for r in queued} == {16}
        groups = session.scalar(select(func.count(func.distinct(Rollout.group_id))))
        assert groups == 5


def test_evaluations_play_the_same_held_out_goals_and_leave_train_groups_alone(
    database,
) -> None:
    settings, sessions = database
    with session_scope(sessions) as session:
        for goal in range(1, 21):
            session.add(
                Goal(id=goal, split="test" if goal > 5 else "train", instruction="x", asin="B0")
            )
    scheduler = Scheduler(
        create_celery(settings), settings, group_size=2, target_groups=1,
        eval_goals=4, eval_sampling={"temperature": 0.0},
    )  # fmt: skip
    with session_scope(sessions) as session:
        assert scheduler.enqueue_eval(session) == 4
    with session_scope(sessions) as session:
        assert scheduler.enqueue_eval(session) == 4
        assert outstanding_groups(session) == 0  # evaluations are not train groups
        evals = session.scalars(
            select(Rollout).where(Rollout.mode == RolloutMode.EVAL).order_by(Rollout.created_at)
        ).all()
        no_evals = Scheduler(create_celery(settings), settings, group_size=2, target_groups=1)
        assert no_evals.enqueue_eval(session) == 0
    assert len(evals) == 8 and {r.sampling["temperature"] for r in evals} == {0.0}
    first, second = sorted(r.goal_id for r in evals[:4]), sorted(r.goal_id for r in evals[4:])
    assert first == second and all(g > 5 for g in first)
