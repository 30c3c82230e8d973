"""Models against a real PostgreSQL: migrations match, round trips, constraints, views."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, make_url, pool, select, text
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session

from app.db import migrate
from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStart, RolloutStatus
from app.db.models import Attempt, Base, Goal, LlmCall, Rollout, Step

TABLES = {"goals", "rollouts", "attempts", "steps", "llm_calls", "policy_versions", "train_steps"}
VIEWS = {"trajectories", "policy_performance", "webshop_goals"}


def _schema_diff(url: str) -> list:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def _objects(url: str) -> tuple[set[str], set[str]]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        inspector = inspect(engine)
        return set(inspector.get_table_names()), set(inspector.get_view_names())
    finally:
        engine.dispose()


def test_autogenerate_finds_no_difference_between_models_and_migrations(
    database_url: str,
) -> None:
    assert _schema_diff(database_url) == []


def test_downgrade_to_base_then_upgrade_round_trips(make_database: Callable[[], str]) -> None:
    url = make_database()
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    tables, views = _objects(url)
    assert tables >= TABLES and views == VIEWS

    migrate.downgrade(url, "base")
    assert migrate.current_revision(url) is None
    tables, views = _objects(url)
    assert tables == {"alembic_version"} and views == set()

    migrate.upgrade(url)
    assert _schema_diff(url) == []
    assert _objects(url)[1] == VIEWS


def test_downgrade_at_base_is_a_clear_error(make_database: Callable[[], str]) -> None:
    url = make_database()
    with pytest.raises(migrate.MigrationError, match="at base already"):
        migrate.downgrade(url)


def test_upgrade_to_unknown_revision_is_a_clear_error(make_database: Callable[[], str]) -> None:
    with pytest.raises(migrate.MigrationError, match="nope"):
        migrate.upgrade(make_database(), "nope")


def test_migration_is_repeatable_on_a_cluster_where_the_role_exists(
    database_url: str, make_database: Callable[[], str]
) -> None:
    # database_url already created wsrl_readonly on this cluster.
    url = make_database()
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()


def test_a_migration_waiting_on_another_databases_change_of_the_role_goes_on(
    database_url: str, make_database: Callable[[], str]
) -> None:
    # The role is cluster-wide: another database's migration (here a held transaction)
    # changes its row while this one's 0002 wants to. PostgreSQL makes 0002 wait, then
    # fails it with "tuple concurrently updated" unless the migration tries again (CI's
    # two test processes migrating their first databases at once met exactly this).
    url = make_database()
    migrate.upgrade(url, "0001")
    holder = create_engine(database_url, poolclass=pool.NullPool)
    watcher = create_engine(database_url, poolclass=pool.NullPool)
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            migrate.upgrade(url)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    try:
        with holder.connect() as held:
            held.execute(text("ALTER ROLE wsrl_readonly CONNECTION LIMIT 16"))
            thread = threading.Thread(target=upgrade)
            thread.start()
            waiting = 0
            deadline = time.monotonic() + 30
            while not waiting and thread.is_alive() and time.monotonic() < deadline:
                with watcher.connect() as conn:
                    waiting = conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = :name AND wait_event_type = 'Lock'"
                        ),
                        {"name": make_url(url).database},
                    ).scalar_one()
                time.sleep(0.05)
            assert waiting, "the migration never waited on the held change of the role"
            held.commit()
        thread.join(60)
    finally:
        holder.dispose()
        watcher.dispose()
    assert not thread.is_alive()
    assert errors == []
    assert migrate.current_revision(url) == migrate.head_revision()


def test_downgrade_below_0010_refuses_while_another_environments_goals_exist(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url)
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with Session(engine) as session, session.begin():
            _goal(session, environment="babyai", spec={"data_idx": 3})
        with pytest.raises(RuntimeError, match="1 goals belong to another environment"):
            migrate.downgrade(url, "0009")
        assert migrate.current_revision(url) == migrate.head_revision()
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM goals"))
        migrate.downgrade(url, "0009")
        assert migrate.current_revision(url) == "0009"
    finally:
        engine.dispose()


WEBSHOP_COLUMNS = (
    "id, split, instruction, asin, name, category, product_category, query, attributes, "
    "goal_options, price_upper, weight, source"
)


def test_0011_moves_webshop_goal_fields_into_the_spec_and_the_view_gives_them_back(
    make_database: Callable[[], str],
) -> None:
    """Rows written before 0011 keep every value: in the spec after the upgrade (NULLs left
    out), as columns in ``webshop_goals`` with their old types, and as columns again after
    a downgrade."""
    url = make_database()
    migrate.upgrade(url, "0010")
    engine = create_engine(url, poolclass=pool.NullPool)
    rows = [
        (1, "test", "i need a blue shirt", "B01", "a shirt", "fashion", "shirts", "blue shirt",
         ["blue", "cotton"], {"color": "blue"}, 30.0, 1.0, "synthetic"),
        (2, "train", "a mug", "B02", None, None, None, None, [], ["large"], None, 0.5, "human"),
    ]  # fmt: skip
    try:
        with engine.begin() as conn:
            for row in rows:
                conn.execute(
                    text(
                        f"INSERT INTO goals ({WEBSHOP_COLUMNS}) VALUES (:id, :split, "
                        ":instruction, :asin, :name, :category, :product_category, :query, "
                        ":attributes, CAST(:goal_options AS jsonb), :price_upper, :weight, "
                        ":source)"
                    ),
                    dict(zip(WEBSHOP_COLUMNS.split(", "), row, strict=True))
                    | {"goal_options": json.dumps(row[9])},
                )
        migrate.upgrade(url)
        with engine.connect() as conn:
            specs = dict(conn.execute(text("SELECT id, spec FROM goals ORDER BY id")).all())
            view = conn.execute(text(f"SELECT {WEBSHOP_COLUMNS} FROM webshop_goals ORDER BY id"))
            assert [tuple(r) for r in view] == rows
        assert specs == {
            1: {"asin": "B01", "name": "a shirt", "product_category": "shirts",
                "query": "blue shirt", "attributes": ["blue", "cotton"],
                "goal_options": {"color": "blue"}, "price_upper": 30.0},
            2: {"asin": "B02", "attributes": [], "goal_options": ["large"]},
        }  # fmt: skip
        assert "asin" not in {c["name"] for c in inspect(engine).get_columns("goals")}
        assert inspect(engine).get_columns("trajectories")[-1]["name"] == "environment"
        migrate.downgrade(url, "0010")
        columns = [c["name"] for c in inspect(engine).get_columns("trajectories")]
        assert "environment" not in columns and columns[-1] == "last_error"
        with engine.connect() as conn:
            back = conn.execute(text(f"SELECT {WEBSHOP_COLUMNS} FROM goals ORDER BY id"))
            assert [tuple(r) for r in back] == rows
            assert conn.scalar(text("SELECT count(*) FROM goals WHERE spec IS NOT NULL")) == 0
    finally:
        engine.dispose()


def test_a_webshop_goal_spec_is_validated_where_it_is_written() -> None:
    from app.environments import ENVIRONMENTS, get_environment
    from app.environments.webshop.goals import _goal_row

    row = _goal_row({"id": 7, "split": "test", "instruction": "x", "asin": "B7",
                     "goal_options": None, "attributes": ["a"], "weight": 2})  # fmt: skip
    assert row["spec"] == {"asin": "B7", "attributes": ["a"], "goal_options": {}}
    assert row["environment"] == "webshop" and row["weight"] == 2.0
    wrong = [
        (lambda: _goal_row({"id": 8, "split": "test", "instruction": "x"}),
         "goal 8: not a WebShop goal: asin: field required"),
        (lambda: _goal_row({"id": 9, "split": "t", "instruction": "x", "asin": "B",
                            "price_upper": "?"}),
         "goal 9: not a WebShop goal: price_upper: input should be a valid number, unable to "
         "parse string as a number"),
        (lambda: get_environment("babyai").spec({"level": "BabyAI-GoToObj-v0", "seed": 1}),
         "not a babyai goal spec: data_idx: field required"),
        (lambda: get_environment("webshop").spec({"asin": "B", "colour": "red"}),
         "not a webshop goal spec: colour: extra inputs are not permitted"),
    ]  # fmt: skip
    for write, message in wrong:
        with pytest.raises(ValueError) as raised:
            write()
        assert str(raised.value) == message
    assert all(env.goal_spec is not None for env in ENVIRONMENTS.values())


def test_trainer_and_people_indices_exist(database_url: str) -> None:
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        indices = {
            index["name"]: index["column_names"]
            for index in inspect(engine).get_indexes("rollouts")
        }
    finally:
        engine.dispose()
    assert indices["ix_rollouts_trainer"] == ["mode", "status", "train_step", "group_id"]
    for column in ("policy_version_max", "goal_id", "status", "reward", "group_id"):
        assert indices[f"ix_rollouts_{column}"] == [column]


def _goal(session: Session, **overrides: object) -> Goal:
    values: dict = {
        "id": random.randrange(1_000_000, 2_000_000_000),
        "split": "train",
        "instruction": "i need a blue shirt, and price lower than 30.00 dollars",
        "category": "fashion",
        "spec": {
            "asin": "B000TEST",
            "attributes": ["blue", "cotton"],
            "goal_options": {"color": "blue"},
            "price_upper": 30.0,
        },
        "weight": 1.0,
    }
    values.update(overrides)
    goal = Goal(**values)
    session.add(goal)
    session.flush()
    return goal


def _rollout(session: Session, goal: Goal, **overrides: object) -> Rollout:
    values: dict = {"goal_id": goal.id, "group_id": uuid.uuid4(), "mode": RolloutMode.TRAIN}
    values.update(overrides)
    rollout = Rollout(**values)
    session.add(rollout)
    session.flush()
    return rollout


def test_defaults_and_enums_round_trip(db_session: Session) -> None:
    goal = _goal(db_session)
    rollout = _rollout(db_session, goal)
    db_session.expire_all()
    loaded = db_session.get(Rollout, rollout.id)
    assert loaded is not None
    assert loaded.status is RolloutStatus.QUEUED
    assert loaded.mode is RolloutMode.TRAIN
    assert loaded.start is RolloutStart.SEARCH
    assert loaded.attempts == 0 and loaded.max_attempts == 3 and loaded.train_step is None
    assert loaded.created_at is not None
    assert db_session.get(Goal, goal.id).spec["attributes"] == ["blue", "cotton"]  # type: ignore[union-attr,index]


def test_token_columns_round_trip_exactly(db_session: Session) -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 151_000, 1_000).tolist()
    response = rng.integers(0, 151_000, 4_096).tolist()
    logprobs = (-rng.exponential(2.0, 4_096)).tolist()
    rollout = _rollout(db_session, _goal(db_session))
    attempt = Attempt(rollout_id=rollout.id, number=1)
    db_session.add(attempt)
    db_session.flush()
    call = LlmCall(
        attempt_id=attempt.id,
        index=0,
        policy_version=3,
        request_messages=[{"role": "user", "content": "hi"}],
        response_text="search[blue shirt]",
        prompt_token_ids=prompt,
        response_token_ids=response,
        response_logprobs=logprobs,
        finish_reason="stop",
    )
    db_session.add(call)
    db_session.commit()
    db_session.expire_all()
    loaded = db_session.scalars(select(LlmCall).where(LlmCall.id == call.id)).one()
    assert loaded.prompt_token_ids == prompt
    assert loaded.response_token_ids == response
    # float32 storage: equal to the float32 rounding of what was written.
    assert loaded.response_logprobs == [float(np.float32(v)) for v in logprobs]
    assert loaded.trainable is True
    size = db_session.execute(
        text("SELECT length(response_token_ids) FROM llm_calls WHERE id = :id"), {"id": call.id}
    ).scalar_one()
    assert size == 4 * 4_096


def test_token_id_out_of_int32_is_refused(db_session: Session) -> None:
    rollout = _rollout(db_session, _goal(db_session))
    attempt = Attempt(rollout_id=rollout.id, number=1)
    db_session.add(attempt)
    db_session.flush()
    db_session.add(
        LlmCall(attempt_id=attempt.id, index=0, request_messages=[], response_token_ids=[2**31])
    )
    with pytest.raises(StatementError, match="int32"):
        db_session.flush()


def test_attempt_number_is_unique_per_rollout(db_session: Session) -> None:
    rollout = _rollout(db_session, _goal(db_session))
    db_session.add(Attempt(rollout_id=rollout.id, number=1))
    db_session.flush()
    db_session.add(Attempt(rollout_id=rollout.id, number=1))
    with pytest.raises(IntegrityError, match="uq_attempts_rollout_id_number"):
        db_session.flush()


def test_step_index_is_unique_per_attempt(db_session: Session) -> None:
    rollout = _rollout(db_session, _goal(db_session))
    attempt = Attempt(rollout_id=rollout.id, number=1)
    db_session.add(attempt)
    db_session.flush()
    db_session.add_all(
        [
            Step(attempt_id=attempt.id, index=0, action="search[x]"),
            Step(attempt_id=attempt.id, index=0, action="click[y]"),
        ]
    )
    with pytest.raises(IntegrityError, match="uq_steps_attempt_id_index"):
        db_session.flush()


def test_unknown_status_is_refused_by_the_database(db_session: Session) -> None:
    rollout = _rollout(db_session, _goal(db_session))
    with pytest.raises(IntegrityError, match="ck_rollouts_status"):
        db_session.execute(
            text("UPDATE rollouts SET status = 'done' WHERE id = :id"), {"id": rollout.id}
        )


def test_unknown_start_is_refused_by_the_database(db_session: Session) -> None:
    rollout = _rollout(db_session, _goal(db_session), start=RolloutStart.ITEM)
    with pytest.raises(IntegrityError, match="ck_rollouts_start"):
        db_session.execute(
            text("UPDATE rollouts SET start = 'cart' WHERE id = :id"), {"id": rollout.id}
        )


def test_downgrade_drops_start_and_upgrade_fills_it_with_search(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url, "0004")
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO goals (id, split, instruction, asin) VALUES (1, 't', 'x', 'B')")
            )
            conn.execute(
                text(
                    "INSERT INTO rollouts (id, goal_id, group_id, mode) "
                    "VALUES (:id, 1, :id, 'train')"
                ),
                {"id": uuid.uuid4()},
            )
        migrate.upgrade(url)
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT start FROM rollouts")) == "search"
        migrate.downgrade(url, "0004")
        columns = {c["name"] for c in inspect(engine).get_columns("rollouts")}
        assert "start" not in columns and "mode" in columns
    finally:
        engine.dispose()


def test_trajectories_and_policy_performance_views(db_session: Session) -> None:
    goal = _goal(db_session, split="test", category="beauty")
    group = uuid.uuid4()
    outcomes = [(1.0, True, 4), (0.5, False, 6), (0.0, False, 15)]
    for index, (reward, success, steps) in enumerate(outcomes):
        rollout = _rollout(
            db_session,
            goal,
            group_id=group,
            sample_index=index,
            status=RolloutStatus.SUCCEEDED,
            reward=reward,
            success=success,
            num_steps=steps,
            policy_version_min=7,
            policy_version_max=7,
        )
        db_session.add(Attempt(rollout_id=rollout.id, number=1, status=AttemptStatus.SUCCEEDED))
    _rollout(db_session, goal, group_id=group, status=RolloutStatus.FAILED, policy_version_max=7)
    db_session.flush()

    rows = db_session.execute(
        text("SELECT split, category, reward FROM trajectories WHERE group_id = :g"), {"g": group}
    ).all()
    assert sorted(row.reward or 0.0 for row in rows) == [0.0, 0.0, 0.5, 1.0]
    assert {(row.split, row.category) for row in rows} == {("test", "beauty")}

    perf = db_session.execute(
        text("SELECT * FROM policy_performance WHERE policy_version = 7 AND mode = 'train'")
    ).one()
    assert perf.episodes == 3
    assert float(perf.mean_reward) == pytest.approx(0.5)
    assert float(perf.success_rate) == pytest.approx(1 / 3)
    assert float(perf.mean_steps) == pytest.approx(25 / 3)
    assert perf.failed_rollouts == 1


def test_upgrade_from_0006_keeps_policy_versions_and_downgrade_drops_the_protocol(
    make_database: Callable[[], str],
) -> None:
    """Versions published before 0007 have no protocol (NULL: workers play their own
    settings); going back to 0006 drops the column and keeps the versions."""
    url = make_database()
    migrate.upgrade(url, "0006")
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO policy_versions (version, model) VALUES (3, 'p')"))
        migrate.upgrade(url, "0007")
        with engine.begin() as conn:
            assert conn.scalar(text("SELECT protocol FROM policy_versions")) is None
            conn.execute(
                text("UPDATE policy_versions SET protocol = CAST(:p AS jsonb)"),
                {"p": '{"mode": "tools"}'},
            )
        migrate.downgrade(url, "0006")
        columns = {c["name"] for c in inspect(engine).get_columns("policy_versions")}
        assert "protocol" not in columns and "model" in columns
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT version FROM policy_versions")) == 3
        migrate.upgrade(url)
        assert _schema_diff(url) == []
    finally:
        engine.dispose()


def test_upgrade_to_0008_turns_json_null_into_sql_null(make_database: Callable[[], str]) -> None:
    """Rows written before 0008 hold the JSON value ``null`` where they had no value;
    the upgrade makes those NULL and leaves real values as they were."""
    url = make_database()
    migrate.upgrade(url, "0007")
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO policy_versions (version, model, protocol) VALUES"
                    " (1, 'p', 'null'::jsonb), (2, 'p', '{\"mode\": \"text\"}'::jsonb)"
                )
            )
        migrate.upgrade(url, "0008")
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT version, protocol IS NULL FROM policy_versions ORDER BY version")
            ).all()
            kept = conn.scalar(text("SELECT protocol FROM policy_versions WHERE version = 2"))
        assert [tuple(r) for r in rows] == [(1, True), (2, False)]
        assert kept == {"mode": "text"}
        migrate.downgrade(url, "0007")
        migrate.upgrade(url)
        assert _schema_diff(url) == []
    finally:
        engine.dispose()
