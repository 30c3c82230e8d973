"""The rollout task's database writes: small functions over a caller's Session.

None of these commit; the caller's transaction (``session_scope``) decides. Every status
change goes through :func:`app.db.lifecycle.check_transition`, so an illegal move raises
:class:`~app.db.lifecycle.IllegalTransition` instead of overwriting the source of truth.

Concurrency: every function that changes a rollout or its attempts first locks the
rollout row (``SELECT ... FOR UPDATE``). A worker that starts an attempt, a worker that
finishes one and the reconciler therefore see each other's changes in order, and an
attempt that was superseded (marked ``lost``) can never be finished as ``succeeded``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.db.lifecycle import (
    FINAL_ROLLOUT_STATUSES,
    AttemptStatus,
    RolloutStatus,
    check_transition,
)
from app.db.models import Attempt, LlmCall, Rollout, Step

STEP_COLUMNS = frozenset(c.key for c in Step.__table__.columns) - {"id"}
CALL_COLUMNS = frozenset(c.key for c in LlmCall.__table__.columns) - {"id"}
_INSERT_STEPS = insert(Step.__table__).on_conflict_do_nothing(
    index_elements=["attempt_id", "index"]
)
_INSERT_CALLS = insert(LlmCall.__table__).on_conflict_do_nothing(
    index_elements=["attempt_id", "index"]
)


class AttemptSuperseded(RuntimeError):
    """The attempt is no longer ``running`` (a redelivery or the reconciler took over)."""


@dataclass(frozen=True)
class AttemptStart:
    """What a task needs to run one attempt; plain values, no ORM objects."""

    rollout_id: uuid.UUID
    attempt_id: int
    number: int
    goal_id: int
    mode: str
    max_attempts: int
    agent_url: str | None
    sampling: dict[str, Any] | None


@dataclass(frozen=True)
class EpisodeOutcome:
    """The result of an episode as the rollout row stores it."""

    reward: float
    num_steps: int
    reward_parts: dict[str, Any] | None = None


@dataclass(frozen=True)
class FailureDecision:
    """What happens after a failed attempt: ``retry`` re-enqueues, else the rollout ended."""

    retry: bool
    mode: str
    rollout_status: str
    superseded: bool = False


@dataclass
class PendingRows:
    """Steps and LLM calls of one attempt that are not written yet (column-name dicts)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps) + len(self.calls)

    def take(self) -> PendingRows:
        taken = PendingRows(self.steps, self.calls)
        self.steps, self.calls = [], []
        return taken


def _set_rollout_status(rollout: Rollout, new: RolloutStatus) -> None:
    check_transition("rollout", rollout.status, new)
    rollout.status = new


def _set_attempt_status(attempt: Attempt, new: AttemptStatus) -> None:
    check_transition("attempt", attempt.status, new)
    attempt.status = new


def _lock_rollout(session: Session, rollout_id: uuid.UUID) -> Rollout | None:
    return session.get(Rollout, rollout_id, with_for_update=True, populate_existing=True)


