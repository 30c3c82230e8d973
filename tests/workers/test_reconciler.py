"""The reconciler repairs rollouts stuck past their deadline (real Postgres and Redis)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from helpers.factories import make_goal, make_rollout, rollback_session
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.celery import QUEUE_ROLLOUTS, create_celery
from app.core.enqueue import send_rollouts
from app.db import migrate
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, EnqueueRequest, Rollout
from app.db.session import make_engine
from app.embedded.ports import free_port
from workers.persistence import start_attempt
from workers.reconciler import broker_rollout_ids, reconcile_once, reconcile_rows

GOAL = 920_001
PAST = timedelta(seconds=-5)
# Heartbeats every 0.1 s: a test session's own server, started seconds ago, is past the
# liveness window after its start (see ``heartbeat_lapsed``).
QUICK_BEATS = {"worker_heartbeat_s": 0.1}


@pytest.fixture
def broker(test_settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    client.delete(QUEUE_ROLLOUTS)
    yield client
    client.delete(QUEUE_ROLLOUTS)
    client.close()


@pytest.fixture(scope="module")
def own_engine(make_database: Callable[[], str]) -> Iterator[Engine]:
    """A database of this module's own: a pass scans every rollout of its database, and
    the session's shared one holds what other tests committed for their processes."""
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(Settings(_env_file=None, database_url=url))
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(own_engine: Engine) -> Iterator[Session]:
    """As the shared fixture of that name (rolled back after the test), on ``own_engine``."""
    with rollback_session(own_engine) as session:
        yield session


@pytest.fixture(autouse=True)
def goal(db_session: Session) -> None:
    make_goal(db_session, GOAL)


def _deadline(delta: timedelta) -> datetime:
    return datetime.now(UTC) + delta


def test_queued_past_deadline_is_resent(db_session: Session, test_settings: Settings) -> None:
    stuck = make_rollout(db_session, GOAL, deadline_at=_deadline(PAST))
    fresh = make_rollout(db_session, GOAL, deadline_at=_deadline(timedelta(hours=1)))
    report, jobs = reconcile_rows(db_session, test_settings)
    assert report.resent == [stuck.id]
    assert jobs == [(stuck.id, "train")]
    db_session.refresh(stuck)
    db_session.refresh(fresh)
    assert stuck.status == RolloutStatus.QUEUED
    assert stuck.deadline_at > datetime.now(UTC)


def test_running_without_heartbeat_marks_attempt_lost_and_requeues(
    db_session: Session, test_settings: Settings
) -> None:
    rollout = make_rollout(db_session, GOAL)
    start = start_attempt(db_session, rollout.id, worker="dead", liveness_s=30)
    rollout.deadline_at = _deadline(PAST)
    db_session.flush()
    settings = test_settings.model_copy(update=QUICK_BEATS)
    report, jobs = reconcile_rows(db_session, settings)
    assert report.lost_attempts == 1 and jobs == [(rollout.id, "train")]
    db_session.refresh(rollout)
    attempt = db_session.get(Attempt, start.attempt_id)
    db_session.refresh(attempt)
    assert rollout.status == RolloutStatus.QUEUED
    assert attempt.status == AttemptStatus.LOST
    assert "no worker heartbeat" in attempt.error


def test_running_out_of_attempts_fails_with_reason(
    db_session: Session, test_settings: Settings
) -> None:
    rollout = make_rollout(db_session, GOAL, max_attempts=1)
    start_attempt(db_session, rollout.id, worker="dead", liveness_s=30)
    rollout.deadline_at = _deadline(PAST)
    db_session.flush()
    settings = test_settings.model_copy(update=QUICK_BEATS)
    report, jobs = reconcile_rows(db_session, settings)
    assert report.failed == [rollout.id] and jobs == []
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.FAILED
    assert rollout.last_error.startswith("failed after 1 attempts: attempt 1 lost")


def test_live_and_finished_rollouts_are_left_alone(
    db_session: Session, test_settings: Settings
) -> None:
    live = make_rollout(db_session, GOAL)
    start_attempt(db_session, live.id, worker="alive", liveness_s=30)
    done = make_rollout(
        db_session, GOAL, status=RolloutStatus.SUCCEEDED, deadline_at=_deadline(PAST)
    )
    report, _ = reconcile_rows(db_session, test_settings)
    assert live.id not in report.resent and done.id not in report.resent
    statuses = dict(db_session.execute(select(Rollout.id, Rollout.status)).all())
    assert statuses[live.id] == RolloutStatus.RUNNING


@pytest.mark.slow
def test_running_not_presumed_lost_right_after_the_database_restarts(
    services_dir_factory: Callable[[str], Path], test_settings: Settings
) -> None:
    """No heartbeat could be written while the server was down: a deadline that passed
    during the outage is the database's fault, not the worker's, until the server has
    been up for the liveness window; a worker that is really gone is found after it."""
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("reconciler-pg"))
    port = free_port()
    url = server.start(port)
    engine = None
    try:
        migrate.upgrade(url)
        server.stop()  # down for a minute, as far as the rows below can tell
        server.start(port)
        settings = test_settings.model_copy(update={"database_url": url})
        engine = make_engine(settings, pool_size=1)
        time.sleep(0.5)  # past the quick window below, well within the default one
        with Session(engine) as session, session.begin():
            make_goal(session, GOAL)
            rollout = make_rollout(session, GOAL)
            start_attempt(session, rollout.id, worker="alive", liveness_s=30)
            rollout.deadline_at = _deadline(timedelta(seconds=-40))  # beats missed while down
            session.flush()
            report, jobs = reconcile_rows(session, settings)
            assert report.lost_attempts == 0 and jobs == []
            report, jobs = reconcile_rows(session, settings.model_copy(update=QUICK_BEATS))
            assert report.lost_attempts == 1 and jobs == [(rollout.id, "train")]
    finally:
        if engine is not None:
            engine.dispose()
        server.stop()


