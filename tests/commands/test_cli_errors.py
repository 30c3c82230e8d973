"""What ``wsrl`` says when Postgres or Redis cannot be reached, or the database is not
migrated: one ``Error:`` line with its fix, exit status 1, no traceback, and nothing
created (the real CLI in a subprocess; real Postgres, Redis and env server)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers.processes import REPO, WSRL, child_env
from sqlalchemy import create_engine, func, select

from app.config import Settings
from app.db import migrate
from app.db.models import Rollout
from app.embedded.ports import free_port
from app.webshop.server.runner import RunningServer
from trainer.config import tiny_policy_path


def _wsrl(settings: Settings, *args: str, **values: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WSRL, *args],
        env=child_env(settings.model_copy(update=values)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_one_clear_error(done: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("Error: "), done.stderr
    for phrase in phrases:
        assert phrase in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["status"], ["report"], ["export", "goals", "-o", "x"]])
def test_postgres_unreachable_is_one_line_with_its_fix(
    test_settings: Settings, command: list[str], tmp_path: Path
) -> None:
    """It was a 60-line traceback ending in psycopg's OperationalError."""
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/nowhere"
    done = _wsrl(test_settings, *command, database_url=url, data_dir=tmp_path)
    _assert_one_clear_error(
        done, f'cannot connect to Postgres: connection to server at "127.0.0.1", port {port}',
        "Fix: start it", "WSRL_DATABASE_URL",
    )  # fmt: skip


def test_a_postgres_host_that_does_not_resolve_is_one_line_with_its_fix(
    test_settings: Settings,
) -> None:
    """psycopg says "failed to resolve host", not "connection failed: ...", and the CLI,
    which knew the failure by that wording, printed a 60-line traceback."""
    url = "postgresql+psycopg://postgres@no-such-host.invalid:5432/nowhere"
    done = _wsrl(test_settings, "status", database_url=url)
    _assert_one_clear_error(
        done, "cannot connect to Postgres: failed to resolve host 'no-such-host.invalid'",
        "WSRL_DATABASE_URL",
    )  # fmt: skip


def test_a_postgres_url_on_another_servers_port_gives_up_after_ten_seconds(
    test_settings: Settings,
) -> None:
    """Redis takes the connection and never answers Postgres' handshake: the command hung
    for psycopg's default of 130 s, then printed a traceback."""
    redis_port = urlsplit(test_settings.resolved_redis_url()).port
    url = f"postgresql+psycopg://postgres@127.0.0.1:{redis_port}/nowhere"
    started = time.monotonic()
    done = _wsrl(test_settings, "status", database_url=url)
    _assert_one_clear_error(
        done, "cannot connect to Postgres: connection timeout expired", "WSRL_DATABASE_URL"
    )
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("the Postgres port", "Connection closed by server"),
        ("a database the server lacks", "DB index is out of range"),
    ],
)
def test_a_redis_url_that_reaches_no_redis_database_is_one_line_with_its_fix(
    test_settings: Settings, where: str, says: str
) -> None:
    """Both were tracebacks: the CLI knew a Redis failure by redis-py's wording
    "connecting to", which neither message has."""
    redis = urlsplit(test_settings.resolved_redis_url())
    if where == "the Postgres port":
        url = f"redis://127.0.0.1:{urlsplit(test_settings.resolved_database_url()).port}/0"
    else:
        url = redis._replace(path="/99").geturl()  # a server has 16 unless told otherwise
    done = _wsrl(test_settings, "status", redis_url=url)
    _assert_one_clear_error(done, f"cannot connect to Redis: {says}", "WSRL_REDIS_URL")


