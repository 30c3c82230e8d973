"""The Postgres/Celery side of training for the verl backend (its ``RolloutFeed``).

The same rules as the local loop (:mod:`trainer.loop`): groups are enqueued through
:func:`app.core.enqueue.enqueue_rollouts`, selected by
:func:`trainer.ready_groups.load_ready_groups` (complete, within the staleness bound,
never trained) and recorded with
:func:`trainer.loop.commit_step`, which marks every rollout of the used groups and retires
the groups that can never be trained, in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.config import Settings
from app.core.celery import create_celery
from app.core.endpoint import resume_version
from app.core.enqueue import enqueue_rollouts, ensure_goals
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.backends.verl.feed import ReadyBatch
from trainer.batches import Selection
from trainer.loop import commit_step
from trainer.publish import committed_step
from trainer.ready_groups import load_ready_groups


class PostgresRolloutFeed:
    """Enqueues groups, hands over complete ones, records steps; one selection at a time."""

    def __init__(self, settings: Settings, sampling: dict[str, Any] | None = None) -> None:
        self.settings, self.sampling = settings, sampling
        self.engine = make_engine(settings, pool_size=2)
        self.sessions = make_sessionmaker(self.engine)
        self.celery = create_celery(settings)
        self._selection = Selection()

    def resume(self, checkpoint_version: int | None) -> tuple[int, int]:
        """(the last committed step, the version to serve the loaded weights as), from
        Postgres: a restart in any state neither repeats a step number nor moves versions
        back, whatever checkpoint the weights came from."""
        with session_scope(self.sessions) as session:
            return committed_step(session), resume_version(session, checkpoint_version)

    def request_groups(self, groups: int, group_size: int, split: str) -> None:
        """Enqueue ``groups`` goals of ``split`` (loading the env server's goals into
        Postgres first when it has none)."""
        with session_scope(self.sessions) as session:
            ensure_goals(session, self.settings, split)
            enqueue_rollouts(
                session,
                self.celery,
                split=split,
                count=groups,
                group_size=group_size,
                sampling=self.sampling,
                settings=self.settings,
            )

    def ready(
        self, current_version: int, max_staleness: int, groups: int, min_succeeded: int
    ) -> ReadyBatch:
        with session_scope(self.sessions) as session:
            records, selection = load_ready_groups(
                session, current_version, max_staleness, groups, min_succeeded
            )
        self._selection = selection
        return ReadyBatch(records, selection.as_metrics())

    def record_step(
        self, step: int, version: int, rollout_ids: Sequence[str], metrics: dict[str, float]
    ) -> None:
        """Marks the groups of the last :meth:`ready` batch (and retires its unusable ones)."""
        with session_scope(self.sessions) as session:
            commit_step(session, step, version, rollout_ids, self._selection, metrics)
        self._selection = Selection()


def make_rollout_feed(settings: Settings, config: Any) -> PostgresRolloutFeed:
    """The feed the verl entry point builds inside its Ray actor."""
    return PostgresRolloutFeed(settings)
