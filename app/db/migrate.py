"""Alembic, run from Python: the ``wsrl db`` commands and the tests use these functions.

The migrations are found next to the installed package (``migrations`` is packaged with
the project), falling back to the source tree's ``migrations/`` for an editable install
made before it was a package; no ``alembic.ini`` is needed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, pool

import app


class MigrationError(RuntimeError):
    """A migration command that cannot run (unknown revision, nothing to downgrade)."""


def migrations_dir() -> Path:
    spec = importlib.util.find_spec("migrations")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / "env.py").exists():
                return Path(location)
    source_tree = Path(app.__file__).resolve().parent.parent / "migrations"
    if (source_tree / "env.py").exists():
        return source_tree
    raise MigrationError("Alembic migrations not found: reinstall webshop-rl")


def alembic_config(database_url: str) -> Config:
    """A Config whose env.py connects to ``database_url`` (see ``migrations/env.py``)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    _run(command.upgrade, database_url, revision)


def downgrade(database_url: str, revision: str = "-1") -> None:
    """Go down to ``revision`` (default one step; ``base`` removes everything)."""
    if revision.startswith("-") and current_revision(database_url) is None:
        raise MigrationError("The database is at base already: nothing to downgrade.")
    _run(command.downgrade, database_url, revision)


def current_revision(database_url: str) -> str | None:
    """The revision the database is at; None for an empty (base) database."""
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    if head is None:
        raise MigrationError("No migrations found")
    return head


def _run(operation: object, database_url: str, revision: str) -> None:
    try:
        operation(alembic_config(database_url), revision)  # type: ignore[operator]
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc
