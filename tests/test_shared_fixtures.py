"""The shared fixtures of tests/conftest.py do what they promise other tests."""

from __future__ import annotations

import os

import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.models import Goal


def test_settings_point_at_the_test_services(
    test_settings: Settings, database_url: str, redis_url: str
) -> None:
    assert test_settings.resolved_database_url() == database_url
    assert test_settings.resolved_redis_url() == redis_url
    assert test_settings.data_dir.is_dir()


def test_redis_db_is_claimed_and_not_db_0(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    index = client.connection_pool.connection_kwargs.get("db", 0)
    if os.environ.get("WSRL_TEST_REDIS_URL"):
        assert index != 0
        claims = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/0")
        owner = claims.get(f"wsrl:test-db-claim:{index}")
        assert owner is not None and f":{os.getpid()}:" in owner.decode()
    client.set("wsrl:test:probe", "1")
    assert client.get("wsrl:test:probe") == b"1"
    client.delete("wsrl:test:probe")


def test_db_session_commit_is_rolled_back_after_the_test(db_session: Session) -> None:
    db_session.add(Goal(id=987_654_321, split="test", instruction="probe", spec={"asin": "P"}))
    db_session.commit()
    assert db_session.get(Goal, 987_654_321) is not None


def test_previous_test_left_no_row(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM goals WHERE id = 987654321")).scalar()
    assert count == 0
