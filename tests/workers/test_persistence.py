"""The rollout task's database writes, against the real (migrated) PostgreSQL."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery
from helpers.factories import make_goal, make_llm_call, make_rollout
from sqlalchemy import event, func, insert, select, text, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.enqueue import cancel_rollouts, enqueue_rollouts
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, LlmCall, Rollout, Step
from app.db.session import make_engine, session_scope
from workers.persistence import (
    AttemptSuperseded,
    EpisodeOutcome,
    PendingRows,
    extend_deadlines,
    fail_attempt,
    finish_attempt,
    start_attempt,
    write_rows,
)

GOAL = 900_001


@pytest.fixture
def rollout(db_session: Session) -> Rollout:
    make_goal(db_session, GOAL)
    return make_rollout(db_session, GOAL)


def _rows(n: int, *, version: int = 0, start: int = 0) -> PendingRows:
    rows = PendingRows()
    for i in range(start, start + n):
        rows.steps.append({"index": i, "action": f"search[{i}]", "observation": "obs"})
        rows.calls.append(
            {
                "index": i,
                "policy_version": version,
                "request_messages": [{"role": "user", "content": "hi"}],
                "response_text": f"search[{i}]",
                "prompt_token_ids": [1, 2, 3],
                "response_token_ids": [4, 5],
                "response_logprobs": [-0.1, -0.2],
            }
        )
    return rows


def _start(session: Session, rollout: Rollout):
    start = start_attempt(session, rollout.id, worker="w1", liveness_s=30)
    assert start is not None
    return start


def _worker_died(session: Session, rollout: Rollout) -> None:
    """The heartbeat stopped: the running attempt's deadline is in the past."""
    rollout.deadline_at = datetime.now(UTC) - timedelta(hours=1)
    session.flush()


def _restart(session: Session, rollout: Rollout):
    _worker_died(session, rollout)
    return _start(session, rollout)


def test_start_attempt_numbers_attempts_and_marks_previous_running_lost(
    db_session: Session, rollout: Rollout
) -> None:
    first = _start(db_session, rollout)
    second = _restart(db_session, rollout)
    assert (first.number, second.number) == (1, 2)
    old = db_session.get(Attempt, first.attempt_id)
    db_session.refresh(old)
    assert old.status == AttemptStatus.LOST
    assert "superseded by attempt 2: no worker heartbeat" in old.error
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.RUNNING
    assert rollout.attempts == 2
    assert rollout.deadline_at is not None


def test_duplicate_delivery_while_attempt_is_alive_is_noop(
    db_session: Session, rollout: Rollout
) -> None:
    first = _start(db_session, rollout)
    assert start_attempt(db_session, rollout.id, worker="w2", liveness_s=30) is None
    attempt = db_session.get(Attempt, first.attempt_id)
    db_session.refresh(attempt)
    assert attempt.status == AttemptStatus.RUNNING
    assert db_session.scalar(select(func.count()).where(Attempt.rollout_id == rollout.id)) == 1


def test_start_attempt_of_finished_rollout_is_noop(db_session: Session, rollout: Rollout) -> None:
    start = _start(db_session, rollout)
    assert finish_attempt(db_session, start.attempt_id, EpisodeOutcome(1.0, 3, True), PendingRows())
    assert start_attempt(db_session, rollout.id, worker="w2", liveness_s=30) is None
    count = db_session.scalar(select(func.count()).where(Attempt.rollout_id == rollout.id))
    assert count == 1


def test_start_attempt_past_max_attempts_fails_rollout_with_reason(
    db_session: Session, rollout: Rollout
) -> None:
    for _ in range(3):
        _restart(db_session, rollout)
    _worker_died(db_session, rollout)
    assert start_attempt(db_session, rollout.id, worker="w", liveness_s=30) is None
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.FAILED
    assert "no attempts left after 3" in rollout.last_error


