"""The verl backend's Postgres feed: goals on a fresh database, resume after a restart.

The feed runs inside verl's Ray task runner on a GPU box; here it talks to real Postgres,
Redis (the Celery broker) and an env server over HTTP, exactly as it would there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from sqlalchemy import func, select

from app.config import Settings
from app.core.endpoint import PolicyEndpoint, publish_policy, withdraw_policy
from app.core.enqueue import EnqueueError
from app.core.env_client import EnvError
from app.db.models import Goal, Rollout, TrainStep
from app.db.session import session_scope
from app.webshop.catalog_gen import write_catalog
from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app as create_env_app
from app.webshop.server.runner import RunningServer, serve_in_thread
from trainer.batches import Selection
from trainer.loop import commit_step
from trainer.rollout_feed import PostgresRolloutFeed


@pytest.fixture(scope="module")
def env_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root: Path = tmp_path_factory.mktemp("feed-env")
    write_catalog(root / "data", 120, seed=0)
    env = WebShopEnv.load(data_dir=root / "data", goals="synthetic", cache_dir=root / "cache")
    with serve_in_thread(create_env_app(env)) as running:
        yield running


@pytest.fixture
def feed_settings(fresh_settings: Settings, env_server: RunningServer) -> Settings:
    """A freshly migrated, empty database of this test alone; the env server above."""
    return fresh_settings.model_copy(update={"env_url": env_server.url})


def test_first_request_on_a_fresh_database_loads_the_goals(feed_settings: Settings) -> None:
    feed = PostgresRolloutFeed(feed_settings)
    try:
        feed.request_groups(2, 3, "test")  # a small catalog's goals are all test goals
        with session_scope(feed.sessions) as session:
            goals = session.scalar(select(func.count()).select_from(Goal))
            rollouts = session.scalar(select(func.count()).select_from(Rollout))
        assert goals and goals > 0
        assert rollouts == 6
    finally:
        feed.engine.dispose()


def test_no_env_server_and_no_goals_is_a_clear_error(feed_settings: Settings) -> None:
    settings = feed_settings.model_copy(update={"env_url": "http://127.0.0.1:9"})
    feed = PostgresRolloutFeed(settings)
    try:
        with pytest.raises(EnvError, match="cannot read goals"):
            feed.request_groups(1, 2, "test")
    finally:
        feed.engine.dispose()


def test_a_split_the_env_server_lacks_is_a_clear_error(feed_settings: Settings) -> None:
    feed = PostgresRolloutFeed(feed_settings)
    try:
        with pytest.raises(EnqueueError, match="has no 'nowhere' goals"):
            feed.request_groups(1, 2, "nowhere")
    finally:
        feed.engine.dispose()


def test_resume_after_a_restart_between_checkpoints(feed_settings: Settings) -> None:
    """Steps 1-3 committed and versions up to 3 published, the last checkpoint at step 2:
    the next step is 4 and the weights are served as a version above 3 (it was a primary
    key violation and a version going back)."""
    feed = PostgresRolloutFeed(feed_settings)
    redis = Redis.from_url(feed_settings.resolved_redis_url())
    try:
        assert feed.resume(None) == (0, 0)  # a first start: step 0, version 0
        with session_scope(feed.sessions) as session:
            for step in (1, 2, 3):
                commit_step(session, step, step, [], Selection(), {})
                publish_policy(session, redis, PolicyEndpoint("http://x/v1", "policy", step))
        step, version = feed.resume(2)
        assert (step, version) == (3, 4)
        with session_scope(feed.sessions) as session:
            commit_step(session, step + 1, version, [], Selection(), {})
            assert session.scalar(select(func.max(TrainStep.step))) == 4
        assert feed.resume(4) == (4, 4)  # nothing above 4 published: the same weights, again
    finally:
        with session_scope(feed.sessions) as session:
            withdraw_policy(session, redis)
        redis.close()
        feed.engine.dispose()
