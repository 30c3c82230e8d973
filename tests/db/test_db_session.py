"""The engines' pool: a connection idle past ``PING_IDLE_S`` is pinged before use; one
used within it is handed out as is (no round trip per transaction under load)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db.session import PING_IDLE_S, make_engine


def _backend_pid(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def _terminate(admin, pid: int) -> None:
    with admin.connect() as connection:
        assert connection.execute(text(f"SELECT pg_terminate_backend({pid})")).scalar_one()
    time.sleep(0.1)  # the backend exits


def test_a_connection_idle_past_the_limit_is_pinged_and_replaced(
    test_settings: Settings,
) -> None:
    engine, admin = make_engine(test_settings, pool_size=1), make_engine(test_settings)
    try:
        pid = _backend_pid(engine)
        _terminate(admin, pid)
        time.sleep(PING_IDLE_S + 0.2)
        assert _backend_pid(engine) != pid  # the ping found it dead: a new connection
    finally:
        engine.dispose()
        admin.dispose()


def test_a_connection_used_within_the_limit_is_not_pinged(test_settings: Settings) -> None:
    """The cost of skipping the ping: a server restart within the second fails the next
    transaction once, as a disconnect, and discards the pool; the caller's retry (the
    workers' outage handling) gets a new connection."""
    engine, admin = make_engine(test_settings, pool_size=1), make_engine(test_settings)
    try:
        pid = _backend_pid(engine)
        _terminate(admin, pid)
        with pytest.raises(OperationalError) as failed:
            _backend_pid(engine)
        assert failed.value.connection_invalidated
        assert _backend_pid(engine) != pid
    finally:
        engine.dispose()
        admin.dispose()