def test_write_rows_is_idempotent_per_attempt_and_index(
    db_session: Session, rollout: Rollout
) -> None:
    start = _start(db_session, rollout)
    write_rows(db_session, start.attempt_id, _rows(3))
    write_rows(db_session, start.attempt_id, _rows(4))
    steps = db_session.scalar(select(func.count()).where(Step.attempt_id == start.attempt_id))
    calls = db_session.scalars(
        select(LlmCall).where(LlmCall.attempt_id == start.attempt_id).order_by(LlmCall.index)
    ).all()
    assert steps == 4
    assert [c.index for c in calls] == [0, 1, 2, 3]
    assert calls[0].prompt_token_ids == [1, 2, 3]
    assert calls[0].response_token_ids == [4, 5]


def test_write_rows_of_superseded_attempt_raises(db_session: Session, rollout: Rollout) -> None:
    first = _start(db_session, rollout)
    _restart(db_session, rollout)
    with pytest.raises(AttemptSuperseded, match="lost"):
        write_rows(db_session, first.attempt_id, _rows(1))


def test_write_rows_unknown_column_is_an_error(db_session: Session, rollout: Rollout) -> None:
    start = _start(db_session, rollout)
    rows = PendingRows(steps=[{"index": 0, "action": "x", "bogus": 1}])
    with pytest.raises(ValueError, match="bogus"):
        write_rows(db_session, start.attempt_id, rows)


def test_finish_attempt_records_outcome_and_policy_versions(
    db_session: Session, rollout: Rollout
) -> None:
    start = _start(db_session, rollout)
    write_rows(db_session, start.attempt_id, _rows(2, version=3))
    parts = {"r_type": 1.0}
    done = finish_attempt(
        db_session,
        start.attempt_id,
        EpisodeOutcome(1.0, 3, True, parts),
        _rows(1, version=4, start=2),
    )
    assert done
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.SUCCEEDED
    assert (rollout.reward, rollout.success, rollout.num_steps) == (1.0, True, 3)
    assert (rollout.policy_version_min, rollout.policy_version_max) == (3, 4)
    assert rollout.reward_parts == parts
    assert rollout.deadline_at is None
    attempt = db_session.get(Attempt, start.attempt_id)
    db_session.refresh(attempt)
    assert attempt.status == AttemptStatus.SUCCEEDED


def test_finish_attempt_partial_reward_is_not_success(
    db_session: Session, rollout: Rollout
) -> None:
    start = _start(db_session, rollout)
    assert finish_attempt(
        db_session, start.attempt_id, EpisodeOutcome(0.5, 2, False), PendingRows()
    )
    db_session.refresh(rollout)
    assert rollout.success is False


# Both ways of finishing: the built-in agent's (its policy versions given: the guarded
# one-statement success) and the gateway's (versions read from the recorded calls).
VERSIONS = pytest.mark.parametrize("versions", [(0, 0), None], ids=["agent", "gateway"])


@VERSIONS
def test_finish_of_superseded_attempt_is_refused(
    db_session: Session, rollout: Rollout, versions
) -> None:
    first = _start(db_session, rollout)
    second = _restart(db_session, rollout)
    assert not finish_attempt(
        db_session,
        first.attempt_id,
        EpisodeOutcome(1.0, 1, True),
        _rows(1),
        policy_versions=versions,
    )
    assert db_session.scalar(select(func.count()).where(Step.attempt_id == first.attempt_id)) == 0
    assert db_session.scalar(select(Attempt.status).where(Attempt.id == first.attempt_id)) == (
        AttemptStatus.LOST
    )
    assert finish_attempt(
        db_session,
        second.attempt_id,
        EpisodeOutcome(0.0, 1, False),
        PendingRows(),
        policy_versions=versions,
    )
    succeeded = db_session.scalar(
        select(func.count()).where(
            Attempt.rollout_id == rollout.id, Attempt.status == AttemptStatus.SUCCEEDED
        )
    )
    assert succeeded == 1


def test_fail_attempt_requeues_until_max_attempts_then_fails(
    db_session: Session, rollout: Rollout
) -> None:
    decisions = []
    for _ in range(3):
        start = _start(db_session, rollout)
        decisions.append(
            fail_attempt(db_session, start.attempt_id, "LLMUnavailable: down", queue_timeout_s=60)
        )
    assert [d.retry for d in decisions] == [True, True, False]
    assert decisions[0].rollout_status == "queued"
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.FAILED
    assert rollout.last_error == "failed after 3 attempts: LLMUnavailable: down"
    errors = db_session.scalars(select(Attempt.error).where(Attempt.rollout_id == rollout.id))
    assert set(errors) == {"LLMUnavailable: down"}


