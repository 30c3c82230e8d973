"""Fixtures of the API tests: the app on the session's Postgres + Redis, rows, servers.

``client`` drives the app in-process (``TestClient``: lifespan and all, no socket);
``api_server`` serves it with a real uvicorn on a free 127.0.0.1 port. Rows that the app
must see are committed through ``db_engine`` with ids unique to each test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers.api_rows import TOKEN, Rows, fresh_version
from sqlalchemy import Engine

from app.api.main import create_app
from app.config import Settings
from app.core.endpoint import PolicyEndpoint, publish_endpoint, withdraw_endpoint
from app.db.lifecycle import RolloutStatus
from app.scripted_llm import create_app as create_scripted_llm
from app.webshop.server.runner import RunningServer, serve_in_thread


@pytest.fixture(scope="session")
def api_settings(test_settings: Settings) -> Settings:
    """The test services, a known token, short LLM timeouts and no fallback endpoint."""
    return test_settings.model_copy(
        update={"api_token": TOKEN, "llm_timeout_s": 5.0, "llm_base_url": None}
    )


@pytest.fixture
def redis_client(api_settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(api_settings.resolved_redis_url())
    yield client
    client.close()


@pytest.fixture
def no_endpoint(redis_client: redis.Redis) -> Iterator[None]:
    """No policy endpoint published, before and after the test."""
    withdraw_endpoint(redis_client)
    yield
    withdraw_endpoint(redis_client)


@pytest.fixture
def api_app(api_settings: Settings) -> FastAPI:
    return create_app(api_settings)


@pytest.fixture
def client(api_app: FastAPI) -> Iterator[TestClient]:
    with TestClient(api_app) as test_client:
        yield test_client


@pytest.fixture
def api_server(api_app: FastAPI) -> Iterator[RunningServer]:
    with serve_in_thread(api_app) as running:
        yield running


@pytest.fixture
def rows(db_engine: Engine) -> Rows:
    return Rows(db_engine)


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[RunningServer]:
    """The scripted LLM server (rule policy) the gateway forwards to."""
    with serve_in_thread(create_scripted_llm("rule", None)) as running:
        yield running


@pytest.fixture
def version(
    scripted_llm: RunningServer, redis_client: redis.Redis, no_endpoint: None, db_engine: Engine
) -> int:
    """The scripted server published as a fresh policy version, above every recorded one
    (versions only go up)."""
    number = fresh_version(db_engine)
    publish_endpoint(redis_client, PolicyEndpoint(f"{scripted_llm.url}/v1", "policy", number))
    return number


@pytest.fixture
def attempt(rows: Rows) -> tuple[uuid.UUID, int]:
    """A running rollout with its running attempt 1: (rollout id, attempt row id)."""
    rollout = rows.rollout(status=RolloutStatus.RUNNING)
    return rollout, rows.attempt(rollout, 1)
