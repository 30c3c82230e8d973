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

from app.core.env_client import EnvClient
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


def service_checks(settings: Any, split: str, only: Collection[str] | None = None) -> list[Check]:
    """Postgres (migrated, goals present), Redis and the env server reachable; ``only``:
    the names of the checks to run (``Postgres``, ``Redis``, ``env server``, ``goals``)."""

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
                    select(func.count()).select_from(Goal).where(Goal.split == split)
                )
        except ProgrammingError as exc:
            raise LookupError("the database is not migrated: run `wsrl db upgrade`") from exc
        finally:
            engine.dispose()
        if not count:
            raise LookupError(f"no {split!r} goals in Postgres")
        return f"{count} {split!r} goals"

    def redis() -> str:
        client = connect_redis(settings, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()
        return "reachable"

    def env() -> str:
        with EnvClient(settings.env_url, timeout_s=5.0) as client:
            health = client.health()  # 503 (an error here) when its tagger failed to load
        return f"{settings.env_url}: {health.get('goals')} goals, {_tagger_text(health)}"

    probes: list[tuple[str, Callable[[], str], str]] = [
        ("Postgres", postgres, POSTGRES_FIX),
        ("Redis", redis, REDIS_FIX),
        (
            "env server",
            env,
            "start it (`wsrl env serve`, or the webshop Compose service), set WSRL_ENV_URL",
        ),
        (
            "goals",
            goals,
            "`wsrl enqueue --split SPLIT --count 1` or `wsrl export goals` loads them from "
            "the env server (the trainer does too on its first request)",
        ),
    ]
    return [check(*probe) for probe in probes if only is None or probe[0] in only]


def _tagger_text(health: dict[str, Any]) -> str:
    """The reward's noun tagger as the env server's ``/health`` names it."""
    tagger = health.get("noun_tagger")
    if not isinstance(tagger, dict):
        return "reward noun tagger not reported (an env server older than this wsrl)"
    if tagger.get("exact"):
        return f"reward noun tagger {tagger.get('name')} (the original's; {tagger.get('state')})"
    return (
        f"reward noun tagger {tagger.get('name')} (approximate, chosen with "
        "WSRL_NOUN_TAGGER: rewards differ from the original's on about 1 % of purchases)"
    )
