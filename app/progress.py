"""What the CLI prints about a running pipeline, in one place.

* :class:`EpisodeTally` and :func:`format_message`: ``wsrl watch`` follows every worker's
  episode logs live. Workers publish JSON messages on the ``logs_channel`` pub/sub channel
  (:mod:`workers.recording`): ``log`` lines (``[TASK]/[STEP]/[DONE]``) and lifecycle events
  (``started``, ``succeeded``, ``failed``, ``superseded``). Pub/sub is fire-and-forget: a
  watcher sees what is published while it listens, nothing from before.
* :class:`TrainingProgress`: ``wsrl dev`` prints a rollout summary, one line per new train
  step and one per finished held-out evaluation round, from Postgres.
* Long work (``wsrl eval``, ``wsrl policy eval`` and ``bootstrap``, exports, catalog
  builds, ``wsrl model get``) shows its progress through :class:`app.work_progress.WorkProgress`,
  a module of its own so that ``wsrl env serve`` does not import the database for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from redis import Redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.redis_client import db_channel
from app.db.lifecycle import RolloutMode
from app.db.models import Rollout, TrainStep
from app.db.performance import evaluation_rounds, version_span
from app.db.session import session_scope


@dataclass
class EpisodeTally:
    """Counts of what the watcher has seen since it started."""

    started: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    superseded: int = 0
    rewards: list[float] = field(default_factory=list)
    solved: int = 0
    running: set[str] = field(default_factory=set)
    since: float = field(default_factory=time.monotonic)

    def update(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        key = f"{message.get('rollout')}#{message.get('attempt')}"
        if kind == "started":
            self.started += 1
            self.running.add(key)
        elif kind == "succeeded":
            self.succeeded += 1
            self.rewards.append(float(message.get("reward", 0.0)))
            self.solved += bool(message.get("success"))  # by the episode's environment
            self.running.discard(key)
        elif kind == "failed":
            self.running.discard(key)
            if message.get("retry"):
                self.retried += 1
            else:
                self.failed += 1
        elif kind == "superseded":
            self.superseded += 1
            self.running.discard(key)

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.since, 1e-9)
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else 0.0
        return (
            f"running {len(self.running)} | succeeded {self.succeeded} "
            f"({self.succeeded / elapsed:.2f}/s) | failed {self.failed} | "
            f"retried {self.retried} | lost {self.superseded} | "
            f"mean reward {mean:.3f} | success {self.solved}/{len(self.rewards)}"
        )


def format_message(message: dict[str, Any]) -> str:
    """One display line: ``worker rollout#attempt text``."""
    rollout = str(message.get("rollout", "?"))[:8]
    who = f"{message.get('worker', '?')} {rollout}#{message.get('attempt')}"
    kind = message.get("kind")
    if kind == "log":
        return f"{who} {message.get('line', '')}"
    if kind == "failed":
        action = "retrying" if message.get("retry") else "giving up"
        return f"{who} [FAILED] {message.get('reason')} ({action})"
    if kind == "succeeded":
        return f"{who} [SUCCEEDED] reward {message.get('reward')} in {message.get('steps')} steps"
    return f"{who} [{str(kind).upper()}]"


def follow(redis: Redis, channel: str, *, poll_s: float = 0.5) -> Iterator[dict[str, Any] | None]:
    """Messages of ``channel`` as dicts; ``None`` every ``poll_s`` without one (to redraw)."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(db_channel(redis, channel))
    try:
        while True:
            raw = pubsub.get_message(timeout=poll_s)
            if raw is None:
                yield None
                continue
            try:
                yield json.loads(raw["data"])
            except (TypeError, ValueError):
                continue
    finally:
        pubsub.close()


class TrainingProgress:
    """Remembers the last step and evaluation round it printed; episodes/s counts train
    rollouts finished since the last step. Rounds finished before it started are not
    printed again (``wsrl report`` shows them)."""

    def __init__(self, sessions: sessionmaker[Session], since: datetime) -> None:
        self.sessions = sessions
        self.since = since
        with session_scope(sessions) as session:
            self.last_step = int(session.scalar(select(func.max(TrainStep.step))) or 0)
            self.printed_rounds = {
                r["created_at"] for r in evaluation_rounds(session) if r["unfinished"] == 0
            }

    def summary(self) -> str:
        with session_scope(self.sessions) as session:
            counts = dict(
                session.execute(
                    select(Rollout.status, func.count())
                    .where(Rollout.mode == RolloutMode.TRAIN)
                    .group_by(Rollout.status)
                ).all()
            )
            trained = session.scalar(select(func.count()).where(Rollout.train_step.is_not(None)))
        parts = [f"{status} {counts.get(status, 0)}" for status in ("queued", "running")]
        parts += [f"succeeded {counts.get('succeeded', 0)}", f"failed {counts.get('failed', 0)}"]
        return f"train rollouts: {', '.join(parts)}; used by train steps {trained}"

    def new_step_lines(self) -> list[str]:
        with session_scope(self.sessions) as session:
            steps = session.scalars(
                select(TrainStep).where(TrainStep.step > self.last_step).order_by(TrainStep.step)
            ).all()
            lines = []
            for step in steps:
                if step is steps[-1] and "time/step_s" not in (step.metrics or {}):
                    break  # committed before its sync; the phase times follow: print it next time
                finished = session.scalar(
                    select(func.count()).where(
                        Rollout.mode == RolloutMode.TRAIN,
                        Rollout.finished_at > self.since,
                        Rollout.finished_at <= step.created_at,
                    )
                )
                elapsed = max((step.created_at - self.since).total_seconds(), 1e-6)
                lines.append(format_step(step, (finished or 0) / elapsed))
                self.since, self.last_step = step.created_at, step.step
        return lines

    def new_eval_lines(self) -> list[str]:
        """A line for each evaluation round that has finished since the last call."""
        with session_scope(self.sessions) as session:
            rounds = evaluation_rounds(session)
        lines = []
        for r in rounds:
            if r["unfinished"] == 0 and r["created_at"] not in self.printed_rounds:
                self.printed_rounds.add(r["created_at"])
                lines.append(format_round(r))
        return lines


def format_round(row: dict[str, Any]) -> str:
    """One evaluation round (:func:`app.db.performance.evaluation_rounds`) as a line."""
    return (
        f"held-out {version_span(row)}: {row['episodes']} episodes, reward "
        f"{float(row['mean_reward']):.3f}, success {float(row['success_rate']):.1%}"
    )


def format_step(step: TrainStep, episodes_per_s: float) -> str:
    """One train step as a line; a step that updated nothing (every group's rewards equal:
    no advantage to learn from, ``update/skipped``) says so, as its version stays."""
    m = step.metrics or {}
    line = (
        f"step {step.step:4d}  v{step.policy_version}  reward {m.get('reward/mean', 0.0):.3f}  "
        f"success {m.get('reward/success', 0.0):6.1%}  episodes/s {episodes_per_s:5.2f}  "
        f"step time {m.get('time/step_s', 0.0):.1f}s (wait {m.get('time/wait_s', 0.0):.1f}s)"
    )
    if m.get("update/skipped"):
        line += "  no update: every group's rewards were equal"
    return line
