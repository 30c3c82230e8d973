"""``wsrl services``, ``wsrl db`` and ``wsrl sql`` as real processes on embedded services.

Each test starts its own embedded PostgreSQL/Redis on free ports in its own data dir
(these tests run whatever WSRL_TEST_* says) and stops them at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from app.embedded.ports import free_port

WSRL = str(Path(sys.executable).parent / "wsrl")


@dataclass
class Cli:
    data_dir: Path
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [WSRL, *args],
            env=self.env,
            cwd=self.data_dir.parent,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"wsrl {' '.join(args)} -> {result.returncode}\n{result.stderr}")
        return result


def clean_env(**settings: str) -> dict[str, str]:
    """The environment without the developer's WSRL_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
    env.update(settings)
    env["COLUMNS"] = "200"
    return env


@pytest.fixture
def cli(services_dir_factory: Callable[[str], Path]) -> Iterator[Cli]:
    data_dir = services_dir_factory("cli") / "data"
    env = clean_env(
        WSRL_DATA_DIR=str(data_dir),
        WSRL_EMBEDDED_POSTGRES_PORT=str(free_port()),
        WSRL_EMBEDDED_REDIS_PORT=str(free_port()),
    )
    runner = Cli(data_dir, env)
    yield runner
    runner("services", "stop", check=False)


@pytest.mark.slow
def test_services_db_and_sql_lifecycle(cli: Cli) -> None:
    started = cli("services", "start", "--data-dir", str(cli.data_dir))
    port = cli.env["WSRL_EMBEDDED_POSTGRES_PORT"]
    assert (
        f"postgres: started  postgresql+psycopg://postgres@127.0.0.1:{port}/wsrl" in started.stdout
    )
    assert f"redis: started  redis://127.0.0.1:{cli.env['WSRL_EMBEDDED_REDIS_PORT']}/0" in (
        started.stdout
    )
    recorded = json.loads((cli.data_dir / "services.json").read_text())
    assert set(recorded) == {"database_url", "redis_url"}

    again = cli("services", "start", "--data-dir", str(cli.data_dir))
    assert "postgres: running" in again.stdout and "redis: running" in again.stdout

    cli("db", "upgrade")
    assert "(up to date)" in cli("db", "current").stdout
    count = cli("sql", "select count(*) from rollouts", "--format", "csv")
    assert count.stdout.splitlines() == ["count", "0"]
    table = cli("sql", "select count(*) from rollouts")
    assert "│ 0 " in table.stdout

    # A row written by the owner (as workers do), for `wsrl sql` to protect and to show.
    url = recorded["database_url"].replace("+psycopg", "")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("insert into goals (id, split, instruction) values (1, 't', 'i')")

    deleted = cli("sql", "delete from goals", check=False)
    assert deleted.returncode == 1
    assert "read-only" in deleted.stderr and "Nothing was changed" in deleted.stderr
    assert json.loads(cli("sql", "select id from goals", "-f", "json").stdout) == [{"id": 1}]

    stopped = cli("services", "stop")
    assert "postgres: stopped" in stopped.stdout and "redis: stopped" in stopped.stdout
    assert not (cli.data_dir / "services.json").exists()
    status = cli("services", "status", check=False)
    assert status.returncode == 1 and "postgres: not running" in status.stdout
    no_db = cli("sql", "select 1", check=False)
    assert no_db.returncode == 1 and "wsrl services start" in no_db.stderr

    cli("services", "start")
    assert "(up to date)" in cli("db", "current").stdout
    assert json.loads(cli("sql", "select id from goals", "-f", "json").stdout) == [{"id": 1}]
    assert "postgres: running" in cli("services", "status").stdout


@pytest.mark.parametrize(
    ("setting", "service"),
    [("WSRL_EMBEDDED_POSTGRES_PORT", "PostgreSQL"), ("WSRL_EMBEDDED_REDIS_PORT", "Redis")],
)
def test_port_taken_is_a_clear_error(cli: Cli, setting: str, service: str) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cli.env[setting] = str(port)
        result = cli("services", "start", check=False)
    assert result.returncode == 1
    assert f"embedded {service}: port {port}" in result.stderr
    assert f"Set {setting} to a free port" in result.stderr
    assert "Traceback" not in result.stderr


def test_configured_urls_start_nothing(cli: Cli) -> None:
    cli.env["WSRL_DATABASE_URL"] = "postgresql+psycopg://someone:secret@db.example:5432/wsrl"
    cli.env["WSRL_REDIS_URL"] = "redis://cache.example:6379/0"
    result = cli("services", "start")
    assert "postgres: using WSRL_DATABASE_URL" in result.stdout
    assert "redis: using WSRL_REDIS_URL" in result.stdout
    assert "secret" not in result.stdout
    assert not (cli.data_dir / "postgres").exists() and not (cli.data_dir / "redis").exists()
    assert json.loads((cli.data_dir / "services.json").read_text()) == {}


def test_stop_when_nothing_runs_is_harmless(cli: Cli) -> None:
    result = cli("services", "stop")
    assert "postgres: not running" in result.stdout and "redis: not running" in result.stdout