def test_send_rollouts_puts_ids_on_the_mode_queue(
    test_settings: Settings, broker: redis.Redis
) -> None:
    celery = create_celery(test_settings)
    rollout_id = uuid.uuid4()
    assert send_rollouts(celery, [(rollout_id, "train")]) == 1
    body = json.loads(broker.lindex(QUEUE_ROLLOUTS, 0))
    assert str(rollout_id) in body["headers"]["argsrepr"]


QUEUED_A_MINUTE_AGO = timedelta(seconds=3600 - 60)  # deadline_at = queued at + queue timeout


def test_queued_with_no_message_in_the_broker_is_resent_long_before_the_timeout(
    db_session: Session, test_settings: Settings
) -> None:
    settings = test_settings.model_copy(
        update={"rollout_queue_timeout_s": 3600.0, "rollout_message_grace_s": 30.0}
    )
    lost = make_rollout(db_session, GOAL, deadline_at=_deadline(QUEUED_A_MINUTE_AGO))
    waiting = make_rollout(db_session, GOAL, deadline_at=_deadline(QUEUED_A_MINUTE_AGO))
    just_queued = make_rollout(db_session, GOAL, deadline_at=_deadline(timedelta(hours=1)))
    asked: list[bool] = []

    def broker_ids() -> set[str]:
        asked.append(True)
        return {str(waiting.id)}

    report, jobs = reconcile_rows(db_session, settings, broker_ids)
    # (other tests' committed rows may be reported too: only ours are checked)
    assert (lost.id, "train") in jobs and waiting.id not in report.resent
    assert just_queued.id not in report.resent, "a send may still be under way"
    db_session.refresh(lost)
    assert lost.deadline_at > _deadline(timedelta(minutes=59)), "not resent again next pass"
    assert asked == [True]
    again, _ = reconcile_rows(db_session, settings, broker_ids)
    assert lost.id not in again.resent


def test_broker_check_skipped_when_nothing_is_queued_long(
    empty_db_session: Session, test_settings: Settings
) -> None:
    """On a database of its own: other tests' committed rollouts would be candidates."""
    make_goal(empty_db_session, GOAL)
    make_rollout(empty_db_session, GOAL, deadline_at=_deadline(timedelta(hours=1)))

    def broker_ids() -> set[str]:
        raise AssertionError("the broker is read only when a rollout waits past the grace")

    report, _ = reconcile_rows(empty_db_session, test_settings, broker_ids)
    assert not report.resent


def test_broker_rollout_ids_sees_waiting_and_unacknowledged_messages(
    test_settings: Settings, broker: redis.Redis
) -> None:
    celery = create_celery(test_settings)
    waiting, taken = uuid.uuid4(), uuid.uuid4()
    send_rollouts(celery, [(taken, "train"), (waiting, "train")])
    with celery.connection_for_read() as connection:
        channel = connection.default_channel
        message = channel.basic_get(QUEUE_ROLLOUTS, no_ack=False)  # oldest first: ``taken``
        assert str(taken) in message.headers["argsrepr"]
        try:
            ids = broker_rollout_ids(broker)
            assert {str(waiting), str(taken)} <= ids
        finally:
            channel.basic_ack(message.delivery_tag)
    assert str(taken) not in broker_rollout_ids(broker)


def test_a_message_held_past_any_countdown_counts_as_lost(
    test_settings: Settings, broker: redis.Redis
) -> None:
    """Found by ``wsrl chaos``: a Redis restart dropped a worker's connection and with it
    the messages it held for a retry countdown; they stayed in the unacknowledged hash for
    the visibility timeout (half an hour), and their rollouts stayed queued all along."""
    celery = create_celery(test_settings)
    dropped, held = uuid.uuid4(), uuid.uuid4()
    send_rollouts(celery, [(dropped, "train"), (held, "train")])
    with celery.connection_for_read() as connection:
        channel = connection.default_channel
        first = channel.basic_get(QUEUE_ROLLOUTS, no_ack=False)
        second = channel.basic_get(QUEUE_ROLLOUTS, no_ack=False)
        try:
            broker.zadd("unacked_index", {first.delivery_tag: time.time() - 120})
            ids = broker_rollout_ids(broker, held_for_s=60)
            assert str(dropped) not in ids and str(held) in ids
            assert {str(dropped), str(held)} <= broker_rollout_ids(broker)
        finally:
            channel.basic_ack(first.delivery_tag)
            channel.basic_ack(second.delivery_tag)


def test_a_pass_deletes_idempotency_keys_past_their_retention(
    db_session: Session, test_settings: Settings
) -> None:
    old, fresh = f"old-{uuid.uuid4().hex}", f"fresh-{uuid.uuid4().hex}"
    db_session.add_all(
        [
            EnqueueRequest(
                key=old, request_hash="h", rollout_ids=[], created_at=_deadline(-timedelta(hours=2))
            ),
            EnqueueRequest(key=fresh, request_hash="h", rollout_ids=[]),
        ]
    )
    db_session.flush()
    # the pass commits a savepoint of the test's transaction, which is rolled back after it
    sessions = sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint")
    settings = test_settings.model_copy(update={"idempotency_key_retention_s": 3600.0})
    report = reconcile_once(sessions, create_celery(settings), settings)
    assert report.expired_keys == 1
    kept = db_session.scalars(
        select(EnqueueRequest.key).where(EnqueueRequest.key.in_([old, fresh]))
    )
    assert set(kept) == {fresh}
