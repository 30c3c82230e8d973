"""Read-only SQL (the engine of ``wsrl sql``): reads work, every kind of write is refused."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text

from app.db.readonly import QueryError, ReadOnlyViolation, libpq_url, run_readonly


@pytest.fixture
def committed_goal(db_engine: Engine) -> Iterator[int]:
    """A goal committed for real (run_readonly uses its own connection), removed after."""
    goal_id = random.randrange(1_000_000, 2_000_000_000)
    with db_engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO goals (id, split, instruction, spec) "
                "VALUES (:id, 'train', 'find 50% off socks', '{\"asin\": \"B0\"}')"
            ),
            {"id": goal_id},
        )
    yield goal_id
    with db_engine.begin() as conn:
        conn.execute(text("DELETE FROM goals WHERE id = :id"), {"id": goal_id})


def _instruction(db_engine: Engine, goal_id: int) -> str | None:
    with db_engine.connect() as conn:
        return conn.execute(
            text("SELECT instruction FROM goals WHERE id = :id"), {"id": goal_id}
        ).scalar_one_or_none()


def test_select_returns_columns_and_rows(database_url: str, committed_goal: int) -> None:
    result = run_readonly(
        database_url, f"SELECT id, instruction FROM goals WHERE id = {committed_goal}"
    )
    assert result.columns == ["id", "instruction"]
    assert result.rows == [(committed_goal, "find 50% off socks")]


def test_percent_signs_are_not_placeholders(database_url: str, committed_goal: int) -> None:
    result = run_readonly(
        database_url,
        f"SELECT count(*) FROM goals WHERE instruction LIKE '%50%%' AND id = {committed_goal}",
    )
    assert result.rows == [(1,)]


def test_views_are_readable(empty_database_url: str) -> None:
    assert run_readonly(empty_database_url, "SELECT count(*) FROM trajectories").rows == [(0,)]
    assert run_readonly(empty_database_url, "SELECT * FROM policy_performance").rows == []


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM goals",
        "UPDATE goals SET instruction = 'x'",
        "INSERT INTO goals (id, split, instruction) VALUES (-1, 's', 'i')",
        "TRUNCATE goals CASCADE",
        "DROP TABLE goals CASCADE",
        "CREATE TABLE sneaky (id int)",
        "WITH gone AS (DELETE FROM goals RETURNING id) SELECT count(*) FROM gone",
    ],
)
def test_writes_are_refused_and_nothing_changes(
    database_url: str, db_engine: Engine, committed_goal: int, statement: str
) -> None:
    with pytest.raises(ReadOnlyViolation, match=r"read-only.*Nothing was changed"):
        run_readonly(database_url, statement)
    assert _instruction(db_engine, committed_goal) == "find 50% off socks"


def test_commit_inside_the_statement_cannot_escape(
    database_url: str, db_engine: Engine, committed_goal: int
) -> None:
    with pytest.raises(QueryError, match="multiple commands"):
        run_readonly(database_url, f"COMMIT; DELETE FROM goals WHERE id = {committed_goal}")
    assert _instruction(db_engine, committed_goal) == "find 50% off socks"


def test_role_reset_has_no_effect_beyond_the_statement(
    database_url: str, db_engine: Engine, committed_goal: int
) -> None:
    run_readonly(database_url, "RESET ROLE")
    with pytest.raises(ReadOnlyViolation):
        run_readonly(database_url, f"DELETE FROM goals WHERE id = {committed_goal}")
    assert _instruction(db_engine, committed_goal) is not None


def test_syntax_error_is_a_query_error(database_url: str) -> None:
    with pytest.raises(QueryError, match="syntax error"):
        run_readonly(database_url, "SELEC 1")


def test_unmigrated_database_says_to_upgrade(make_database: Callable[[], str]) -> None:
    # The role may exist (cluster-wide, from another database); the tables do not.
    with pytest.raises(QueryError, match="wsrl db upgrade"):
        run_readonly(make_database(), "SELECT count(*) FROM rollouts")


def test_unreachable_database_is_a_query_error() -> None:
    with pytest.raises(QueryError, match="cannot connect"):
        run_readonly("postgresql+psycopg://postgres@127.0.0.1:1/none", "SELECT 1")


def test_switching_back_to_the_owner_role_is_impossible(database_url: str) -> None:
    """The escape of the SET ROLE design: ``set_config('role', 'none', true)``."""
    result = run_readonly(
        database_url,
        "WITH switched AS MATERIALIZED (SELECT set_config('role', 'none', true) AS role) "
        "SELECT current_user::text, session_user::text, "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) FROM switched",
    )
    assert result.rows == [("wsrl_readonly", "wsrl_readonly", False)]


@pytest.mark.parametrize(
    "call",
    [
        "pg_read_file('/etc/hostname')",
        "pg_ls_dir('.')",
        # planned after the switch, so checked as whoever the role is then
        "query_to_xml('SELECT pg_read_file(''/etc/hostname'')', true, true, '')",
        "pg_terminate_backend({pid})",
        "pg_cancel_backend({pid})",
    ],
)
def test_superuser_functions_are_refused_even_after_a_role_switch(
    database_url: str, call: str
) -> None:
    with psycopg.connect(libpq_url(database_url)) as bystander:
        pid = bystander.info.backend_pid
        statement = (
            "WITH switched AS MATERIALIZED (SELECT set_config('role', 'none', true) AS role) "
            f"SELECT {call.format(pid=pid)} FROM switched"
        )
        with pytest.raises(ReadOnlyViolation, match=r"permission denied|must be a"):
            run_readonly(database_url, statement)
        assert bystander.execute("SELECT 1").fetchone() == (1,), "the other backend lives"


def test_default_statement_timeout_is_short(database_url: str) -> None:
    assert run_readonly(database_url, "SHOW statement_timeout").rows == [("30s",)]


def test_long_statement_is_cancelled_at_the_timeout(database_url: str) -> None:
    started = time.monotonic()
    with pytest.raises(QueryError, match=r"statement timeout.*limit 0\.5s"):
        run_readonly(
            database_url,
            "SELECT set_config('statement_timeout', '0', true), pg_sleep(5)",
            timeout_s=0.5,
        )
    assert time.monotonic() - started < 3
