"""Command groups of the ``wsrl`` CLI, one module per group.

Each module defines ``register(cli: typer.Typer) -> None``. Modules import heavy
dependencies (torch, transformers, the catalog) inside their commands, so that
``wsrl --help`` stays instant and an install without the ``train`` extra still works.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def fail(message: object, code: int = 1) -> typer.Exit:
    """Print ``Error: message`` on stderr; the exit (status 1, or ``code``: 2 for a usage
    error such as a flag the command cannot honour) for the caller to raise."""
    err_console.print(f"[red]Error:[/red] {message}")
    return typer.Exit(code)


@contextlib.contextmanager
def database_session() -> Iterator[Session]:
    """One transaction on the configured database for a command (committed at the end),
    on an engine disposed after it; embedded services that are not running are an
    ``Error:`` line with the fix."""
    from app.config import ServicesNotRunningError, get_settings
    from app.db.session import make_engine, make_sessionmaker, session_scope

    try:
        engine = make_engine(get_settings())
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            yield session
    finally:
        engine.dispose()


def service_failure(exc: BaseException) -> str | None:
    """What to tell the user when a command stopped because Postgres or Redis could not be
    reached or the database is not migrated (``Error: ...`` and the fix), else None.

    Only failures to connect (at the start, or when an outage outlasted a command's
    retries) and a schema older than the code count; any other error keeps its
    traceback, and ``WSRL_LOG_LEVEL=DEBUG`` logs this one's. A failure to connect is told
    by where it was raised, not by the driver's wording: for Postgres, outside any
    statement and without a server's error code (a refused or timed-out connection, a
    host that does not resolve, a port where another server listens); for Redis, a
    broken or refused connection, a reply that is not Redis', or an error answered to the
    connection's own handshake (``AUTH``, ``SELECT`` of a database the server lacks).
    """
    import psycopg.errors
    from kombu.exceptions import OperationalError as BrokerError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import InvalidResponse, RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from sqlalchemy.exc import ProgrammingError

    from app.core.preflight import POSTGRES_FIX, REDIS_FIX
    from app.db.session import DATABASE_DOWN

    for error in _chain(exc):
        reason = escape(" ".join(str(getattr(error, "orig", error)).split()))
        if (
            isinstance(error, DATABASE_DOWN)
            and error.statement is None
            and getattr(error.orig, "sqlstate", None) is None
        ):
            reason = reason.removeprefix("connection failed: ")
            return f"cannot connect to Postgres: {reason}\n{_fix(POSTGRES_FIX)}"
        if isinstance(error, ProgrammingError) and isinstance(
            error.orig, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn
        ):
            return (
                f"the database's schema is older than this wsrl ({reason.split(' LINE ')[0]})\n"
                + _fix("`wsrl db upgrade`")
            )
        if isinstance(
            error, RedisConnectionError | RedisTimeoutError | InvalidResponse | BrokerError
        ) or (isinstance(error, RedisError) and _raised_while_connecting(error)):
            return f"cannot connect to Redis: {reason}\n{_fix(REDIS_FIX)}"
    return None


def _raised_while_connecting(error: BaseException) -> bool:
    """Whether redis-py raised ``error`` while it set a connection up (its handshake's
    ``AUTH``, ``SELECT``, ``HELLO``), not in answer to a command."""
    traceback = error.__traceback__
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if code.co_name.startswith(("connect", "on_connect")) and code.co_filename.endswith(
            f"redis{os.sep}connection.py"
        ):
            return True
        traceback = traceback.tb_next
    return False


def _fix(text: str) -> str:
    return f"[bold]Fix:[/bold] {text}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
