"""Creating rollouts, sending their jobs and cancelling them: the service the API, the CLI
and the trainer call.

Rows first, messages after the commit: :func:`enqueue_rollouts` adds rows to the caller's
transaction and sends the Celery messages only once that transaction commits (a
rollback sends nothing). If sending fails after the commit, the rows stay ``queued``
and the reconciler sends them again (it finds queued rollouts whose message is not in the
broker); Postgres decides what exists, Redis only carries work. An enqueue with an
idempotency key is done at most once per key. :func:`cancel_rollouts` ends rollouts that
have not finished; their jobs stay in the broker and are no-ops when delivered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from celery import Celery
from pydantic import ValidationError
from sqlalchemy import delete, event, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.core.celery import ROLLOUT_TASK, queue_for_mode
from app.core.llm import SAMPLING_FIELDS, SamplingOverrides
from app.db.lifecycle import (
    UNFINISHED_ROLLOUT_STATUSES,
    AttemptStatus,
    RolloutMode,
    RolloutStart,
    RolloutStatus,
    check_transition,
    parse_start,
)
from app.db.models import Attempt, EnqueueRequest, Goal, Rollout

logger = logging.getLogger(__name__)

_AFTER_COMMIT_KEY = "wsrl_after_commit"


class EnqueueError(ValueError):
    """A request that cannot be turned into rollouts; the message says what to change."""


class IdempotencyConflict(EnqueueError):
    """The idempotency key was used before for a different request."""


def on_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` after the session's current transaction commits (never on rollback)."""
    pending: list[Callable[[], None]] | None = session.info.get(_AFTER_COMMIT_KEY)
    if pending is None:
        pending = session.info[_AFTER_COMMIT_KEY] = []

        def run(committed: Session) -> None:
            callbacks = committed.info.pop(_AFTER_COMMIT_KEY, [])
            for item in callbacks:
                item()

        def drop(rolled_back: Session) -> None:
            rolled_back.info.pop(_AFTER_COMMIT_KEY, None)

        event.listen(session, "after_commit", run, once=True)
        event.listen(session, "after_rollback", drop, once=True)
    pending.append(callback)


def send_rollouts(
    celery: Celery, rollouts: Iterable[tuple[uuid.UUID, str]], *, countdown: float | None = None
) -> int:
    """Send one job per ``(rollout_id, mode)`` over one broker connection; returns the count."""
    sent = 0
    with celery.producer_or_acquire() as producer:
        for rollout_id, mode in rollouts:
            celery.send_task(
                ROLLOUT_TASK,
                args=[str(rollout_id)],
                queue=queue_for_mode(mode),
                producer=producer,
                countdown=countdown,
            )
            sent += 1
    return sent


def reach_broker(celery: Celery) -> None:
    """Connect to the broker now (one retry). A command that queues jobs calls it before
    it creates their rows: after the commit a failed send is only logged and left to the
    reconciler, which cannot resend while the broker is down, so an interactive command
    would wait without a word. Raises kombu's ``OperationalError``."""
    with celery.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)


def send_after_commit(
    celery: Celery, jobs: list[tuple[uuid.UUID, str]], *, countdown: float | None = None
) -> None:
    """Send jobs whose rows are already committed; a broker failure is logged, not raised.

    The rows stay ``queued`` with a deadline, so the reconciler sends them again once it
    passes; raising here could not undo the commit.
    """
    try:
        send_rollouts(celery, jobs, countdown=countdown)
    except Exception:
        logger.exception("sending %d rollout jobs failed; the reconciler will resend", len(jobs))


