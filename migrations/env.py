"""Alembic environment: the URL comes from Settings (or from the caller), types are compared.

Callers may pass an open connection in ``config.attributes["connection"]`` or a URL in
``config.attributes["database_url"]`` (:mod:`app.db.migrate` does); otherwise the URL
is the ``sqlalchemy.url`` option when set, else ``get_settings().resolved_database_url()``
(the configured or the embedded database).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from app.config import get_settings
from app.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        compare_server_default=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    return (
        config.attributes.get("database_url")
        or config.get_main_option("sqlalchemy.url")
        or get_settings().resolved_database_url()
    )


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
