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

import functools
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Dialect,
    Interval,
    Table,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from app.db.lifecycle import (
    FINAL_ROLLOUT_STATUSES,
    AttemptStatus,
    RolloutStatus,
    check_transition,
)
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step

STEP_COLUMNS = frozenset(c.key for c in Step.__table__.columns) - {"id"}
CALL_COLUMNS = frozenset(c.key for c in LlmCall.__table__.columns) - {"id"}
_INSERT_STEPS = pg_insert(Step.__table__).on_conflict_do_nothing(
    index_elements=["attempt_id", "index"]
)
_INSERT_CALLS = pg_insert(LlmCall.__table__).on_conflict_do_nothing(
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
    start: str = "search"
    """Where the policy starts playing (:mod:`app.environments.webshop.opening`)."""
    environment: str = "webshop"
    """The goal's environment (:data:`app.environments.ENVIRONMENTS`)."""
    goal_spec: dict[str, Any] | None = None
    """The goal's own fields, where its environment keeps them (``goals.spec``)."""
    instruction: str = ""
    """The goal's instruction (an AgentGym server's session does not say it)."""


@dataclass(frozen=True)
class EpisodeOutcome:
    """The result of an episode as the rollout row stores it."""

    reward: float
    num_steps: int
    success: bool
    """As the episode's environment judges the reward."""
    reward_parts: dict[str, Any] | None = None


@dataclass(frozen=True)
class FailureDecision:
    """What happens after a failed attempt: ``retry`` re-enqueues, else the rollout ended."""

    retry: bool
    mode: str
    rollout_status: str
    superseded: bool = False
    free: bool = False  # an outage's retry: the attempt did not use one up


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


_ROLLOUTS = Rollout.__table__
_ATTEMPTS = Attempt.__table__
_GOALS = Goal.__table__

# The once-per-episode statements, built once: building and coercing a statement costs
# more CPU than running its cached compiled form.
_RUNNING_IDS = (
    select(func.array_agg(_ATTEMPTS.c.id))
    .where(_ATTEMPTS.c.rollout_id == _ROLLOUTS.c.id, _ATTEMPTS.c.status == AttemptStatus.RUNNING)
    .scalar_subquery()
)
_LOCK_FOR_START = (
    select(
        _ROLLOUTS.c.status,
        _ROLLOUTS.c.attempts,
        _ROLLOUTS.c.max_attempts,
        _ROLLOUTS.c.goal_id,
        _ROLLOUTS.c.mode,
        _ROLLOUTS.c.agent_url,
        _ROLLOUTS.c.sampling,
        _ROLLOUTS.c.start,
        _ROLLOUTS.c.last_error,
        func.coalesce(func.now() < _ROLLOUTS.c.deadline_at, False).label("alive"),
        _RUNNING_IDS.label("running"),
        _GOALS.c.environment,
        _GOALS.c.spec,
        _GOALS.c.instruction,
    )
    .select_from(_ROLLOUTS.join(_GOALS, _GOALS.c.id == _ROLLOUTS.c.goal_id))
    .where(_ROLLOUTS.c.id == bindparam("rollout_id"))
    .with_for_update(of=_ROLLOUTS)
)
_OPEN_ROLLOUT = (
    update(_ROLLOUTS)
    .where(_ROLLOUTS.c.id == bindparam("rollout_id"))
    .values(
        status=RolloutStatus.RUNNING,
        attempts=bindparam("number"),
        worker=bindparam("by"),
        started_at=func.now(),
        deadline_at=func.now() + bindparam("liveness", type_=Interval),
    )
)
# The new attempt and the rollout's update in one statement (a data-modifying CTE): each
# statement costs a worker 0.3-0.5 ms of CPU (docs/benchmarks.md).
_INSERT_ATTEMPT_OPEN_ROLLOUT = (
    insert(_ATTEMPTS)
    .values(
        rollout_id=bindparam("rollout_id"),
        number=bindparam("number"),
        worker=bindparam("by"),
    )
    .returning(_ATTEMPTS.c.id)
    .add_cte(_OPEN_ROLLOUT.cte("opened_rollout"))
)
_LOCK_OWNER = (
    select(_ROLLOUTS.c.id, _ROLLOUTS.c.status)
    .where(
        _ROLLOUTS.c.id
        == select(_ATTEMPTS.c.rollout_id)
        .where(_ATTEMPTS.c.id == bindparam("attempt_id"))
        .scalar_subquery()
    )
    .with_for_update()
)
_ATTEMPT_STATUS = select(_ATTEMPTS.c.status).where(_ATTEMPTS.c.id == bindparam("attempt_id"))
_SUCCEED_ATTEMPT = (
    update(_ATTEMPTS)
    .where(_ATTEMPTS.c.id == bindparam("attempt_id"))
    .values(
        status=AttemptStatus.SUCCEEDED,
        finished_at=func.now(),
        reward=bindparam("r_reward"),
        reward_parts=bindparam("r_parts"),
    )
)
_ROLLOUT_SUCCEEDS = update(_ROLLOUTS).values(
    status=RolloutStatus.SUCCEEDED,
    reward=bindparam("r_reward"),
    success=bindparam("r_success"),
    num_steps=bindparam("r_steps"),
    reward_parts=bindparam("r_parts"),
    policy_version_min=bindparam("v_min"),
    policy_version_max=bindparam("v_max"),
    finished_at=func.now(),
    deadline_at=None,
    last_error=None,
)
_SUCCEED_ROLLOUT_ONLY = _ROLLOUT_SUCCEEDS.where(_ROLLOUTS.c.id == bindparam("owner_id"))
# Attempt and rollout succeed in one statement (a data-modifying CTE). No parameter is
# named after a column of either table: SQLAlchemy would read it as a SET value.
_SUCCEED = _SUCCEED_ROLLOUT_ONLY.add_cte(_SUCCEED_ATTEMPT.cte("succeeded_attempt"))

# The same success, guarded: it locks the rollout, and changes anything only while the
# attempt and its rollout are both ``running`` (the common case: one statement instead of
# the lock's two and this one). The rollout is locked before the attempt is updated (the
# attempt's update reads the lock's result), the order every status change takes; rows
# changed by a transaction that held the lock meanwhile are read again, as ``UPDATE``
# and ``FOR UPDATE`` do. No row back means nothing changed.
_RUNNING_OWNER = (
    select(_ROLLOUTS.c.id)
    .where(
        _ROLLOUTS.c.id
        == select(_ATTEMPTS.c.rollout_id)
        .where(_ATTEMPTS.c.id == bindparam("attempt_id"))
        .scalar_subquery(),
        _ROLLOUTS.c.status == RolloutStatus.RUNNING,
    )
    .with_for_update()
    .cte("running_owner")
)
_SUCCEED_RUNNING_ATTEMPT = (
    _SUCCEED_ATTEMPT.where(
        _ATTEMPTS.c.status == AttemptStatus.RUNNING,
        _ATTEMPTS.c.rollout_id.in_(select(_RUNNING_OWNER.c.id)),
    )
    .returning(_ATTEMPTS.c.rollout_id)
    .cte("succeeded_attempt")
)
_SUCCEED_IF_RUNNING = (
    _ROLLOUT_SUCCEEDS.where(_ROLLOUTS.c.id.in_(select(_SUCCEED_RUNNING_ATTEMPT.c.rollout_id)))
    .returning(_ROLLOUTS.c.id)
    .add_cte(_RUNNING_OWNER)
    .add_cte(_SUCCEED_RUNNING_ATTEMPT)
)


def _expire_loaded(session: Session, model: type[Rollout] | type[Attempt], *ids: Any) -> None:
    """Expire the session's objects of rows changed by Core statements, so that a caller
    holding them (the API, tests, the reconciler in one session) reads the new values."""
    for ident in ids:
        loaded = session.identity_map.get(identity_key(model, ident))
        if loaded is not None:
            session.expire(loaded)


def start_attempt(
    session: Session, rollout_id: uuid.UUID, *, worker: str, liveness_s: float
) -> AttemptStart | None:
    """Open attempt ``previous + 1`` for this delivery, or None when there is nothing to run.

    None when the rollout is missing or finished, or when another attempt is running and
    alive (its worker's heartbeat keeps ``deadline_at`` in the future): both are duplicate
    deliveries and a no-op. None also when the attempts are used up (the rollout is failed
    here). A ``running`` attempt whose heartbeat stopped is marked ``lost``: its worker
    died, and its rows must never reach training.

    Core statements on the session's connection, not ORM objects: this runs once per
    episode and the unit of work cost several ms of CPU per call. The lock, the running
    attempts and the liveness check are one statement.
    """
    session.flush()  # the caller's pending ORM changes first, as a query would autoflush
    connection = session.connection()
    rollout = connection.execute(_LOCK_FOR_START, {"rollout_id": rollout_id}).one_or_none()
    if rollout is None or rollout.status in FINAL_ROLLOUT_STATUSES:
        return None
    running: list[int] = rollout.running or []
    if running and rollout.alive:
        return None
    # ``attempts`` is the highest attempt number: only this function opens attempts.
    previous = rollout.attempts
    number = previous + 1
    if running:
        check_transition("attempt", AttemptStatus.RUNNING, AttemptStatus.LOST)
        connection.execute(
            update(_ATTEMPTS)
            .where(_ATTEMPTS.c.id.in_(running))
            .values(
                status=AttemptStatus.LOST,
                error=f"superseded by attempt {number}: no worker heartbeat (worker died)",
                finished_at=func.now(),
            )
        )
    if number > rollout.max_attempts:
        check_transition("rollout", rollout.status, RolloutStatus.FAILED)
        reason = rollout.last_error or "attempt lost"
        connection.execute(
            update(_ROLLOUTS)
            .where(_ROLLOUTS.c.id == rollout_id)
            .values(
                status=RolloutStatus.FAILED,
                last_error=f"no attempts left after {previous}: {reason}",
                finished_at=func.now(),
            )
        )
        _expire_loaded(session, Rollout, rollout_id)
        _expire_loaded(session, Attempt, *running)
        return None
    check_transition("rollout", rollout.status, RolloutStatus.RUNNING)
    attempt_id = connection.scalar(
        _INSERT_ATTEMPT_OPEN_ROLLOUT,
        {
            "rollout_id": rollout_id,
            "number": number,
            "by": worker,
            "liveness": timedelta(seconds=liveness_s),
        },
    )
    assert attempt_id is not None
    _expire_loaded(session, Rollout, rollout_id)
    _expire_loaded(session, Attempt, *running)
    return AttemptStart(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        number=number,
        goal_id=rollout.goal_id,
        mode=str(rollout.mode),
        max_attempts=rollout.max_attempts,
        agent_url=rollout.agent_url,
        sampling=rollout.sampling,
        start=str(rollout.start),
        environment=rollout.environment,
        goal_spec=rollout.spec,
        instruction=rollout.instruction,
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
    statements = {Step.__table__: _INSERT_STEPS, LlmCall.__table__: _INSERT_CALLS}
    for table, _, batch in _row_batches(attempt_id, rows):
        connection.execute(statements[table], batch)


def _row_batches(
    attempt_id: int, rows: PendingRows
) -> Iterator[tuple[Table, frozenset[str], list[dict[str, Any]]]]:
    """``(table, columns, rows)`` for each table and set of columns (normally one a table),
    every row checked against its table's columns and given ``attempt_id``."""
    for table, table_rows, allowed in (
        (Step.__table__, rows.steps, STEP_COLUMNS),
        (LlmCall.__table__, rows.calls, CALL_COLUMNS),
    ):
        by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
        for row in table_rows:
            by_columns.setdefault(frozenset(row), []).append(_columns(row, allowed, attempt_id))
        for columns, batch in by_columns.items():
            yield table, columns, batch


# psycopg's binary type of each SQL type of the row tables (a binary COPY names them).
_COPY_TYPES = {
    "BIGINT": "int8",
    "INTEGER": "int4",
    "TEXT": "text",
    "FLOAT": "float8",
    "BOOLEAN": "bool",
    "JSONB": "jsonb",
    "BYTEA": "bytea",
}


def _copy_new_rows(session: Session, attempt_id: int, rows: PendingRows) -> None:
    """Insert rows none of whose ``(attempt_id, index)`` exists yet, by binary ``COPY``.

    The built-in agent's finish only: its recorder takes each row once
    (:meth:`PendingRows.take`), so the rows of its last transaction were never written, and
    :func:`_insert_rows`' ``ON CONFLICT`` has nothing to skip. A ``COPY`` costs the worker
    about half the CPU of the executemany and Postgres about two thirds (docs/benchmarks.md).
    A row that did exist would fail the transaction (a unique violation), not be doubled.
    """
    connection = session.connection()
    cursor = connection.connection.driver_connection.cursor()  # the same transaction
    for table, columns, batch in _row_batches(attempt_id, rows):
        statement, types, processors = _copy_plan(table, columns, connection.dialect)
        with cursor.copy(statement) as copy:
            copy.set_types(types)
            for row in batch:
                copy.write_row(
                    [
                        row[name] if process is None else process(row[name])
                        for name, process in processors
                    ]
                )


@functools.cache
def _copy_plan(
    table: Table, columns: frozenset[str], dialect: Dialect
) -> tuple[str, list[str], list[tuple[str, Callable[[Any], Any] | None]]]:
    """The ``COPY`` statement of ``columns`` (``attempt_id`` included), their binary types,
    and each column's bind processing as SQLAlchemy would apply it (JSON, packed ids)."""
    names = sorted(columns | {"attempt_id"})
    table_columns = [table.c[name] for name in names]
    quoted = ", ".join(dialect.identifier_preparer.quote(name) for name in names)
    statement = f"COPY {table.name} ({quoted}) FROM STDIN (FORMAT BINARY)"
    types = [_COPY_TYPES[str(column.type.compile(dialect=dialect))] for column in table_columns]
    processors = [
        (column.key, column.type.dialect_impl(dialect).bind_processor(dialect))
        for column in table_columns
    ]
    return statement, types, processors


def _columns(row: dict[str, Any], allowed: frozenset[str], attempt_id: int) -> dict[str, Any]:
    unknown = set(row) - allowed
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}; expected some of {sorted(allowed)}")
    return {**row, "attempt_id": attempt_id}


def _lock_attempt_row(session: Session, attempt_id: int) -> tuple[Any, Any]:
    """``(attempt, rollout)`` rows (Core), read after locking the rollout, as
    :func:`_lock_attempt` does: the attempt is read only once the lock is held, so a
    status change made by the lock's previous holder is seen."""
    session.flush()  # the caller's pending ORM changes first, as a query would autoflush
    connection = session.connection()
    rollout = connection.execute(_LOCK_OWNER, {"attempt_id": attempt_id}).one_or_none()
    if rollout is None:
        raise LookupError(f"attempt {attempt_id} does not exist")
    attempt = connection.execute(_ATTEMPT_STATUS, {"attempt_id": attempt_id}).one()
    return attempt, rollout


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
    ``success`` is the outcome's (its environment's judgement); the policy versions
    seen are ``policy_versions`` when the caller saw every LLM call of the attempt (the
    built-in agent), else they are read from the attempt's recorded calls (calls through
    the gateway). Core statements, as in :func:`start_attempt`. With ``policy_versions``
    the success is one guarded statement and the rows follow it (decision 0031); when it
    changes nothing, the lock and the checks below decide, as for the gateway's calls.
    """
    connection = session.connection()
    if policy_versions is not None:
        check_transition("attempt", AttemptStatus.RUNNING, AttemptStatus.SUCCEEDED)
        check_transition("rollout", RolloutStatus.RUNNING, RolloutStatus.SUCCEEDED)
        session.flush()  # the caller's pending ORM changes first, as a query would autoflush
        owner_id = connection.scalar(
            _SUCCEED_IF_RUNNING,
            _outcome_params(attempt_id, None, outcome, policy_versions),
        )
        if owner_id is not None:
            _copy_new_rows(session, attempt_id, rows)
            _expire_loaded(session, Attempt, attempt_id)
            _expire_loaded(session, Rollout, owner_id)
            return True
        # Not both running: nothing was changed; the checks below say why, as without it.
    attempt, rollout = _lock_attempt_row(session, attempt_id)
    if attempt.status != AttemptStatus.RUNNING:
        return False
    if rollout.status in FINAL_ROLLOUT_STATUSES:
        check_transition("attempt", attempt.status, AttemptStatus.FAILED)
        connection.execute(
            update(_ATTEMPTS)
            .where(_ATTEMPTS.c.id == attempt_id)
            .values(
                status=AttemptStatus.FAILED,
                error=f"rollout became {rollout.status} while the attempt ran",
                finished_at=func.now(),
            )
        )
        _expire_loaded(session, Attempt, attempt_id)
        return False
    check_transition("attempt", attempt.status, AttemptStatus.SUCCEEDED)
    check_transition("rollout", rollout.status, RolloutStatus.SUCCEEDED)
    _insert_rows(session, attempt_id, rows)
    if policy_versions is not None:
        low, high = policy_versions
    else:
        low, high = session.execute(
            select(func.min(LlmCall.policy_version), func.max(LlmCall.policy_version)).where(
                LlmCall.attempt_id == attempt_id
            )
        ).one()
    connection.execute(_SUCCEED, _outcome_params(attempt_id, rollout.id, outcome, (low, high)))
    _expire_loaded(session, Attempt, attempt_id)
    _expire_loaded(session, Rollout, rollout.id)
    return True


def _outcome_params(
    attempt_id: int,
    owner_id: uuid.UUID | None,
    outcome: EpisodeOutcome,
    policy_versions: tuple[int | None, int | None],
) -> dict[str, Any]:
    low, high = policy_versions
    return {
        "attempt_id": attempt_id,
        "owner_id": owner_id,
        "r_reward": outcome.reward,
        "r_success": outcome.success,
        "r_steps": outcome.num_steps,
        "r_parts": outcome.reward_parts,
        "v_min": low,
        "v_max": high,
    }


def fail_attempt(
    session: Session,
    attempt_id: int,
    reason: str,
    *,
    queue_timeout_s: float,
    rows: PendingRows | None = None,
    retryable: bool = True,
    outage_budget_s: float | None = None,
) -> FailureDecision:
    """Mark the attempt failed with ``reason``; queue the rollout again while attempts are left.

    ``retryable=False`` (a failure that another attempt cannot fix, such as an unknown
    goal) fails the rollout at once. The rows gathered so far are kept for debugging (a
    failed attempt is never trained on). When the attempt was already superseded nothing
    changes and no retry is asked.

    ``outage_budget_s`` marks an infrastructure failure (env, LLM server, database or Redis
    unreachable): an outage is not the episode's fault, so while less than that many
    seconds have passed since the rollout's first failed attempt started, the attempt
    does not use one up (``max_attempts`` grows by one; the failed attempt stays recorded).
    """
    attempt, rollout = _lock_attempt(session, attempt_id)
    mode = str(rollout.mode)
    if attempt.status != AttemptStatus.RUNNING:
        return FailureDecision(False, mode, str(rollout.status), superseded=True)
    free = (
        retryable
        and outage_budget_s is not None
        and rollout.status not in FINAL_ROLLOUT_STATUSES
        and _within_outage_budget(session, attempt, outage_budget_s)
    )
    if free:
        rollout.max_attempts += 1
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
        return FailureDecision(True, mode, RolloutStatus.QUEUED.value, free=free)
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


def _within_outage_budget(session: Session, attempt: Attempt, budget_s: float) -> bool:
    """True while the rollout's first failed attempt (this one included) started less
    than ``budget_s`` ago."""
    first = (
        select(func.min(Attempt.started_at))
        .where(
            Attempt.rollout_id == attempt.rollout_id,
            (Attempt.status == AttemptStatus.FAILED) | (Attempt.id == attempt.id),
        )
        .scalar_subquery()
    )
    return bool(session.scalar(select(first > func.now() - timedelta(seconds=budget_s))))


def extend_deadlines(
    session: Session, rollout_ids: Collection[uuid.UUID], *, liveness_s: float, episode_s: float
) -> set[uuid.UUID]:
    """The worker heartbeat: push the deadline of running rollouts ``liveness_s`` ahead.

    Capped at the attempt's start + ``episode_s``, so that a hung episode in a live worker
    still reaches its deadline. Returns the ids that were still ``running``: an episode of
    any other was cancelled or ended by another attempt, and its worker stops it.
    """
    if not rollout_ids:
        return set()
    return set(
        session.scalars(
            update(Rollout)
            .where(Rollout.id.in_(list(rollout_ids)), Rollout.status == RolloutStatus.RUNNING)
            .values(
                deadline_at=func.least(
                    func.now() + timedelta(seconds=liveness_s),
                    Rollout.started_at + timedelta(seconds=episode_s),
                )
            )
            .returning(Rollout.id)
            .execution_options(synchronize_session=False)
        )
    )