def cancel_rollouts(
    session: Session,
    reason: str,
    *,
    ids: Sequence[uuid.UUID] | None = None,
    mode: RolloutMode | None = None,
) -> list[uuid.UUID]:
    """Cancel the rollouts among ``ids`` (and/or of ``mode``) that have not finished, in the
    caller's transaction; returns the ids cancelled.

    A ``queued`` rollout is never played: its job, still in the broker, is a no-op when a
    worker takes it (a finished rollout is). A ``running`` one is ``cancelled`` at once and
    its attempt ``failed`` with ``reason``; the worker playing it finds both at its finish
    and writes nothing (:func:`workers.persistence.finish_attempt`), so the episode is never
    trained on nor scored. A rollout finished meanwhile (the lock re-reads each row) is left
    as it is. Train groups with a cancelled rollout are complete and have
    fewer samples; the trainer skips one with too few that succeeded.
    """
    if ids is None and mode is None:
        raise ValueError("cancel_rollouts needs ids or a mode")
    for old in UNFINISHED_ROLLOUT_STATUSES:
        check_transition("rollout", old, RolloutStatus.CANCELLED)
    check_transition("attempt", AttemptStatus.RUNNING, AttemptStatus.FAILED)
    where = [Rollout.status.in_(UNFINISHED_ROLLOUT_STATUSES)]
    if ids is not None:
        where.append(Rollout.id.in_(list(ids)))
    if mode is not None:
        where.append(Rollout.mode == mode)
    # Locked in id order (as a heartbeat's index scan over its ids locks them), rollouts
    # before attempts (as every status change): a heartbeat or another cancel over the
    # same rows waits instead of deadlocking.
    cancelled = list(
        session.scalars(select(Rollout.id).where(*where).order_by(Rollout.id).with_for_update())
    )
    if cancelled:
        session.execute(
            update(Rollout)
            .where(Rollout.id.in_(cancelled))
            .values(
                status=RolloutStatus.CANCELLED,
                last_error=reason,
                finished_at=func.now(),
                deadline_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        session.execute(
            update(Attempt)
            .where(Attempt.rollout_id.in_(cancelled), Attempt.status == AttemptStatus.RUNNING)
            .values(status=AttemptStatus.FAILED, error=reason, finished_at=func.now())
            .execution_options(synchronize_session=False)
        )
        session.expire_all()
        logger.info("cancelled %d rollouts: %s", len(cancelled), reason)
    return cancelled


def choose_goals(
    session: Session,
    split: str,
    count: int | None,
    rng: random.Random,
    *,
    allow_fewer: bool = True,
    environment: str | None = None,
) -> list[int]:
    """``count`` distinct goals of ``split`` drawn by weight (all of them when count is None),
    of ``environment`` only when given (a trainer's groups are of its environment; a worker
    plays any goal by its own environment).

    Weighted sampling without replacement: each goal gets the key ``u ** (1 / weight)``
    and the largest keys win, so a goal of weight 2 is about twice as likely as one of 1.
    A ``count`` above the split's size takes the whole split, or is an
    :class:`EnqueueError` when ``allow_fewer`` is false (the API's rule).
    """
    query = select(Goal.id, Goal.weight).where(Goal.split == split).order_by(Goal.id)
    if environment is not None:
        query = query.where(Goal.environment == environment)
    rows = session.execute(query).all()
    if not rows:
        of = f" of environment {environment!r}" if environment is not None else ""
        raise EnqueueError(f"no goals{of} in split {split!r}; `wsrl enqueue` loads them")
    if count is not None and count > len(rows) and not allow_fewer:
        raise EnqueueError(
            f"count {count} is more than the {len(rows)} goals of split {split!r}; "
            f"ask for at most {len(rows)} (or more group_size samples per goal)"
        )
    if count is None or count >= len(rows):
        return [goal_id for goal_id, _ in rows]
    keys = [
        (rng.random() ** (1.0 / weight) if weight and weight > 0 else 0.0, goal_id)
        for goal_id, weight in rows
    ]
    keys.sort(reverse=True)
    return sorted(goal_id for _, goal_id in keys[:count])


def enqueue_rollouts(
    session: Session,
    celery: Celery,
    *,
    goal_ids: Sequence[int] | None = None,
    split: str | None = None,
    count: int | None = None,
    group_size: int = 1,
    mode: str = "train",
    start: str = RolloutStart.SEARCH.value,
    agent_url: str | None = None,
    sampling: dict[str, Any] | None = None,
    settings: Settings | None = None,
    seed: int | None = None,
    allow_fewer: bool = True,
    idempotency_key: str | None = None,
) -> list[uuid.UUID]:
    """Create ``group_size`` rollouts per goal (one group id per goal) and queue their jobs.

    Goals are ``goal_ids`` or ``count`` goals drawn from ``split`` (all of the split when
    ``count`` is None; see :func:`choose_goals` for ``allow_fewer``). The jobs are sent
    after the caller commits the session. ``start`` is where the policy starts playing
    (an environment's opening; external agents always start at ``search``). Raises
    :class:`EnqueueError` for a request that names no goals, unknown goal ids, bad sizes,
    an unknown start or bad sampling values.

    With ``idempotency_key``, the same request made again (a client retrying after a
    timeout) returns the rollouts of the first and creates nothing; the same key with a
    different request is an :class:`IdempotencyConflict`. Concurrent requests with one
    key wait for each other on the key's row.
    """
    settings = settings or get_settings()
    if group_size < 1:
        raise EnqueueError(f"group_size must be >= 1, got {group_size}")
    if count is not None and count < 1:
        raise EnqueueError(f"count must be >= 1, got {count}")
    try:
        rollout_mode = RolloutMode(mode)
    except ValueError:
        raise EnqueueError(f"mode must be 'train' or 'eval', got {mode!r}") from None
    try:
        rollout_start = parse_start(start)
    except ValueError as exc:
        raise EnqueueError(str(exc)) from None
    if sampling is not None:
        unknown = set(sampling) - SAMPLING_FIELDS
        if unknown:
            raise EnqueueError(
                f"unknown sampling keys {sorted(unknown)}; allowed: {sorted(SAMPLING_FIELDS)}"
            )
        try:
            sampling = SamplingOverrides.model_validate(sampling).as_dict()
        except ValidationError as exc:
            raise EnqueueError(f"bad sampling values: {_errors(exc)}") from None
    if agent_url is not None and not agent_url.startswith(("http://", "https://")):
        raise EnqueueError(f"agent_url must be an http(s) URL, got {agent_url!r}")
    if agent_url is not None and rollout_start != RolloutStart.SEARCH:
        raise EnqueueError(
            f"start {rollout_start.value!r} needs the built-in agent: an external agent "
            "(agent_url) always starts at 'search'"
        )
    if goal_ids is not None and split is not None:
        raise EnqueueError("give goal_ids or split, not both")
    if goal_ids is not None:
        chosen = list(goal_ids)
        if not chosen:
            raise EnqueueError("goal_ids is empty")
        known = set(session.scalars(select(Goal.id).where(Goal.id.in_(chosen))))
        missing = sorted(set(chosen) - known)
        if missing:
            raise EnqueueError(f"unknown goal ids: {missing[:20]} (sync goals from the env first)")
    elif split is not None:
        chosen = choose_goals(session, split, count, random.Random(seed), allow_fewer=allow_fewer)
    else:
        raise EnqueueError("give goal_ids or split")
    if idempotency_key is not None:
        fingerprint = _fingerprint(
            goal_ids=goal_ids,
            split=split,
            count=count,
            group_size=group_size,
            mode=rollout_mode.value,
            # Only a non-default start enters the hash: keys of older requests still match.
            **({"start": rollout_start.value} if rollout_start != RolloutStart.SEARCH else {}),
            agent_url=agent_url,
            sampling=sampling,
            seed=seed,
        )
        replay = _claim_key(session, idempotency_key, fingerprint)
        if replay is not None:
            return replay

    deadline = func.now() + timedelta(seconds=settings.rollout_queue_timeout_s)
    rows: list[dict[str, Any]] = []
    for goal_id in chosen:
        group_id = uuid.uuid4()
        for sample_index in range(group_size):
            rows.append(
                {
                    "id": uuid.uuid4(),
                    "goal_id": goal_id,
                    "group_id": group_id,
                    "sample_index": sample_index,
                    "mode": rollout_mode,
                    "start": rollout_start,
                    "status": RolloutStatus.QUEUED,
                    "max_attempts": settings.max_attempts,
                    "agent_url": agent_url,
                    "sampling": sampling,
                    "deadline_at": deadline,
                }
            )
    for start in range(0, len(rows), 1000):
        session.execute(insert(Rollout).values(rows[start : start + 1000]))
    if idempotency_key is not None:
        session.execute(
            update(EnqueueRequest)
            .where(EnqueueRequest.key == idempotency_key)
            .values(rollout_ids=[row["id"] for row in rows])
        )
    jobs = [(row["id"], rollout_mode.value) for row in rows]
    on_commit(session, lambda: send_after_commit(celery, jobs))
    logger.info(
        "enqueued %d %s rollouts (%d goals x %d samples)",
        len(rows),
        rollout_mode.value,
        len(chosen),
        group_size,
    )
    return [row["id"] for row in rows]


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
    )


def _fingerprint(**request: Any) -> str:
    canonical = json.dumps(request, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _claim_key(session: Session, key: str, fingerprint: str) -> list[uuid.UUID] | None:
    """Claim ``key`` for this request (None: go on and enqueue), or return the rollouts of
    the earlier request that used it.

    The insert waits for a concurrent transaction holding the same key to finish, so two
    requests with one key never both enqueue.
    """
    claimed = session.execute(
        insert(EnqueueRequest)
        .values(key=key, request_hash=fingerprint, rollout_ids=[])
        .on_conflict_do_nothing(index_elements=[EnqueueRequest.key])
        .returning(EnqueueRequest.key)
    ).scalar_one_or_none()
    if claimed is not None:
        return None
    earlier = session.execute(
        select(EnqueueRequest.request_hash, EnqueueRequest.rollout_ids).where(
            EnqueueRequest.key == key
        )
    ).one()
    if earlier.request_hash != fingerprint:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was used for a different request; use a new key"
        )
    logger.info("enqueue with key %r replayed: %d rollouts", key, len(earlier.rollout_ids))
    return list(earlier.rollout_ids)


def expire_idempotency_keys(session: Session, retention_s: float, limit: int = 10_000) -> int:
    """Delete up to ``limit`` idempotency keys older than ``retention_s``; returns how many.

    A key is honoured for at least ``retention_s`` (until the next pass of the reconciler,
    which calls this); a retry after that is a new enqueue. The rows are locked with
    ``SKIP LOCKED``, so a pass never waits for an enqueue in flight.
    """
    expired = (
        select(EnqueueRequest.key)
        .where(EnqueueRequest.created_at < func.now() - timedelta(seconds=retention_s))
        .limit(limit)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    deleted = session.execute(delete(EnqueueRequest).where(EnqueueRequest.key.in_(expired)))
    return deleted.rowcount


def insert_goals(session: Session, rows: Sequence[dict[str, Any]]) -> int:
    """Insert goal rows the table lacks (by id; existing rows are kept as they are);
    returns how many were new."""
    if not rows:
        return 0
    inserted = session.execute(
        insert(Goal).values(list(rows)).on_conflict_do_nothing().returning(Goal.id)
    )
    return len(inserted.all())
