"""``wsrl db`` and ``wsrl sql`` as real processes against the session's PostgreSQL server
(the machine's when WSRL_TEST_DATABASE_URL is set, else the embedded one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.db import migrate

WSRL = str(Path(sys.executable).parent / "wsrl")


def _wsrl(
    database_url: str, cwd: Path, *args: str, **settings: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
    env.update(WSRL_DATABASE_URL=database_url, WSRL_DATA_DIR=str(cwd / "data"), COLUMNS="200")
    env.update(settings)
    return subprocess.run(
        [WSRL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def fresh_url(make_database: Callable[[], str]) -> str:
    return make_database()


def test_upgrade_current_downgrade_cycle(fresh_url: str, tmp_path: Path) -> None:
    head = migrate.head_revision()
    current = _wsrl(fresh_url, tmp_path, "db", "current")
    assert current.returncode == 0 and "base (head is" in current.stdout

    upgraded = _wsrl(fresh_url, tmp_path, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"database at revision {head}" in upgraded.stdout
    assert f"{head} (up to date)" in _wsrl(fresh_url, tmp_path, "db", "current").stdout

    down = _wsrl(fresh_url, tmp_path, "db", "downgrade")
    assert down.returncode == 0, down.stderr
    assert migrate.current_revision(fresh_url) != head, "one step down"
    assert _wsrl(fresh_url, tmp_path, "db", "downgrade", "base").returncode == 0
    assert migrate.current_revision(fresh_url) is None

    again = _wsrl(fresh_url, tmp_path, "db", "downgrade")
    assert again.returncode == 1 and "at base already" in again.stderr

    assert _wsrl(fresh_url, tmp_path, "db", "upgrade", "head").returncode == 0
    assert _wsrl(fresh_url, tmp_path, "db", "downgrade", "base").returncode == 0
    assert migrate.current_revision(fresh_url) is None


def test_upgrade_unknown_revision_fails_clearly(fresh_url: str, tmp_path: Path) -> None:
    result = _wsrl(fresh_url, tmp_path, "db", "upgrade", "zzzz")
    assert result.returncode == 1
    assert "zzzz" in result.stderr and "Traceback" not in result.stderr


def test_sql_counts_and_refuses_writes(empty_database_url: str, tmp_path: Path) -> None:
    database_url = empty_database_url
    count = _wsrl(database_url, tmp_path, "sql", "select count(*) as n from rollouts", "-f", "csv")
    assert count.returncode == 0, count.stderr
    assert count.stdout.splitlines() == ["n", "0"]

    deleted = _wsrl(database_url, tmp_path, "sql", "delete from rollouts")
    assert deleted.returncode == 1
    assert "read-only" in deleted.stderr and "Nothing was changed" in deleted.stderr


def test_sql_syntax_error_exits_1(database_url: str, tmp_path: Path) -> None:
    result = _wsrl(database_url, tmp_path, "sql", "selec 1")
    assert result.returncode == 1 and "syntax error" in result.stderr


def test_sql_statement_timeout_is_short_by_default_and_configurable(
    database_url: str, tmp_path: Path
) -> None:
    shown = _wsrl(database_url, tmp_path, "sql", "show statement_timeout", "-f", "csv")
    assert shown.stdout.splitlines() == ["statement_timeout", "30s"], shown.stderr
    started = time.monotonic()
    slept = _wsrl(
        database_url, tmp_path, "sql", "select pg_sleep(60)", WSRL_SQL_STATEMENT_TIMEOUT_S="1"
    )
    assert slept.returncode == 1
    assert "statement timeout" in slept.stderr and "limit 1s" in slept.stderr, slept.stderr
    assert time.monotonic() - started < 20, "pg_sleep(60) was cut at the timeout"


def test_db_without_any_database_says_how_to_get_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
    env["WSRL_DATA_DIR"] = str(tmp_path / "nothing")
    result = subprocess.run(
        [WSRL, "db", "current"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "WSRL_DATABASE_URL" in result.stderr and "wsrl services start" in result.stderr
