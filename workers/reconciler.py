"""The reconciler: Postgres decides what is done, so it repairs what Redis lost.

A rollout is stuck when it is ``queued`` or ``running`` and past its ``deadline_at``:

- ``queued`` past the queue timeout: its message was probably lost (Redis flushed or
  restarted without persistence, a send that failed after the commit). It is sent again.
- ``running`` past its deadline: the worker heartbeat (:mod:`workers.runtime`) stopped
  extending it, so no live attempt exists (the process died, or the episode outlived its
  budget). Its running attempt is marked ``lost`` and the rollout is queued again, or
  failed with the reason when its attempts are used up.

A duplicate message is harmless: the task is idempotent and a second delivery of a
finished rollout is a no-op. Rows are locked with ``SKIP LOCKED``, so several
reconcilers (a loop, the trainer, a test) can run at once.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from celery import Celery
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.enqueue import send_rollouts
from app.db.lifecycle import AttemptStatus, RolloutStatus, check_transition
from app.db.models import Attempt, Rollout
from app.db.session import session_scope

logger = logging.getLogger(__name__)

BATCH = 500


@dataclass
class ReconcileReport:
    """What one pass did; ``resent`` lists the rollouts whose jobs were sent again."""

    resent: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    lost_attempts: int = 0

    def __bool__(self) -> bool:
        return bool(self.resent or self.failed or self.lost_attempts)


def _mark_lost(session: Session, rollout: Rollout) -> tuple[int, str]:
    attempts = session.scalars(
        select(Attempt).where(
            Attempt.rollout_id == rollout.id, Attempt.status == AttemptStatus.RUNNING
        )
    ).all()
    reason = (
        f"attempt {rollout.attempts} lost: no worker heartbeat past the deadline "
        "(worker died or the episode outlived its budget)"
    )
    for attempt in attempts:
        check_transition("attempt", attempt.status, AttemptStatus.LOST)
        attempt.status = AttemptStatus.LOST
        attempt.error = reason
        attempt.finished_at = func.now()
    return len(attempts), reason


def _requeue(rollout: Rollout, queue_timeout_s: float) -> None:
    check_transition("rollout", rollout.status, RolloutStatus.QUEUED)
    rollout.status = RolloutStatus.QUEUED
    rollout.deadline_at = func.now() + timedelta(seconds=queue_timeout_s)


def reconcile_rows(
    session: Session, settings: Settings
) -> tuple[ReconcileReport, list[tuple[uuid.UUID, str]]]:
    """Repair stuck rollouts in the session's transaction; returns the jobs to send.

    The caller sends the jobs after committing (``reconcile_once`` does both).
    """
    report = ReconcileReport()
    jobs: list[tuple[uuid.UUID, str]] = []
    stuck = session.scalars(
        select(Rollout)
        .where(
            Rollout.status.in_([RolloutStatus.QUEUED, RolloutStatus.RUNNING]),
            Rollout.deadline_at < func.now(),
        )
        .order_by(Rollout.deadline_at)
        .limit(BATCH)
        .with_for_update(skip_locked=True)
    ).all()
    for rollout in stuck:
        if rollout.status == RolloutStatus.RUNNING:
            lost, reason = _mark_lost(session, rollout)
            report.lost_attempts += lost
            rollout.last_error = reason
            if rollout.attempts >= rollout.max_attempts:
                check_transition("rollout", rollout.status, RolloutStatus.FAILED)
                rollout.status = RolloutStatus.FAILED
                rollout.last_error = f"failed after {rollout.attempts} attempts: {reason}"
                rollout.finished_at = func.now()
                rollout.deadline_at = None
                report.failed.append(rollout.id)
                continue
            _requeue(rollout, settings.rollout_queue_timeout_s)
        else:
            rollout.deadline_at = func.now() + timedelta(seconds=settings.rollout_queue_timeout_s)
        jobs.append((rollout.id, str(rollout.mode)))
        report.resent.append(rollout.id)
    session.flush()
    return report, jobs


def reconcile_once(
    sessions: sessionmaker[Session], celery: Celery, settings: Settings
) -> ReconcileReport:
    """One pass: repair, commit, then send the jobs again."""
    with session_scope(sessions) as session:
        report, jobs = reconcile_rows(session, settings)
    if jobs:
        send_rollouts(celery, jobs)
    if report:
        logger.info(
            "reconciler: %d resent, %d failed, %d attempts marked lost",
            len(report.resent),
            len(report.failed),
            report.lost_attempts,
        )
    return report


def run_loop(
    sessions: sessionmaker[Session],
    celery: Celery,
    settings: Settings,
    *,
    interval_s: float,
    stop: threading.Event | None = None,
) -> None:
    """Reconcile every ``interval_s`` until ``stop`` is set; a failed pass is logged and retried."""
    stop = stop or threading.Event()
    while True:
        try:
            reconcile_once(sessions, celery, settings)
        except Exception:
            logger.exception("reconciler pass failed; retrying in %.1fs", interval_s)
        if stop.wait(interval_s):
            return