def test_outage_failures_do_not_use_up_attempts_within_the_budget(
    db_session: Session, rollout: Rollout
) -> None:
    for _ in range(5):  # more than max_attempts (3)
        start = _start(db_session, rollout)
        decision = fail_attempt(
            db_session,
            start.attempt_id,
            "env error: env server unreachable",
            queue_timeout_s=60,
            outage_budget_s=300,
        )
        assert decision.retry and decision.free
    db_session.refresh(rollout)
    assert (rollout.status, rollout.attempts, rollout.max_attempts) == (
        RolloutStatus.QUEUED,
        5,
        8,
    )
    db_session.execute(
        update(Attempt)
        .where(Attempt.rollout_id == rollout.id)
        .values(started_at=datetime.now(UTC) - timedelta(minutes=6))
    )
    start = _start(db_session, rollout)
    spent = fail_attempt(
        db_session, start.attempt_id, "env error: down", queue_timeout_s=60, outage_budget_s=300
    )
    assert spent.retry and not spent.free, "past the budget, outages count again"


def test_other_failures_use_up_attempts(db_session: Session, rollout: Rollout) -> None:
    start = _start(db_session, rollout)
    decision = fail_attempt(db_session, start.attempt_id, "LLMBadResponse: x", queue_timeout_s=60)
    assert decision.retry and not decision.free
    db_session.refresh(rollout)
    assert rollout.max_attempts == 3


def test_fail_attempt_not_retryable_fails_at_once(db_session: Session, rollout: Rollout) -> None:
    start = _start(db_session, rollout)
    decision = fail_attempt(
        db_session, start.attempt_id, "agent_url unsupported", queue_timeout_s=60, retryable=False
    )
    assert not decision.retry
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.FAILED
    assert "not retryable" in rollout.last_error


@VERSIONS
def test_cancelled_rollout_is_not_finished_or_requeued(
    db_session: Session, rollout: Rollout, versions
) -> None:
    first = _start(db_session, rollout)
    rollout.status = RolloutStatus.CANCELLED
    db_session.flush()
    assert not finish_attempt(
        db_session,
        first.attempt_id,
        EpisodeOutcome(1.0, 1, True),
        _rows(1),
        policy_versions=versions,
    )
    assert db_session.scalar(select(func.count()).where(Step.attempt_id == first.attempt_id)) == 0
    db_session.refresh(rollout)
    assert rollout.status == RolloutStatus.CANCELLED
    attempt = db_session.get(Attempt, first.attempt_id)
    db_session.refresh(attempt)
    assert attempt.status == AttemptStatus.FAILED
    assert "cancelled" in attempt.error
    assert start_attempt(db_session, rollout.id, worker="w", liveness_s=30) is None


def test_extend_deadlines_caps_at_episode_budget(db_session: Session, rollout: Rollout) -> None:
    _start(db_session, rollout)
    rollout.started_at = datetime.now(UTC) - timedelta(seconds=100)
    db_session.flush()
    assert extend_deadlines(db_session, [rollout.id], liveness_s=30, episode_s=110) == {rollout.id}
    db_session.refresh(rollout)
    remaining = (rollout.deadline_at - datetime.now(UTC)).total_seconds()
    assert 0 < remaining <= 11


def test_extend_deadlines_answers_which_rollouts_still_run(
    db_session: Session, rollout: Rollout
) -> None:
    """A cancelled rollout is not extended and not in the answer: its worker stops it."""
    _start(db_session, rollout)
    other = make_rollout(db_session, GOAL)
    _start(db_session, other)
    cancel_rollouts(db_session, "cancelled: by the test", ids=[other.id])
    ids = [rollout.id, other.id, uuid.uuid4()]
    assert extend_deadlines(db_session, ids, liveness_s=30, episode_s=110) == {rollout.id}


