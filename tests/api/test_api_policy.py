"""GET/PUT /v1/policy: the endpoint in Redis, the settings' fallback, policy_versions rows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH, fresh_version
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.api.main import create_app
from app.config import Settings
from app.core.endpoint import EndpointStatus, read_endpoint
from app.db.models import PolicyVersion


@pytest.fixture
def version(db_engine: Engine) -> int:
    """A version number no other test uses (the session shares one database), above every
    recorded one (versions only go up)."""
    return fresh_version(db_engine)


def _row(engine: Engine, version: int) -> PolicyVersion | None:
    with Session(engine) as session:
        return session.get(PolicyVersion, version)


def test_get_without_endpoint_404(client: TestClient, no_endpoint: None) -> None:
    response = client.get("/v1/policy")
    assert response.status_code == 404
    assert "no policy endpoint" in response.json()["detail"]


def test_get_falls_back_to_settings(api_settings: Settings, no_endpoint: None) -> None:
    settings = api_settings.model_copy(
        update={"llm_base_url": "http://127.0.0.1:9999/v1", "llm_model": "fallback"}
    )
    app: FastAPI = create_app(settings)
    with TestClient(app) as client:
        body = client.get("/v1/policy").json()
    assert body == {
        "base_url": "http://127.0.0.1:9999/v1",
        "model": "fallback",
        "version": 0,
        "status": "serving",
        "source": "settings",
        "protocol": None,  # the workers play their own settings
        "base_model": None,  # whole weights
    }


def test_put_publishes_and_records_active_version(
    client: TestClient,
    redis_client: redis.Redis,
    db_engine: Engine,
    no_endpoint: None,
    version: int,
) -> None:
    body = {
        "base_url": "http://127.0.0.1:8001/v1/",
        "model": "qwen",
        "version": version,
        "checkpoint": "/ckpt/step-1",
    }
    response = client.put("/v1/policy", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json()["base_url"] == "http://127.0.0.1:8001/v1"
    published = read_endpoint(redis_client)
    assert published is not None
    assert (published.base_url, published.model, published.version) == (
        "http://127.0.0.1:8001/v1",
        "qwen",
        version,
    )
    assert published.status == EndpointStatus.SERVING
    assert client.get("/v1/policy").json()["source"] == "redis"
    row = _row(db_engine, version)
    assert row is not None
    assert (row.status.value, row.model, row.checkpoint) == ("active", "qwen", "/ckpt/step-1")


def test_a_lora_version_names_its_adapter_and_its_base(
    client: TestClient,
    redis_client: redis.Redis,
    db_engine: Engine,
    no_endpoint: None,
    version: int,
) -> None:
    """A LoRA run's version: ``model`` the adapter the server serves, ``checkpoint`` the
    adapter's folder, ``base_model`` the weights under it; in Redis, in Postgres, in the
    API, and in the endpoint restored from Postgres (a flushed Redis)."""
    from app.core.endpoint import recorded_endpoint

    body = {
        "base_url": "http://127.0.0.1:8001/v1",
        "model": "policy",
        "version": version,
        "checkpoint": "/ckpt/step-3",
        "base_model": "/models/smollm2-135m",
    }
    response = client.put("/v1/policy", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json()["base_model"] == "/models/smollm2-135m"
    published = read_endpoint(redis_client)
    assert published is not None and published.base_model == "/models/smollm2-135m"
    row = _row(db_engine, version)
    assert row is not None and (row.checkpoint, row.base_model) == (
        "/ckpt/step-3",
        "/models/smollm2-135m",
    )
    listed = client.get("/v1/policy/versions").json()
    assert listed[0]["base_model"] == "/models/smollm2-135m"
    with Session(db_engine) as session:
        restored = recorded_endpoint(session)
    assert restored is not None and restored.base_model == "/models/smollm2-135m"


def test_put_newer_version_retires_older_and_old_is_409(
    client: TestClient, db_engine: Engine, no_endpoint: None, version: int
) -> None:
    base = {"base_url": "http://127.0.0.1:8001/v1", "model": "m"}
    assert client.put("/v1/policy", json={**base, "version": version}, headers=AUTH).is_success
    assert client.put("/v1/policy", json={**base, "version": version + 1}, headers=AUTH).is_success
    old, new = _row(db_engine, version), _row(db_engine, version + 1)
    assert old is not None and new is not None
    assert (old.status.value, new.status.value) == ("retired", "active")
    response = client.put("/v1/policy", json={**base, "version": version}, headers=AUTH)
    assert response.status_code == 409
    assert "retired" in response.json()["detail"]
    assert client.get("/v1/policy").json()["version"] == version + 1


def test_put_a_new_version_below_the_highest_recorded_is_409(
    client: TestClient, db_engine: Engine, no_endpoint: None, version: int
) -> None:
    base = {"base_url": "http://127.0.0.1:8001/v1", "model": "m"}
    assert client.put("/v1/policy", json={**base, "version": version + 5}, headers=AUTH).is_success
    response = client.put("/v1/policy", json={**base, "version": version + 2}, headers=AUTH)
    assert response.status_code == 409
    assert "versions only go up" in response.json()["detail"]
    assert _row(db_engine, version + 2) is None
    assert client.get("/v1/policy").json()["version"] == version + 5


def test_put_paused_then_serving(
    client: TestClient,
    db_engine: Engine,
    redis_client: redis.Redis,
    no_endpoint: None,
    version: int,
) -> None:
    base = {"base_url": "http://127.0.0.1:8001/v1", "model": "m", "version": version}
    response = client.put("/v1/policy", json={**base, "status": "paused"}, headers=AUTH)
    assert response.json()["status"] == "paused"
    row = _row(db_engine, version)
    assert row is not None and row.status.value == "syncing"
    assert client.get("/v1/policy").json()["status"] == "paused"
    client.put("/v1/policy", json=base, headers=AUTH).raise_for_status()
    row = _row(db_engine, version)
    assert row is not None and row.status.value == "active"
    published = read_endpoint(redis_client)
    assert published is not None and published.serving


def test_versions_listed_newest_first(client: TestClient, no_endpoint: None, version: int) -> None:
    base = {"base_url": "http://127.0.0.1:8001/v1", "model": "m"}
    client.put("/v1/policy", json={**base, "version": version}, headers=AUTH).raise_for_status()
    listed = client.get("/v1/policy/versions").json()
    versions = [v["version"] for v in listed]
    assert version in versions
    assert versions == sorted(versions, reverse=True)


@pytest.mark.parametrize(
    "body",
    [
        {"base_url": "not a url", "model": "m", "version": 1},
        {"base_url": "http://x/v1", "model": "", "version": 1},
        {"base_url": "http://x/v1", "model": "m", "version": -1},
        {"base_url": "http://x/v1", "model": "m", "version": 1, "status": "asleep"},
        {"base_url": "http://x/v1", "model": "m"},
        {"base_url": "http://x/v1", "model": "m", "version": False},
        {"base_url": "http://x/v1", "model": "m", "version": "1"},
        {"base_url": "http://x/v1", "model": "m", "version": 2**31},
    ],
)
def test_put_bad_body_422(client: TestClient, body: dict, no_endpoint: None) -> None:
    response = client.put("/v1/policy", json=body, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"]


@pytest.fixture
def broken_redis_client(api_settings: Settings) -> Iterator[TestClient]:
    from helpers.processes import free_port

    settings = api_settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(settings)) as client:
        yield client


def test_get_with_redis_down_503(broken_redis_client: TestClient) -> None:
    response = broken_redis_client.get("/v1/policy")
    assert response.status_code == 503
    assert "cannot read the policy endpoint" in response.json()["detail"]


def test_the_protocol_a_trainer_published_is_shown(
    client: TestClient,
    redis_client: redis.Redis,
    db_engine: Engine,
    no_endpoint: None,
    version: int,
) -> None:
    from app.core.agent import AgentMode, AgentProtocol
    from app.core.endpoint import PolicyEndpoint, publish_policy

    protocol = AgentProtocol(
        AgentMode.TOOLS, history_steps=4, constrain_actions=False, max_steps=15
    )
    endpoint = PolicyEndpoint("http://127.0.0.1:8001/v1", "qwen", version, protocol=protocol)
    with Session(db_engine) as session, session.begin():
        publish_policy(session, redis_client, endpoint)
    assert client.get("/v1/policy").json()["protocol"] == protocol.to_dict()
    listed = {v["version"]: v for v in client.get("/v1/policy/versions").json()}
    assert listed[version]["protocol"] == protocol.to_dict()


def test_put_with_a_protocol_publishes_it_for_the_workers(
    client: TestClient,
    redis_client: redis.Redis,
    db_engine: Engine,
    no_endpoint: None,
    version: int,
) -> None:
    """An endpoint served outside our trainer (your own vLLM) names how it is played, as a
    trainer's publication does: the workers' record in Redis and the version's row."""
    from app.core.agent import AgentMode, AgentProtocol

    given = {"mode": "text", "history_steps": 1, "constrain_actions": True, "max_steps": 12}
    body = {"base_url": "http://127.0.0.1:8001/v1", "model": "qwen", "version": version}
    response = client.put("/v1/policy", json={**body, "protocol": given}, headers=AUTH)
    assert response.status_code == 200, response.text
    protocol = {**given, "result_refs": "ids"}  # results named as the original's pages do
    assert response.json()["protocol"] == protocol
    published = read_endpoint(redis_client)
    assert published is not None
    assert published.protocol == AgentProtocol(AgentMode.TEXT, 1, True, 12)
    assert client.get("/v1/policy").json()["protocol"] == protocol
    assert _row(db_engine, version).protocol == protocol


