"""What ``wsrl dev`` prints per train step, read from Postgres while the trainer writes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.db import migrate
from app.db.models import TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.devprogress import Progress
from trainer.loop import merge_metrics


def test_a_step_is_printed_once_with_its_phase_times(
    make_database: Callable[[], str], test_settings: Settings
) -> None:
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(test_settings.model_copy(update={"database_url": url}))
    sessions = make_sessionmaker(engine)
    try:
        progress = Progress(sessions, since=datetime.now(UTC) - timedelta(minutes=1))
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
    finally:
        engine.dispose()
