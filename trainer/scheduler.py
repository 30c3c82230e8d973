"""Keeps the workers busy: enough GRPO groups enqueued for the next updates.

The target is ``batch_groups x (1 + max_staleness)`` outstanding groups: one batch for
the next update plus one for every version a group may lag behind. More would only make
groups that go stale before they are trained; fewer would leave the trainer waiting.
Postgres is the truth: a group is outstanding while any of its train rollouts is
``queued`` or ``running`` (a re-queued rollout counts, so a retry never enqueues a second
group), and the count is re-read on every top-up, so the scheduler needs no state of its
own and restarts cleanly.

Each train group draws its start (:mod:`app.environments.webshop.opening`) uniformly from
``starts``; all rollouts of a group share it, so GRPO compares episodes that began on the
same page.
Evaluation episodes always start at ``search``: the full task is what is measured.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from celery import Celery
from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.celery import create_celery
from app.core.enqueue import choose_goals, enqueue_rollouts
from app.core.evaluation import enqueue_evaluation
from app.db.lifecycle import UNFINISHED_ROLLOUT_STATUSES, RolloutMode, RolloutStart, parse_start
from app.db.models import Rollout
from trainer.config import TrainerConfig

logger = logging.getLogger(__name__)

# Seed of the held-out goal draw: the same goals for every evaluation of every run.
EVAL_SEED = 20_251_122


def outstanding_groups(session: Session) -> int:
    """Train groups with at least one rollout still queued or running."""
    return int(
        session.scalar(
            select(func.count(distinct(Rollout.group_id))).where(
                Rollout.mode == RolloutMode.TRAIN, Rollout.status.in_(UNFINISHED_ROLLOUT_STATUSES)
            )
        )
        or 0
    )


@dataclass
class Scheduler:
    """Tops up the queue of train groups; call :meth:`top_up` whenever convenient."""

    celery: Celery
    settings: Settings
    group_size: int
    target_groups: int
    """Groups to keep queued or running: ``batch_groups * (1 + max_staleness)``."""
    environment: str | None = None
    """Whose goals the groups and evaluations draw (None: any goal)."""
    split: str = "train"
    sampling: dict[str, Any] | None = None
    """Sampling parameters stored on each rollout (temperature, max_tokens, ...)."""
    seed: int = 0
    starts: tuple[str, ...] = (RolloutStart.SEARCH.value,)
    """The starts a train group draws from, uniformly (one per group; eval: search)."""
    eval_goals: int = 0
    """Held-out goals played once for each evaluated policy version (0: no evaluations)."""
    eval_split: str = "test"
    eval_sampling: dict[str, Any] | None = None
    """Sampling parameters of the evaluation episodes (temperature 0: greedy)."""
    enqueued_groups: int = 0

    def __post_init__(self) -> None:
        if not self.starts:
            raise ValueError("starts is empty: give at least one of search, results, item")
        self.starts = tuple(parse_start(start).value for start in self.starts)
        self._rng = random.Random(self.seed)

    @classmethod
    def for_run(
        cls, settings: Settings, config: TrainerConfig, done: int, **options: Any
    ) -> Scheduler:
        """The scheduler of a run (either backend): groups of ``group_size``,
        ``batch_groups x (1 + max_staleness)`` of them outstanding, goal draws seeded by the
        config's seed plus the last committed step ``done`` (a restart draws other goals).
        ``options``: the other fields (split, sampling, starts, eval_goals, ...)."""
        return cls(
            create_celery(settings),
            settings,
            group_size=config.group_size,
            target_groups=config.batch_groups * (1 + config.max_staleness),
            seed=config.seed + done,
            **options,
        )

    def missing(self, session: Session) -> int:
        return max(self.target_groups - outstanding_groups(session), 0)

    def top_up(self, session: Session) -> int:
        """Enqueue the missing groups in the caller's transaction; jobs go out on commit.

        Returns how many groups were added. The goals are drawn by weight from ``split``
        (distinct within one top-up).
        """
        missing = self.missing(session)
        if missing == 0:
            return 0
        goal_rng = random.Random(self._rng.randrange(2**31))
        goal_ids = choose_goals(
            session, self.split, missing, goal_rng, environment=self.environment
        )
        by_start: dict[str, list[int]] = defaultdict(list)
        for goal_id in goal_ids:  # one start draws nothing: the goals stay as they were
            start = self.starts[0] if len(self.starts) == 1 else self._rng.choice(self.starts)
            by_start[start].append(goal_id)
        for start, goals in by_start.items():
            enqueue_rollouts(
                session,
                self.celery,
                goal_ids=goals,
                group_size=self.group_size,
                mode=RolloutMode.TRAIN.value,
                start=start,
                sampling=self.sampling,
                settings=self.settings,
            )
        self.enqueued_groups += missing
        logger.info("scheduler: enqueued %d groups of %d", missing, self.group_size)
        return missing

    def enqueue_eval(self, session: Session) -> int:
        """Queue one ``eval`` episode on each of ``eval_goals`` held-out goals; returns how
        many. The goals are drawn with one fixed seed, so every evaluation plays the same
        goals and success by policy version compares like with like."""
        if self.eval_goals <= 0:
            return 0
        goal_ids = choose_goals(
            session,
            self.eval_split,
            self.eval_goals,
            random.Random(EVAL_SEED),
            environment=self.environment,
        )
        enqueue_evaluation(
            session, self.celery, goal_ids, settings=self.settings, sampling=self.eval_sampling
        )
        logger.info("scheduler: queued an evaluation on %d goals", len(goal_ids))
        return len(goal_ids)