def _lock_attempt(session: Session, attempt_id: int) -> tuple[Attempt, Rollout]:
    """The attempt, read after locking its rollout (the lock every status change takes)."""
    owner = select(Attempt.rollout_id).where(Attempt.id == attempt_id).scalar_subquery()
    rollout = session.scalar(
        select(Rollout)
        .where(Rollout.id == owner)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if rollout is None:
        raise LookupError(f"attempt {attempt_id} does not exist")
    attempt = session.get(Attempt, attempt_id, populate_existing=True)
    assert attempt is not None  # its rollout exists and is locked
    return attempt, rollout


def _running_attempts(session: Session, rollout_id: uuid.UUID) -> Sequence[Attempt]:
    return session.scalars(
        select(Attempt).where(
            Attempt.rollout_id == rollout_id, Attempt.status == AttemptStatus.RUNNING
        )
    ).all()


def start_attempt(
    session: Session, rollout_id: uuid.UUID, *, worker: str, liveness_s: float
) -> AttemptStart | None:
    """Open attempt ``previous + 1`` for this delivery, or None when there is nothing to run.

    None when the rollout is missing or finished, or when another attempt is running and
    alive (its worker's heartbeat keeps ``deadline_at`` in the future): both are duplicate
    deliveries and a no-op. None also when the attempts are used up (the rollout is failed
    here). A ``running`` attempt whose heartbeat stopped is marked ``lost``: its worker
    died, and its rows must never reach training.
    """
    rollout = _lock_rollout(session, rollout_id)
    if rollout is None or rollout.status in FINAL_ROLLOUT_STATUSES:
        return None
    running = _running_attempts(session, rollout_id)
    deadline = rollout.deadline_at
    if running and deadline is not None and session.scalar(select(func.now() < deadline)):
        return None
    # ``attempts`` is the highest attempt number: only this function opens attempts.
    previous = rollout.attempts
    number = previous + 1
    for stale in running:
        _set_attempt_status(stale, AttemptStatus.LOST)
        stale.error = f"superseded by attempt {number}: no worker heartbeat (worker died)"
        stale.finished_at = func.now()
    if number > rollout.max_attempts:
        reason = rollout.last_error or "attempt lost"
        _set_rollout_status(rollout, RolloutStatus.FAILED)
        rollout.last_error = f"no attempts left after {previous}: {reason}"
        rollout.finished_at = func.now()
        session.flush()
        return None
    attempt = Attempt(rollout_id=rollout_id, number=number, worker=worker)
    session.add(attempt)
    _set_rollout_status(rollout, RolloutStatus.RUNNING)
    rollout.attempts = number
    rollout.worker = worker
    rollout.started_at = func.now()
    rollout.deadline_at = func.now() + timedelta(seconds=liveness_s)
    session.flush()
    return AttemptStart(
        rollout_id=rollout.id,
        attempt_id=attempt.id,
        number=number,
        goal_id=rollout.goal_id,
        mode=str(rollout.mode),
        max_attempts=rollout.max_attempts,
        agent_url=rollout.agent_url,
        sampling=rollout.sampling,
    )


def write_rows(session: Session, attempt_id: int, rows: PendingRows) -> None:
    """Insert steps and LLM calls; idempotent on ``(attempt_id, index)``.

    Raises :class:`AttemptSuperseded` when the attempt is no longer running, so that a
    worker whose attempt was taken over stops its episode at the next write.
    """
    status = session.scalar(
        select(Attempt.status).where(Attempt.id == attempt_id).with_for_update(read=True)
    )
    if status != AttemptStatus.RUNNING:
        raise AttemptSuperseded(f"attempt {attempt_id} is {status}, not running")
    _insert_rows(session, attempt_id, rows)


def _insert_rows(session: Session, attempt_id: int, rows: PendingRows) -> None:
    """An executemany per table (and per set of columns, normally one) on the session's
    connection: the statement is compiled once per process, where a multi-row VALUES is
    compiled and parsed again for every batch, and SQLAlchemy still sends the rows in one
    round trip ("insertmanyvalues")."""
    connection = session.connection()
    for statement, table_rows, allowed in (
        (_INSERT_STEPS, rows.steps, STEP_COLUMNS),
        (_INSERT_CALLS, rows.calls, CALL_COLUMNS),
    ):
        by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
        for row in table_rows:
            by_columns.setdefault(frozenset(row), []).append(_columns(row, allowed, attempt_id))
        for batch in by_columns.values():
            connection.execute(statement, batch)


def _columns(row: dict[str, Any], allowed: frozenset[str], attempt_id: int) -> dict[str, Any]:
    unknown = set(row) - allowed
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}; expected some of {sorted(allowed)}")
    return {**row, "attempt_id": attempt_id}


