"""The gateway's ASGI fast path and its Postgres store, against a real API, scripted LLM,
Postgres and Redis: well-formed calls skip FastAPI, everything else still gets FastAPI's
answers, and both record the same rows."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
import redis
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH, TOKEN, Rows, recorded_calls
from helpers.event_loop import api_routes, thread_pool_calls
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from app.api.deps import require_gateway_key
from app.api.routes.gateway import CHAT_ROUTE
from app.api.services.gateway_store import APPLICATION_NAME
from app.core.endpoint import PolicyEndpoint, publish_endpoint
from app.core.gateway_keys import attempt_key
from app.db.lifecycle import RolloutStatus
from app.scripted_llm import create_app as create_scripted_llm
from app.webshop.server.runner import RunningServer, serve_in_thread

BODY = {"messages": [{"role": "user", "content": "Find blue shoes under 50 dollars."}]}


def _url(rollout: uuid.UUID | str, number: int | str = 1) -> str:
    return f"/v1/gateway/rollouts/{rollout}/attempts/{number}/v1/chat/completions"


def _refuse(status_code: int) -> None:
    raise HTTPException(status_code, "went through FastAPI's dependencies")


def test_well_formed_calls_skip_fastapi_others_do_not(
    api_app: FastAPI, version: int, attempt: tuple[uuid.UUID, int], db_engine: Engine
) -> None:
    """With the route's auth dependency made to refuse, only what the fast path passes on
    (here: a rollout id without hyphens, which FastAPI accepts) reaches it."""
    rollout, attempt_id = attempt
    api_app.dependency_overrides[require_gateway_key] = lambda: _refuse(418)
    with TestClient(api_app) as client:
        fast = client.post(_url(rollout), json=BODY, headers=AUTH)
        routed = client.post(_url(rollout.hex), json=BODY, headers=AUTH)
    assert fast.status_code == 200
    assert routed.status_code == 418
    assert [c.index for c in recorded_calls(db_engine, attempt_id)] == [0]


def test_fast_path_and_route_answer_and_record_alike(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int], db_engine: Engine
) -> None:
    rollout, attempt_id = attempt
    fast = client.post(_url(rollout), json=BODY, headers=AUTH)
    routed = client.post(_url(rollout.hex), json=BODY, headers=AUTH)
    for answer, index in ((fast, 0), (routed, 1)):
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["x-wsrl-call-index"] == str(index)
        assert answer.headers["x-wsrl-policy-version"] == str(version)
        assert int(answer.headers["content-length"]) == len(answer.content)
    assert fast.json()["choices"] == routed.json()["choices"]
    calls = recorded_calls(db_engine, attempt_id)
    assert [(c.index, c.policy_version, c.trainable) for c in calls] == [
        (0, version, True),
        (1, version, True),
    ]
    assert calls[0].response_token_ids == calls[1].response_token_ids


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer "}, "missing bearer token"),
        ({"Authorization": f"Basic {TOKEN}"}, "missing bearer token"),
        ({"Authorization": f"Bearer {TOKEN}x"}, "wrong bearer token"),
        ({"Authorization": f"Bearer {TOKEN[:-1]}"}, "wrong bearer token"),
    ],
)
def test_unauthorised_calls_get_fastapis_401(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int], headers: dict, detail: str
) -> None:
    rollout, _ = attempt
    answer = client.post(_url(rollout), json=BODY, headers=headers)
    assert answer.status_code == 401
    assert detail in answer.json()["detail"]


@pytest.mark.parametrize("routed", [False, True])
def test_an_attempts_key_opens_its_own_route_only(
    client: TestClient, version: int, rows: Rows, routed: bool
) -> None:
    """The key an external agent gets works for its attempt, on the fast path and the
    FastAPI route alike, and nowhere else: not another attempt, not the rest of the API."""
    rollout = rows.rollout(status=RolloutStatus.RUNNING)
    rows.attempt(rollout, 1)
    key = {"Authorization": f"Bearer {attempt_key(TOKEN, rollout, 1)}"}
    path = rollout.hex if routed else rollout
    assert client.post(_url(path, 1), json=BODY, headers=key).status_code == 200
    other = client.post(_url(path, 2), json=BODY, headers=key)
    assert other.status_code == 401 and "wrong bearer token" in other.json()["detail"]
    assert client.put("/v1/policy", json={}, headers=key).status_code == 401


def test_attempt_keys_depend_on_the_token_and_the_attempt() -> None:
    rollout = uuid.uuid4()
    key = attempt_key(TOKEN, rollout, 1)
    assert key.startswith("wsrl-attempt-") and TOKEN not in key
    assert key == attempt_key(TOKEN, str(rollout), 1)
    assert len({key, attempt_key(TOKEN, rollout, 2), attempt_key(TOKEN + "x", rollout, 1)}) == 3


@pytest.mark.parametrize("value", [f"bearer {TOKEN}", f"Bearer  {TOKEN} ", f"BEARER {TOKEN}"])
def test_bearer_scheme_and_spacing_as_fastapi_reads_them(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int], value: str
) -> None:
    rollout, _ = attempt
    answer = client.post(_url(rollout), json=BODY, headers={"Authorization": value})
    assert answer.status_code == 200


@pytest.mark.parametrize("number", ["0", "01", "2147483648", "99999999999", "-1", "x"])
def test_malformed_attempt_numbers_get_fastapis_422(
    client: TestClient, attempt: tuple[uuid.UUID, int], number: str
) -> None:
    rollout, _ = attempt
    answer = client.post(_url(rollout, number), json=BODY, headers=AUTH)
    if number == "01":  # FastAPI reads it as attempt 1: answered by the route
        assert answer.status_code == 503  # no endpoint published in this test
    else:
        assert answer.status_code == 422


def test_fast_path_calls_are_counted_by_route(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int]
) -> None:
    rollout, _ = attempt
    client.post(_url(rollout), json=BODY, headers=AUTH).raise_for_status()
    client.post(_url(uuid.uuid4()), json=BODY, headers=AUTH)
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    counted = {
        s.labels["status"]: s.value
        for s in families["wsrl_api_requests"].samples
        if s.name == "wsrl_api_requests_total" and s.labels["route"] == CHAT_ROUTE
    }
    assert counted == {"200": 1.0, "404": 1.0}


def test_untrainable_call_recorded_with_null_tokens(
    client: TestClient,
    redis_client: redis.Redis,
    no_endpoint: None,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    rollout, attempt_id = attempt
    with serve_in_thread(create_scripted_llm("rule", None, token_ids=False)) as plain:
        publish_endpoint(redis_client, PolicyEndpoint(f"{plain.url}/v1", "plain", 4))
        client.post(_url(rollout), json=BODY, headers=AUTH).raise_for_status()
    (call,) = recorded_calls(db_engine, attempt_id)
    assert (call.trainable, call.prompt_token_ids, call.response_token_ids) == (False, None, None)
    assert call.policy_version == 4
    assert call.request_messages == BODY["messages"]


def _kill_gateway_connections(engine: Engine) -> None:
    """Terminate the gateway's Postgres backends (as a database restart would)."""
    query = text(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = :name AND datname = current_database()"
    )
    alive = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = :name AND datname = current_database()"
    )
    # Autocommit: pg_stat_activity is a snapshot per transaction.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(query, {"name": APPLICATION_NAME})
        deadline = time.monotonic() + 10
        while connection.execute(alive, {"name": APPLICATION_NAME}).scalar():
            assert time.monotonic() < deadline, "gateway backends still alive"
            time.sleep(0.05)


def test_lost_database_connections_fail_one_call_then_recover(
    api_server: RunningServer, version: int, attempt: tuple[uuid.UUID, int], db_engine: Engine
) -> None:
    rollout, attempt_id = attempt
    with httpx.Client(base_url=api_server.url, headers=AUTH, timeout=30) as http:
        http.post(_url(rollout), json=BODY).raise_for_status()
        _kill_gateway_connections(db_engine)
        lost = http.post(_url(rollout), json=BODY)
        again = http.post(_url(rollout), json=BODY)
    assert lost.status_code == 503
    assert "could not record the call" in lost.json()["detail"]
    assert again.status_code == 200
    assert again.headers["x-wsrl-call-index"] == "1"
    assert [c.index for c in recorded_calls(db_engine, attempt_id)] == [0, 1]


def test_gateway_route_runs_on_the_event_loop(api_app: FastAPI) -> None:
    """What the fast path passes on to FastAPI (odd ids, bad auth) is not charged a thread
    hop either: the route and its auth are coroutines."""
    assert any(r.path.startswith("/v1/gateway") for r in api_routes(api_app.routes))
    assert thread_pool_calls(api_app, "/v1/gateway") == []
