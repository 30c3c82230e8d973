"""Engines and sessions, built from :class:`~app.config.Settings` on demand (never at import)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings


def make_engine(settings: Settings, **kwargs: object) -> Engine:
    """An engine for the configured (or embedded) database; ``kwargs`` go to ``create_engine``.

    ``pool_pre_ping`` is on so that a process survives a database restart (for example
    ``wsrl services stop``/``start`` under a running worker).
    """
    options: dict[str, object] = {"pool_pre_ping": True}
    options.update(kwargs)
    return create_engine(settings.resolved_database_url(), **options)


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