def finish_attempt(
    session: Session,
    attempt_id: int,
    outcome: EpisodeOutcome,
    rows: PendingRows,
    *,
    policy_versions: tuple[int, int] | None = None,
) -> bool:
    """Write the last rows and finish attempt and rollout as ``succeeded``.

    Returns False (and writes nothing) when the attempt was superseded or the rollout was
    cancelled meanwhile: exactly one attempt of a finished rollout is ``succeeded``.
    ``success`` is ``reward == 1.0``; the policy versions seen are ``policy_versions``
    when the caller saw every LLM call of the attempt (the built-in agent), else they are
    read from the attempt's recorded calls (calls through the gateway).
    """
    attempt, rollout = _lock_attempt(session, attempt_id)
    if attempt.status != AttemptStatus.RUNNING:
        return False
    if rollout.status in FINAL_ROLLOUT_STATUSES:
        _set_attempt_status(attempt, AttemptStatus.FAILED)
        attempt.error = f"rollout became {rollout.status} while the attempt ran"
        attempt.finished_at = func.now()
        session.flush()
        return False
    _insert_rows(session, attempt_id, rows)
    if policy_versions is not None:
        low, high = policy_versions
    else:
        low, high = session.execute(
            select(func.min(LlmCall.policy_version), func.max(LlmCall.policy_version)).where(
                LlmCall.attempt_id == attempt_id
            )
        ).one()
    _set_attempt_status(attempt, AttemptStatus.SUCCEEDED)
    attempt.finished_at = func.now()
    attempt.reward = outcome.reward
    attempt.reward_parts = outcome.reward_parts
    _set_rollout_status(rollout, RolloutStatus.SUCCEEDED)
    rollout.reward = outcome.reward
    rollout.success = outcome.reward == 1.0
    rollout.num_steps = outcome.num_steps
    rollout.reward_parts = outcome.reward_parts
    rollout.policy_version_min = low
    rollout.policy_version_max = high
    rollout.finished_at = func.now()
    rollout.deadline_at = None
    rollout.last_error = None
    session.flush()
    return True


def fail_attempt(
    session: Session,
    attempt_id: int,
    reason: str,
    *,
    queue_timeout_s: float,
    rows: PendingRows | None = None,
    retryable: bool = True,
) -> FailureDecision:
    """Mark the attempt failed with ``reason``; queue the rollout again while attempts are left.

    ``retryable=False`` (a failure that another attempt cannot fix, such as an unknown
    goal) fails the rollout at once. The rows gathered so far are kept for debugging (a
    failed attempt is never trained on). When the attempt was already superseded nothing
    changes and no retry is asked.
    """
    attempt, rollout = _lock_attempt(session, attempt_id)
    mode = str(rollout.mode)
    if attempt.status != AttemptStatus.RUNNING:
        return FailureDecision(False, mode, str(rollout.status), superseded=True)
    if rows:
        _insert_rows(session, attempt_id, rows)
    _set_attempt_status(attempt, AttemptStatus.FAILED)
    attempt.error = reason
    attempt.finished_at = func.now()
    if rollout.status in FINAL_ROLLOUT_STATUSES:
        session.flush()
        return FailureDecision(False, mode, str(rollout.status))
    rollout.last_error = reason
    if retryable and rollout.attempts < rollout.max_attempts:
        _set_rollout_status(rollout, RolloutStatus.QUEUED)
        rollout.deadline_at = func.now() + timedelta(seconds=queue_timeout_s)
        session.flush()
        return FailureDecision(True, mode, RolloutStatus.QUEUED.value)
    _set_rollout_status(rollout, RolloutStatus.FAILED)
    rollout.last_error = (
        f"failed after {rollout.attempts} attempts: {reason}"
        if retryable
        else f"failed (not retryable) in attempt {rollout.attempts}: {reason}"
    )
    rollout.finished_at = func.now()
    rollout.deadline_at = None
    session.flush()
    return FailureDecision(False, mode, RolloutStatus.FAILED.value)


def extend_deadlines(
    session: Session, rollout_ids: Sequence[uuid.UUID], *, liveness_s: float, episode_s: float
) -> int:
    """The worker heartbeat: push the deadline of running rollouts ``liveness_s`` ahead.

    Capped at the attempt's start + ``episode_s``, so that a hung episode in a live worker
    still reaches its deadline. Returns the number of rows updated.
    """
    if not rollout_ids:
        return 0
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(Rollout)
        .where(Rollout.id.in_(list(rollout_ids)), Rollout.status == RolloutStatus.RUNNING)
        .values(
            deadline_at=func.least(
                func.now() + timedelta(seconds=liveness_s),
                Rollout.started_at + timedelta(seconds=episode_s),
            )
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)