def test_the_agents_finish_is_one_statement_besides_its_rows(
    db_session: Session, rollout: Rollout
) -> None:
    """The built-in agent's success while its attempt runs: the rollout's lock, both status
    changes and the outcome in one statement, then one binary COPY per table of rows, which
    go to psycopg's cursor and not through SQLAlchemy's statements (each a round trip that
    an episode's hand-off waits for)."""
    start = _start(db_session, rollout)
    statements: list[str] = []
    connection = db_session.connection()

    def seen(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(statement.split(None, 1)[0])

    event.listen(connection, "before_cursor_execute", seen)
    try:
        assert finish_attempt(
            db_session,
            start.attempt_id,
            EpisodeOutcome(1.0, 2, True),
            _rows(2),
            policy_versions=(0, 0),
        )
    finally:
        event.remove(connection, "before_cursor_execute", seen)
    assert statements == ["WITH"]
    db_session.refresh(rollout)
    assert (rollout.status, rollout.reward, rollout.num_steps) == (RolloutStatus.SUCCEEDED, 1.0, 2)
    assert db_session.scalar(select(func.count()).where(Step.attempt_id == start.attempt_id)) == 2
    calls = db_session.scalar(select(func.count()).where(LlmCall.attempt_id == start.attempt_id))
    assert calls == 2


def _recorded_rows() -> PendingRows:
    """Rows as the recorder builds them (every column), with JSON nulls, SQL nulls, a NUL
    already replaced, non-ASCII text and packed ids."""
    rows = PendingRows()
    for i in range(3):
        rows.steps.append(
            {
                "index": i,
                "action": "click[b0 \ufffd thé]",
                "observation": 'Instruction: [SEP] "quoted" \\ tab\there' * (i + 1),
                "reward": 0.25 * i,
                "done": i == 2,
                "valid": i != 1,
                "latency_ms": None if i == 0 else 101.5,
                "info": {"reply": "r", "error": None, "nested": [1, {"a": None}], "page": "ü"},
            }
        )
        rows.calls.append(
            {
                "index": i,
                "policy_version": 7,
                "model": None if i == 1 else "tiny",
                "request_messages": [{"role": "user", "content": f"hi {i}\n"}],
                "response_text": None if i == 2 else "click[x]",
                "prompt_token_ids": list(range(450)),
                "response_token_ids": [] if i == 1 else [4, 5],
                "response_logprobs": None if i == 1 else [-0.1, -2.5],
                "finish_reason": "stop",
                "latency_ms": 100.25,
                "trainable": i != 2,
                "structured_outputs": None if i else {"choice": ["click[x]", "search[y]"]},
            }
        )
    return rows


def test_the_agents_finish_writes_its_rows_as_the_flush_does(
    db_session: Session, rollout: Rollout
) -> None:
    """The finish's COPY and the flush's executemany store the same values: JSON and SQL
    nulls apart, packed token ids and logprobs, text with quotes, backslashes and tabs."""
    flushed = _start(db_session, rollout)
    write_rows(db_session, flushed.attempt_id, _recorded_rows())
    other = make_rollout(db_session, GOAL)
    finished = _start(db_session, other)
    assert finish_attempt(
        db_session,
        finished.attempt_id,
        EpisodeOutcome(1.0, 3, True),
        _recorded_rows(),
        policy_versions=(7, 7),
    )
    db_session.expire_all()

    def stored(model: type[Step] | type[LlmCall], attempt_id: int) -> list[dict[str, object]]:
        columns = [c for c in model.__table__.columns if c.key not in ("id", "attempt_id")]
        found = db_session.execute(
            select(*columns).where(model.attempt_id == attempt_id).order_by(model.index)
        )
        return [dict(row._mapping) for row in found]

    for model in (Step, LlmCall):
        assert stored(model, finished.attempt_id) == stored(model, flushed.attempt_id)
    assert len(stored(LlmCall, finished.attempt_id)) == 3
    null_json = db_session.scalar(
        select(func.count()).where(
            LlmCall.attempt_id == finished.attempt_id, LlmCall.structured_outputs.is_(None)
        )
    )
    assert null_json == 2  # SQL NULL, not the JSON value null


def test_finish_attempt_takes_the_callers_policy_versions(
    db_session: Session, rollout: Rollout
) -> None:
    start = _start(db_session, rollout)
    done = finish_attempt(
        db_session,
        start.attempt_id,
        EpisodeOutcome(1.0, 1, True),
        _rows(1, version=5),
        policy_versions=(5, 6),
    )
    assert done
    db_session.refresh(rollout)
    assert (rollout.policy_version_min, rollout.policy_version_max) == (5, 6)


def test_rows_with_different_columns_are_written_in_one_call(
    db_session: Session, rollout: Rollout
) -> None:
    start = _start(db_session, rollout)
    rows = _rows(2)
    rows.steps.append({"index": 2, "action": "click[x]", "observation": "o", "reward": 0.5})
    write_rows(db_session, start.attempt_id, rows)
    write_rows(db_session, start.attempt_id, _rows(3))  # idempotent on (attempt, index)
    steps = db_session.scalars(
        select(Step).where(Step.attempt_id == start.attempt_id).order_by(Step.index)
    ).all()
    assert [(s.index, s.reward) for s in steps] == [(0, 0.0), (1, 0.0), (2, 0.5)]
    calls = db_session.scalar(select(func.count()).where(LlmCall.attempt_id == start.attempt_id))
    assert calls == 3


@pytest.mark.parametrize("write", ["write_rows", "finish_attempt"])
def test_model_output_with_nul_characters_is_stored_not_lost(
    db_session: Session, rollout: Rollout, write: str
) -> None:
    """PostgreSQL text/jsonb cannot hold NUL; a garbage reply must not fail the write,
    neither a recorder's flush (``INSERT``) nor the built-in agent's finish (``COPY``)."""
    from app.core.agent import StepRecord
    from app.core.llm import call_row
    from workers.recording import step_row

    garbage = "\x00search[\x00lamp]"
    step = StepRecord(
        index=0,
        action=None,
        reply=garbage,
        observation="obs\x00",
        reward=0.0,
        done=False,
        valid=False,
        info={"valid": False, "nested": [{"text": garbage}]},
        error="no action",
        llm_latency_ms=1.0,
        env_latency_ms=1.0,
        policy_version=0,
    )
    call = make_llm_call(
        messages=[{"role": "user", "content": garbage}],
        response_text=garbage,
        response_token_ids=[0],
    )
    start = _start(db_session, rollout)
    rows = PendingRows()
    rows.steps.append(step_row(step))
    rows.calls.append(call_row(0, call))
    if write == "write_rows":
        write_rows(db_session, start.attempt_id, rows)
    else:
        assert finish_attempt(db_session, start.attempt_id, EpisodeOutcome(0.0, 1, False), rows)

    stored_step = db_session.scalars(select(Step).where(Step.attempt_id == start.attempt_id)).one()
    stored_call = db_session.scalars(
        select(LlmCall).where(LlmCall.attempt_id == start.attempt_id)
    ).one()
    assert stored_step.info["reply"] == "\ufffdsearch[\ufffdlamp]"
    assert stored_step.info["nested"][0]["text"] == "\ufffdsearch[\ufffdlamp]"
    assert stored_step.observation == "obs\ufffd"
    assert stored_call.response_text == "\ufffdsearch[\ufffdlamp]"
    assert stored_call.request_messages[0]["content"] == "\ufffdsearch[\ufffdlamp]"
    assert stored_call.response_token_ids == [0]


def test_json_values_postgres_refused_from_the_standard_library_are_stored(
    db_session: Session, rollout: Rollout
) -> None:
    """A step's info with a NaN (an env's or agent's float gone wrong), numpy numbers and
    keys that are not strings: the standard library's encoder wrote ``NaN``, which
    ``jsonb`` refuses, failing the whole write. Stored as ``null``, numbers and strings."""
    import numpy as np

    from app.core.agent import StepRecord
    from workers.recording import step_row

    step = StepRecord(
        index=0,
        action="search[lamp]",
        reply="search[lamp]",
        observation="results",
        reward=0.0,
        done=False,
        valid=True,
        info={"score": float("nan"), "rank": np.int64(3), "share": np.float32(0.5), 7: "seven"},
        error=None,
        llm_latency_ms=1.0,
        env_latency_ms=1.0,
        policy_version=0,
    )
    start = _start(db_session, rollout)
    rows = PendingRows()
    rows.steps.append(step_row(step))
    assert finish_attempt(db_session, start.attempt_id, EpisodeOutcome(0.0, 1, False), rows)

    info = db_session.scalars(select(Step.info).where(Step.attempt_id == start.attempt_id)).one()
    assert info["score"] is None
    assert info["rank"] == 3
    assert info["share"] == 0.5
    assert info["7"] == "seven"


@pytest.mark.parametrize("holder", ["reconciler", "redelivery"])
def test_the_agents_finish_waits_for_the_rollouts_lock_and_sees_what_its_holder_did(
    empty_database_url: str, holder: str
) -> None:
    """The rollout's lock is held by the reconciler, which marks the running attempt lost
    and queues the rollout again, or by a redelivery, which marks it lost and opens
    attempt 2 (the rollout stays ``running``). The agent's finish, sent meanwhile, waits
    for the lock without taking the attempt's first (else the holder's update of the
    attempt would deadlock with it), then sees the attempt lost: it changes and writes
    nothing."""
    engine = make_engine(Settings(_env_file=None, database_url=empty_database_url))
    try:
        with session_scope(engine) as session:
            make_goal(session, GOAL)
            rollout_id = make_rollout(session, GOAL).id
            start = _start(session, session.get(Rollout, rollout_id))
        outcome: list[bool] = []
        with engine.connect() as reconciler:
            reconciler.execute(select(Rollout.id).where(Rollout.id == rollout_id).with_for_update())

            def finish() -> None:
                with session_scope(engine) as session:
                    outcome.append(
                        finish_attempt(
                            session,
                            start.attempt_id,
                            EpisodeOutcome(1.0, 1, True),
                            _rows(1),
                            policy_versions=(0, 0),
                        )
                    )

            finishing = threading.Thread(target=finish)
            finishing.start()
            time.sleep(0.3)  # the finish is waiting for the lock
            assert not outcome
            reconciler.execute(
                update(Attempt)
                .where(Attempt.id == start.attempt_id)
                .values(status=AttemptStatus.LOST, error="no worker heartbeat")
            )
            if holder == "reconciler":
                after = RolloutStatus.QUEUED
                reconciler.execute(
                    update(Rollout).where(Rollout.id == rollout_id).values(status=after)
                )
            else:
                after = RolloutStatus.RUNNING
                reconciler.execute(
                    insert(Attempt).values(rollout_id=rollout_id, number=2, worker="w2")
                )
                reconciler.execute(
                    update(Rollout).where(Rollout.id == rollout_id).values(attempts=2, worker="w2")
                )
            reconciler.commit()
            finishing.join(timeout=10)
        assert outcome == [False]
        with session_scope(engine) as session:
            assert session.scalar(select(Rollout.status).where(Rollout.id == rollout_id)) == after
            assert session.scalar(select(Attempt.status).where(Attempt.id == start.attempt_id)) == (
                AttemptStatus.LOST
            )
            assert session.scalar(select(func.count()).select_from(Step)) == 0
    finally:
        engine.dispose()


def test_a_value_written_as_none_is_sql_null(db_session: Session, rollout: Rollout) -> None:
    """The recorder writes a call without a constraint and a step without info as
    ``None``, and a rollout queued without sampling overrides has ``None`` too: each is
    SQL ``NULL`` (what ``IS NULL`` finds, as the columns' comments say), not the JSON
    value ``null``."""
    start = _start(db_session, rollout)
    rows = _rows(1)
    rows.steps[0]["info"] = None
    rows.calls[0]["structured_outputs"] = None
    write_rows(db_session, start.attempt_id, rows)
    queued = enqueue_rollouts(db_session, Celery(broker="memory://"), goal_ids=[GOAL])
    db_session.flush()
    nulls = db_session.execute(
        text(
            "SELECT (SELECT count(*) FROM steps WHERE attempt_id = :a AND info IS NULL),"
            " (SELECT count(*) FROM llm_calls WHERE attempt_id = :a"
            "  AND structured_outputs IS NULL),"
            " (SELECT count(*) FROM rollouts WHERE id = :r AND sampling IS NULL)"
        ),
        {"a": start.attempt_id, "r": queued[0]},
    ).one()
    assert tuple(nulls) == (1, 1, 1)