@pytest.mark.parametrize(
    "protocol",
    [
        {"mode": "text", "history_steps": 1, "constrain_actions": True},  # max_steps missing
        {"mode": "html", "history_steps": 1, "constrain_actions": True, "max_steps": 12},
        {"mode": "text", "history_steps": -1, "constrain_actions": True, "max_steps": 12},
        {"mode": "text", "history_steps": 1, "constrain_actions": True, "max_steps": 0},
        {"mode": "text", "history_steps": "1", "constrain_actions": True, "max_steps": 12},
        {"mode": "text", "history_steps": 1, "constrain_actions": "yes", "max_steps": 12},
        {"mode": "text", "history_steps": 1, "constrain_actions": True, "max_steps": 12, "x": 1},
        {
            "mode": "text",
            "history_steps": 1,
            "constrain_actions": True,
            "max_steps": 12,
            "result_refs": "titles",
        },
    ],
)
def test_put_with_a_bad_protocol_is_422_and_publishes_nothing(
    client: TestClient,
    redis_client: redis.Redis,
    db_engine: Engine,
    protocol: dict,
    no_endpoint: None,
    version: int,
) -> None:
    body = {"base_url": "http://x/v1", "model": "m", "version": version, "protocol": protocol}
    response = client.put("/v1/policy", json=body, headers=AUTH)
    assert response.status_code == 422
    assert "protocol" in str(response.json()["detail"])
    assert read_endpoint(redis_client) is None
    assert _row(db_engine, version) is None
