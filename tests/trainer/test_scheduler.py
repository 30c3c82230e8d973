"""The scheduler keeps batch_groups x (1 + max_staleness) groups queued or running."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from helpers.training_rows import R, S, add_group, ensure_goal
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.celery import create_celery
from app.db import migrate
from app.db.lifecycle import RolloutMode, RolloutStart, RolloutStatus
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
                Goal(
                    id=goal,
                    split="test" if goal > 5 else "train",
                    instruction="x",
                    spec={"asin": "B0"},
                )
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


def test_each_train_group_draws_one_start_and_evaluations_start_at_search(database) -> None:
    settings, sessions = database
    with session_scope(sessions) as session:
        for goal in range(1, 41):
            session.add(
                Goal(
                    id=goal,
                    split="test" if goal > 30 else "train",
                    instruction="x",
                    spec={"asin": "B0"},
                )
            )
    scheduler = Scheduler(
        create_celery(settings), settings, group_size=3, target_groups=30,
        starts=("search", "item"), eval_goals=5,
    )  # fmt: skip
    with session_scope(sessions) as session:
        assert scheduler.top_up(session) == 30
        assert scheduler.enqueue_eval(session) == 5
    with session_scope(sessions) as session:
        rows = session.execute(select(Rollout.group_id, Rollout.mode, Rollout.start)).all()
    train: dict = {}
    for group, mode, start in rows:
        if mode == RolloutMode.TRAIN:
            train.setdefault(group, []).append(start)
    assert len(train) == 30 and all(len(starts) == 3 for starts in train.values())
    assert all(len(set(starts)) == 1 for starts in train.values()), "one start per group"
    drawn = Counter(starts[0] for starts in train.values())
    assert set(drawn) == {RolloutStart.SEARCH, RolloutStart.ITEM}, drawn
    assert {start for _, mode, start in rows if mode == RolloutMode.EVAL} == {RolloutStart.SEARCH}


def test_a_single_start_draws_no_randomness_so_a_seed_draws_the_same_goals(database) -> None:
    """The default (search only) consumes no randomness for starts: a seed's goals stay."""
    settings, sessions = database
    with session_scope(sessions) as session:
        for goal in range(1, 31):
            ensure_goal(session, goal)
    drawn = []
    for starts in (("search",), ("results",)):
        scheduler = Scheduler(
            create_celery(settings), settings, group_size=1, target_groups=5, seed=3,
            starts=starts,
        )  # fmt: skip
        with session_scope(sessions) as session:
            scheduler.top_up(session)
            rows = session.execute(
                select(Rollout.goal_id, Rollout.start).where(Rollout.status == RolloutStatus.QUEUED)
            ).all()
            session.execute(update(Rollout).values(status=RolloutStatus.CANCELLED))
        drawn.append(rows)
    assert sorted(g for g, _ in drawn[0]) == sorted(g for g, _ in drawn[1])
    assert {s for _, s in drawn[0]} == {"search"} and {s for _, s in drawn[1]} == {"results"}


def test_unknown_start_is_refused_at_construction(test_settings: Settings) -> None:
    celery = create_celery(test_settings)
    with pytest.raises(ValueError, match="got 'cart'"):
        Scheduler(celery, test_settings, group_size=2, target_groups=1, starts=("search", "cart"))
    with pytest.raises(ValueError, match="starts is empty"):
        Scheduler(celery, test_settings, group_size=2, target_groups=1, starts=())
