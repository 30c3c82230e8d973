"""Read-only SQL for people (``wsrl sql``): a query can look at everything, change nothing.

Three fences: the transaction is ``READ ONLY``, it runs as the role ``wsrl_readonly``
(SELECT privileges only, created by the initial migration), and it is rolled back. The
statement is sent with the extended query protocol, which refuses several statements in
one string, so a ``COMMIT; DELETE ...`` cannot step out of the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors
from sqlalchemy.engine import make_url

READONLY_ROLE = "wsrl_readonly"


class ReadOnlyViolation(RuntimeError):
    """The statement tried to change something; nothing was changed."""


class QueryError(RuntimeError):
    """The statement failed for another reason (syntax, unknown table, ...)."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as psycopg takes it (without ``+psycopg``)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def run_readonly(database_url: str, sql: str, timeout_s: float = 300.0) -> QueryResult:
    """Run one statement read-only and return its rows (empty for a statement without)."""
    try:
        conn = psycopg.connect(
            libpq_url(database_url), autocommit=True, cursor_factory=psycopg.RawCursor
        )
    except psycopg.OperationalError as exc:
        raise QueryError(f"cannot connect to the database: {_first_line(exc)}") from exc
    with conn:
        conn.execute("BEGIN TRANSACTION READ ONLY")
        try:
            try:
                conn.execute(f"SET LOCAL ROLE {READONLY_ROLE}")
            except psycopg.Error as exc:
                raise QueryError(
                    f"{_first_line(exc)}: the database is not migrated; run `wsrl db upgrade`"
                ) from exc
            conn.execute(f"SET LOCAL statement_timeout = {int(timeout_s * 1000)}")
            cursor = conn.cursor()
            try:
                cursor.execute(sql, (), binary=True)
            except (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege) as exc:
                raise ReadOnlyViolation(
                    f"Refused: `wsrl sql` is read-only ({_first_line(exc)}). Nothing was changed."
                ) from exc
            except errors.UndefinedTable as exc:
                raise QueryError(
                    f"{_first_line(exc)} (is the database migrated? `wsrl db upgrade`)"
                ) from exc
            except psycopg.Error as exc:
                raise QueryError(_first_line(exc)) from exc
            if cursor.description is None:
                return QueryResult([], [])
            columns = [column.name for column in cursor.description]
            return QueryResult(columns, list(cursor.fetchall()))
        finally:
            if not conn.closed:
                conn.execute("ROLLBACK")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
