"""Read-only SQL for people (``wsrl sql``): a query can look at everything, change nothing.

Four fences. It logs in as ``wsrl_readonly`` (a login role since migration 0002, with
SELECT grants only and no memberships), so there is no more powerful role to switch back
to: an earlier design connected as the owner and ran ``SET LOCAL ROLE``, which a query
could undo with ``set_config('role', 'none', true)``. The transaction is ``READ ONLY``
and rolled back. A statement timeout (30 s by default) bounds it. The statement is sent
with the extended query protocol, which refuses several statements in one string, so a
``COMMIT; DELETE ...`` cannot step out of the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors
from psycopg import sql as pgsql
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


def libpq_url(database_url: str, *, user: str | None = None, password: str | None = None) -> str:
    """The SQLAlchemy URL as psycopg takes it (without ``+psycopg``), as ``user`` if given.

    With another ``user`` the URL's password is dropped unless ``password`` is given: the
    owner's password is not the read-only role's.
    """
    url = make_url(database_url).set(drivername="postgresql")
    if user is not None:
        url = url.set(username=user, password=password)
    return url.render_as_string(hide_password=False)


def run_readonly(
    database_url: str,
    sql: str,
    *,
    timeout_s: float = 30.0,
    user: str = READONLY_ROLE,
    password: str | None = None,
) -> QueryResult:
    """Run one statement as ``user`` in a read-only transaction that is rolled back.

    ``database_url`` names the server and database (its user is replaced by ``user``).
    Returns the rows (empty for a statement without); raises :class:`ReadOnlyViolation`
    for a write and :class:`QueryError` for anything else, the timeout included.
    """
    try:
        conn = psycopg.connect(
            libpq_url(database_url, user=user, password=password),
            autocommit=True,
            cursor_factory=psycopg.RawCursor,
        )
    except psycopg.OperationalError as exc:
        message = _first_line(exc)
        if "not permitted to log in" in message or f'role "{user}" does not exist' in message:
            message += "; the database is not migrated: run `wsrl db upgrade`"
        raise QueryError(f"cannot connect to the database as {user}: {message}") from exc
    with conn:
        conn.execute("BEGIN TRANSACTION READ ONLY")
        try:
            conn.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
            cursor = conn.cursor()
            try:
                cursor.execute(sql, (), binary=True)
            except (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege) as exc:
                raise ReadOnlyViolation(
                    f"Refused: `wsrl sql` is read-only ({_first_line(exc)}). Nothing was changed."
                ) from exc
            except errors.QueryCanceled as exc:
                raise QueryError(
                    f"{_first_line(exc)} (limit {timeout_s:g}s: WSRL_SQL_STATEMENT_TIMEOUT_S "
                    "or --timeout)"
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


def set_readonly_password(database_url: str, password: str, user: str = READONLY_ROLE) -> None:
    """Give the read-only role a password (for servers that ask for one); run as the owner."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute(
            pgsql.SQL("ALTER ROLE {} PASSWORD {}").format(
                pgsql.Identifier(user), pgsql.Literal(password)
            )
        )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
