"""Evaluating a policy on the pipeline: queue ``eval`` rollouts, wait for them, score them.

An evaluation is a set of rollouts in mode ``eval`` (the ``eval`` Celery queue), one per
goal, queued in one transaction (so one ``created_at``: one *round*, as
:func:`app.db.performance.evaluation_rounds` groups them). Two callers queue them:
``wsrl eval`` (the first N goals of a split, optionally after publishing an endpoint to
evaluate) and the trainer's scheduler (held-out goals every ``eval_every`` versions, scored
per round by the SQL of :mod:`app.db.performance`).

``wsrl eval`` then waits here for every rollout to be final, polling Postgres through
outages, and scores them with :func:`score_of`: the score (100 x mean reward) and the
success rate (each rollout's ``success``, written by the worker by its environment's rule)
over the episodes that played to the end, with the rollouts that never completed counted
apart, so an outage cannot pass for a low score.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from celery import Celery
from redis import Redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.endpoint import PolicyEndpoint, publish_policy, published_max_version
from app.core.enqueue import enqueue_rollouts
from app.core.failures import infrastructure_reason
from app.db.lifecycle import FINAL_ROLLOUT_STATUSES, RolloutMode
from app.db.models import Goal, Rollout
from app.db.session import DATABASE_DOWN

logger = logging.getLogger(__name__)

POLL_S = 0.5


class EvalTimeout(TimeoutError):
    """Rollouts of an evaluation were still unfinished when the wait's time was up."""


class EvalStopped(RuntimeError):
    """The wait was asked to stop (its ``stop`` event set, by Ctrl-C in ``wsrl eval``)."""


class Outcome(NamedTuple):
    """One eval rollout once final."""

    status: str
    reward: float | None
    last_error: str | None
    success: bool | None
    """As the worker judged it by its environment's rule (the rollout's ``success``)."""


@dataclass(frozen=True)
class EvalScore:
    """Score and success over completed episodes; failed rollouts counted apart."""

    score: float
    success: float
    episodes: int
    failed: int
    infrastructure: int
    reasons: dict[str, int]

    def line(self) -> str:
        return (
            f"score={self.score:.1f} success={self.success:.1f}% "
            f"episodes={self.episodes} failed={self.failed}"
        )


def score_of(outcomes: Sequence[Outcome]) -> EvalScore:
    """Score and success over the episodes that completed (``succeeded`` rollouts).

    A rollout that did not complete has no reward: counting it as 0 would report an outage
    as a bad policy, so it is counted in ``failed`` instead (and in ``infrastructure``
    when its reason names a part of the deployment).
    """
    completed = [o for o in outcomes if o.status == "succeeded"]
    values = [o.reward or 0.0 for o in completed]
    failed = [o for o in outcomes if o.status != "succeeded"]
    reasons = Counter(short_reason(o.last_error or o.status) for o in failed)
    return EvalScore(
        score=100 * sum(values) / len(values) if values else 0.0,
        success=100 * sum(bool(o.success) for o in completed) / len(completed)
        if completed
        else 0.0,
        episodes=len(values),
        failed=len(failed),
        infrastructure=sum(infrastructure_reason(o.last_error) for o in failed),
        reasons=dict(reasons.most_common()),
    )


def short_reason(reason: str) -> str:
    """The reason without the attempt count and details: ``failed after 3 attempts: env
    error: ...`` -> ``env error``."""
    for prefix in ("failed after", "failed (not retryable)", "no attempts left after"):
        if reason.startswith(prefix):
            reason = reason.split(": ", 1)[-1]
    return reason.split(":", 1)[0][:80]


def split_goal_ids(session: Session, split: str, limit: int, environment: str) -> list[int]:
    """The first ``limit`` goals of ``split`` of ``environment`` (the goals ``wsrl eval``
    plays); LookupError if none."""
    goal_ids = list(
        session.scalars(
            select(Goal.id)
            .where(Goal.split == split, Goal.environment == environment)
            .order_by(Goal.id)
            .limit(limit)
        )
    )
    if not goal_ids:
        raise LookupError(f"split {split!r} has no {environment} goals")
    return goal_ids


def publish_for_evaluation(session: Session, redis: Redis, base_url: str, model: str) -> int:
    """Publish ``model`` at ``base_url`` as the policy, one version above every recorded
    one (like ``PUT /v1/policy``), so each LLM call of the evaluation records it; returns
    the version. Workers switch to it from their next call."""
    version = (published_max_version(session) or 0) + 1
    publish_policy(session, redis, PolicyEndpoint(base_url, model, version))
    return version


def enqueue_evaluation(
    session: Session,
    celery: Celery,
    goal_ids: Sequence[int],
    *,
    settings: Settings,
    sampling: dict[str, Any] | None = None,
) -> list[uuid.UUID]:
    """One ``eval`` rollout per goal, in the caller's transaction (one round); their ids."""
    return enqueue_rollouts(
        session,
        celery,
        goal_ids=goal_ids,
        mode=RolloutMode.EVAL.value,
        sampling=sampling,
        settings=settings,
    )


def wait_for_rollouts(
    sessions: sessionmaker[Session],
    ids: list[uuid.UUID],
    timeout: float,
    on_progress: Callable[[int], None],
    *,
    say: Callable[[str], None] = logger.warning,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """Poll until every rollout is final and return their outcomes.

    An unreachable database (restarting, failing over) is retried on the next poll, with
    one message (to ``say``) when it goes and one when it is back. Raises
    :class:`EvalTimeout`, naming how many are left, when ``timeout`` passes, and
    :class:`EvalStopped` between two polls once ``stop`` is set (a Ctrl-C turned into an
    event, so that it never lands inside a query or the connection pool's code).
    """
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout
    down_since: float | None = None
    done: list = []
    while True:
        try:
            with sessions() as session:
                rows = session.execute(
                    select(
                        Rollout.status, Rollout.reward, Rollout.last_error, Rollout.success
                    ).where(Rollout.id.in_(ids))
                ).all()
        except DATABASE_DOWN as exc:
            if down_since is None:
                down_since = time.monotonic()
                say(f"database unreachable, still waiting: {_first_line(exc)}")
        else:
            if down_since is not None:
                say(f"database back after {time.monotonic() - down_since:.0f}s")
                down_since = None
            done = [row for row in rows if row.status in FINAL_ROLLOUT_STATUSES]
            on_progress(len(done))
            if len(done) == len(ids):
                return [Outcome(str(r.status), r.reward, r.last_error, r.success) for r in done]
        if time.monotonic() > deadline:
            raise EvalTimeout(
                f"{len(ids) - len(done)} of {len(ids)} eval rollouts unfinished after "
                f"{timeout:g}s (are workers consuming the 'eval' queue?)"
            )
        if stop.wait(POLL_S):
            raise EvalStopped(f"{len(ids) - len(done)} of {len(ids)} eval rollouts unfinished")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
