"""Preflight checks of a training run, each failure with its fix (``wsrl doctor``, and
``wsrl train`` before a backend's minutes of start-up).

:class:`Check` is one finding; :func:`check` runs a probe into one; :func:`service_checks`
are those every backend needs (Postgres migrated with goals, Redis, the env server). A
backend adds its own (``trainer/backends/<name>/``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.exc import ProgrammingError

from app.core.redis_client import connect_redis
from app.db.models import Goal
from app.db.session import make_engine

POSTGRES_FIX = (
    "start it (make services, or the postgres Compose service), set WSRL_DATABASE_URL, "
    "then `wsrl db upgrade`"
)
REDIS_FIX = "start it (make services, or the redis Compose service), set WSRL_REDIS_URL"


@dataclass(frozen=True)
class Check:
    """One preflight finding; ``fix`` says what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def check(name: str, probe: Callable[[], str], fix: str) -> Check:
    """Run ``probe`` (its return value is the detail); any exception is a failure."""
    try:
        return Check(name, True, probe())
    except Exception as exc:  # a preflight reports every failure, whatever it is
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)


def service_checks(
    settings: Any,
    split: str,
    only: Collection[str] | None = None,
    *,
    environment: str,
    env_probe: tuple[Callable[[], str], str],
) -> list[Check]:
    """Postgres (migrated, goals present), Redis and the env server reachable; ``only``:
    the names of the checks to run (``Postgres``, ``Redis``, ``env server``, ``goals``).
    ``environment``: whose goals count; ``env_probe``: (probe, fix) of its env server
    (:meth:`app.environments.Environment.env_probe`)."""

    def postgres() -> str:
        engine = make_engine(settings)
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        finally:
            engine.dispose()
        return "reachable"

    def goals() -> str:
        engine = make_engine(settings)
        try:
            with engine.connect() as connection:
                count = connection.scalar(
                    select(func.count())
                    .select_from(Goal)
                    .where(Goal.split == split, Goal.environment == environment)
                )
        except ProgrammingError as exc:
            raise LookupError("the database is not migrated: run `wsrl db upgrade`") from exc
        finally:
            engine.dispose()
        if not count:
            raise LookupError(f"no {split!r} {environment} goals in Postgres")
        return f"{count} {split!r} {environment} goals"

    def redis() -> str:
        client = connect_redis(settings, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()
        return "reachable"

    probes: list[tuple[str, Callable[[], str], str]] = [
        ("Postgres", postgres, POSTGRES_FIX),
        ("Redis", redis, REDIS_FIX),
        ("env server", *env_probe),
        (
            "goals",
            goals,
            "`wsrl enqueue --split SPLIT --count 1` or `wsrl export goals` loads them from "
            "the env server (the trainer does too on its first request)",
        ),
    ]
    return [check(*probe) for probe in probes if only is None or probe[0] in only]