def test_redis_unreachable_is_one_line_with_its_fix(test_settings: Settings) -> None:
    port = free_port()  # nothing listens there
    done = _wsrl(test_settings, "status", redis_url=f"redis://127.0.0.1:{port}/0")
    _assert_one_clear_error(
        done, f"cannot connect to Redis: Error 111 connecting to 127.0.0.1:{port}", "WSRL_REDIS_URL"
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections are never answered, as behind a firewall that drops
    packets: a listener that accepts nothing, its one-place queue already taken, so the
    kernel drops every further connection's SYN and the client retries it for minutes."""
    with socket.socket() as listener, socket.socket() as taken:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        taken.connect(("127.0.0.1", port))
        yield port


def test_a_redis_host_that_never_answers_gives_up_after_ten_seconds(
    test_settings: Settings, silent_port: int
) -> None:
    """redis-py waits for a connection as long as the OS retries it (about two minutes
    on Linux): the command hung past this test's 120 s."""
    started = time.monotonic()
    done = _wsrl(test_settings, "status", redis_url=f"redis://127.0.0.1:{silent_port}/0")
    _assert_one_clear_error(done, "cannot connect to Redis: Timeout connecting", "WSRL_REDIS_URL")
    assert time.monotonic() - started < 30


def test_redis_refusing_the_password_is_one_line_with_its_fix(test_settings: Settings) -> None:
    """The test server has no password: AUTH with one is refused (redis-py's
    AuthenticationError), as a wrong password would be."""
    url = urlsplit(test_settings.resolved_redis_url())
    with_password = url._replace(netloc=f":not-the-password@{url.hostname}:{url.port}").geturl()
    done = _wsrl(test_settings, "status", redis_url=with_password)
    _assert_one_clear_error(done, "cannot connect to Redis: AUTH", "WSRL_REDIS_URL")


def test_a_database_not_migrated_says_to_upgrade(
    test_settings: Settings, make_database: Callable[[], str]
) -> None:
    done = _wsrl(test_settings, "status", database_url=make_database())
    _assert_one_clear_error(
        done, "the database's schema is older than this wsrl", "does not exist",
        "Fix: `wsrl db upgrade`",
    )  # fmt: skip


@pytest.mark.parametrize("broker", ["refusing", "never answering"])
def test_eval_with_the_broker_down_stops_before_creating_rollouts(
    test_settings: Settings,
    make_database: Callable[[], str],
    generated_env_server: RunningServer,
    request: pytest.FixtureRequest,
    broker: str,
) -> None:
    """The rollouts were created, their jobs' send failed (logged, left to the reconciler,
    which cannot send either while Redis is down), and `wsrl eval` waited without a word
    until its timeout. A broker that never answers held it for minutes (kombu's
    connections had no connect timeout either)."""
    port = free_port() if broker == "refusing" else request.getfixturevalue("silent_port")
    started = time.monotonic()
    url = make_database()
    migrate.upgrade(url)
    done = _wsrl(
        test_settings, "eval", "--limit", "2", "--timeout", "20",
        database_url=url, redis_url=f"redis://127.0.0.1:{port}/0", env_url=generated_env_server.url,
    )  # fmt: skip
    _assert_one_clear_error(done, "cannot connect to Redis", "WSRL_REDIS_URL")
    assert time.monotonic() - started < 60
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.scalar(select(func.count()).select_from(Rollout)) == 0
    finally:
        engine.dispose()


def test_enqueue_without_a_split_or_goals_is_a_usage_error(test_settings: Settings) -> None:
    """It synced the env server's goals, then said "give goal_ids or split" (the API's
    field names)."""
    done = _wsrl(test_settings, "enqueue", "--count", "2", env_url="http://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "give --split (train, test or eval) or --goal-ids" in done.stderr


def test_local_training_with_postgres_down_stops_before_bootstrapping(
    test_settings: Settings, tmp_path: Path
) -> None:
    """It bootstrapped the tiny policy first (seconds when the shipped one is copied, about
    10 minutes when it is rebuilt) and only then failed on the database."""
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/nowhere"
    done = _wsrl(
        test_settings, "train", "--backend", "local", "--no-enqueue",
        database_url=url, data_dir=tmp_path,
    )  # fmt: skip
    _assert_one_clear_error(done, "the preflight failed")
    assert "Postgres" in done.stdout and f"port {port} failed" in done.stdout, done.stdout
    assert "env server" not in done.stdout  # --no-enqueue: the trainer does not call it
    assert not tiny_policy_path(tmp_path).exists()
