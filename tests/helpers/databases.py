"""Scratch databases on a PostgreSQL server, for benchmarks that must not touch real data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url


def admin_url(database_url: str) -> str:
    """A libpq URL (no ``+psycopg``) for the server of ``database_url``."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(False)


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database ``<prefix>_<hex>`` on the server of ``server_url``, as a
    SQLAlchemy URL; dropped on exit, its connections closed by force."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_url(server_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
