"""Goals on a fresh database: a trainer's first start loads the env server's goals, with a
clear error when it has none of the split or cannot be reached (real Postgres, real env
server over HTTP)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import func, select

from app.config import Settings
from app.core.enqueue import EnqueueError
from app.core.env_client import EnvError
from app.db import migrate
from app.db.models import Goal
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import ensure_goals, sync_goals
from app.webshop.server.runner import RunningServer


@pytest.fixture
def empty_db(
    make_database: Callable[[], str], test_settings: Settings, generated_env_server: RunningServer
) -> Iterator[tuple[Settings, object]]:
    """A freshly migrated, empty database of this test alone; the env server of the
    generated catalog (``generated_env_server``)."""
    url = make_database()
    migrate.upgrade(url)
    env_url = generated_env_server.url
    settings = test_settings.model_copy(update={"database_url": url, "env_url": env_url})
    engine = make_engine(settings)
    yield settings, make_sessionmaker(engine)
    engine.dispose()


def test_a_fresh_database_gets_the_env_servers_goals_once(empty_db) -> None:
    settings, sessions = empty_db
    with session_scope(sessions) as session:
        added = ensure_goals(session, settings, "test")  # a small catalog's goals are test goals
    with session_scope(sessions) as session:
        assert added > 0 and session.scalar(select(func.count()).select_from(Goal)) == added
        assert ensure_goals(session, settings, "test") == 0


def test_no_env_server_and_no_goals_is_a_clear_error(empty_db) -> None:
    settings, sessions = empty_db
    settings = settings.model_copy(update={"env_url": "http://127.0.0.1:9"})
    with (
        pytest.raises(EnvError, match=r"env server http://127\.0\.0\.1:9 unreachable: GET /goals"),
        session_scope(sessions) as session,
    ):
        ensure_goals(session, settings, "test")


def test_a_split_the_env_server_lacks_is_a_clear_error(empty_db) -> None:
    settings, sessions = empty_db
    with (
        pytest.raises(EnqueueError, match="has no 'nowhere' goals"),
        session_scope(sessions) as session,
    ):
        ensure_goals(session, settings, "nowhere")


def test_a_split_the_env_server_does_not_know_names_its_splits(empty_db) -> None:
    """``wsrl eval --split nonsense`` printed httpx's 422 with a link to MDN's page on HTTP
    status codes; the env client's error carries the server's word on what is valid."""
    settings, sessions = empty_db
    with (
        pytest.raises(EnvError, match=r"GET /goals -> 422: .*'test', 'eval' or 'train'"),
        session_scope(sessions) as session,
        EnvClient.from_settings(settings) as env,
    ):
        sync_goals(session, env, split="nonsense")
