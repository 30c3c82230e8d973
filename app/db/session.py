"""Engines and sessions, built from :class:`~app.config.Settings` on demand (never at import)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db.types import jsonb_dumps

DATABASE_DOWN = (OperationalError, InterfaceError)
"""What a statement raises while the database does not answer (stopped, restarting,
unreachable): callers wait it out rather than fail."""

PING_IDLE_S = 1.0
"""A pooled connection unused for longer than this is pinged before it is handed out."""


def make_engine(settings: Settings, **kwargs: object) -> Engine:
    """An engine for the configured (or embedded) database; ``kwargs`` go to ``create_engine``.

    A connection that waited in the pool for more than :data:`PING_IDLE_S` is pinged at
    checkout (``SELECT 1``), and a failed ping discards every pooled connection, so that a
    process survives a database restart (``wsrl services stop``/``start`` under a running
    worker). A connection used within the last second is not: under load that ping was a
    round trip per transaction (0.4 ms of a worker's CPU). Should one be dead anyway (the
    server restarted within that second), its first statement fails as a disconnect,
    which discards the pool too, and the caller's retry gets a new connection.

    JSON values are written by :func:`~app.db.types.jsonb_dumps` (orjson, NUL-free).
    """
    kwargs.setdefault("json_serializer", jsonb_dumps)
    engine = create_engine(settings.resolved_database_url(), **kwargs)
    _ping_when_idle(engine, PING_IDLE_S)
    return engine


def _ping_when_idle(engine: Engine, idle_s: float) -> None:
    @event.listens_for(engine, "checkin")
    def checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("idle_since")  # cleared with the connection: None when new
        if since is None or time.monotonic() - since <= idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise exc.InvalidatePoolError(f"ping failed: {error}") from error


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (objects stay readable)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session] | Engine) -> Iterator[Session]:
    """One transaction: commits when the block ends normally, rolls back on an exception."""
    maker = factory if isinstance(factory, sessionmaker) else make_sessionmaker(factory)
    session = maker()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
