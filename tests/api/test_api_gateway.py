"""The LLM gateway: the official openai client through a real API server to the real
scripted LLM server; calls recorded like the built-in agent's; failure modes."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import redis
from fastapi.testclient import TestClient
from helpers.api_rows import AUTH, TOKEN, Rows, recorded_calls
from helpers.processes import free_port
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from app.api.main import create_app
from app.config import Settings
from app.core.endpoint import EndpointStatus, PolicyEndpoint, publish_endpoint
from app.core.llm import token_capture_params
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt
from app.scripted_llm import create_app as create_scripted_llm
from app.webshop.server.runner import RunningServer, serve_in_thread

MESSAGES = [
    {"role": "system", "content": "You are a shopping agent."},
    {"role": "user", "content": "Find blue shoes under 50 dollars."},
]


def _gateway(base: str, rollout: uuid.UUID, number: int = 1) -> str:
    return f"{base}/v1/gateway/rollouts/{rollout}/attempts/{number}/v1"


def test_openai_client_through_gateway_records_calls(
    api_server: RunningServer,
    scripted_llm: RunningServer,
    version: int,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    rollout, attempt_id = attempt
    client = openai.OpenAI(base_url=_gateway(api_server.url, rollout), api_key=TOKEN, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="whatever-the-agent-says", messages=MESSAGES, max_tokens=64
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert raw.headers["x-wsrl-call-index"] == "0"
    assert raw.headers["x-wsrl-policy-version"] == str(version)
    client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=64)

    direct = httpx.post(
        f"{scripted_llm.url}/v1/chat/completions",
        json={"model": "policy", "messages": MESSAGES, "max_tokens": 64, **token_capture_params()},
    ).json()
    answered = raw.http_response.json()
    assert answered["choices"][0]["token_ids"] == direct["choices"][0]["token_ids"]
    assert answered["prompt_token_ids"] == direct["prompt_token_ids"]
    assert answered["model"] == "policy"  # the served model, not the agent's name for it

    calls = recorded_calls(db_engine, attempt_id)
    assert [c.index for c in calls] == [0, 1]
    first = calls[0]
    assert first.policy_version == version
    assert first.request_messages == MESSAGES
    assert first.response_text == completion.choices[0].message.content
    assert first.prompt_token_ids == direct["prompt_token_ids"]
    assert first.response_token_ids == direct["choices"][0]["token_ids"]
    assert first.response_logprobs is not None
    assert len(first.response_logprobs) == len(first.response_token_ids)
    assert first.trainable is True
    assert first.latency_ms is not None and first.latency_ms >= 0


def test_a_conversation_with_nul_characters_is_recorded_not_refused(
    api_server: RunningServer,
    scripted_llm: RunningServer,
    version: int,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    """An agent's messages can carry NUL (a page or an earlier reply), which ``jsonb``
    cannot hold: the call is answered and recorded with U+FFFD in its place."""
    rollout, attempt_id = attempt
    client = openai.OpenAI(base_url=_gateway(api_server.url, rollout), api_key=TOKEN, max_retries=0)
    messages = [*MESSAGES, {"role": "user", "content": "page\x00 text"}]
    assert client.chat.completions.create(model="m", messages=messages, max_tokens=64)
    (call,) = recorded_calls(db_engine, attempt_id)
    assert call.request_messages[-1]["content"] == "page\ufffd text"
    assert call.request_messages[:-1] == MESSAGES


def test_unknown_rollout_404(api_server: RunningServer, version: int) -> None:
    missing = uuid.uuid4()
    client = openai.OpenAI(base_url=_gateway(api_server.url, missing), api_key=TOKEN, max_retries=0)
    with pytest.raises(openai.NotFoundError, match=f"unknown attempt 1 of rollout {missing}"):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_unknown_attempt_404(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int]
) -> None:
    rollout, _ = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/2/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 404
    assert response.json()["detail"] == f"unknown attempt 2 of rollout {rollout}"


def test_finished_attempt_409_and_nothing_recorded(
    client: TestClient, version: int, rows: Rows, db_engine: Engine
) -> None:
    rollout = rows.rollout(status=RolloutStatus.SUCCEEDED)
    attempt_id = rows.attempt(rollout, 1, status=AttemptStatus.SUCCEEDED)
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 409
    assert "succeeded, not running" in response.json()["detail"]
    assert recorded_calls(db_engine, attempt_id) == []


def test_upstream_down_502_with_message(
    client: TestClient,
    redis_client: redis.Redis,
    no_endpoint: None,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    publish_endpoint(redis_client, PolicyEndpoint(dead, "policy", 7))
    rollout, attempt_id = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 502
    assert f"upstream LLM at {dead} unreachable" in response.json()["detail"]
    assert recorded_calls(db_engine, attempt_id) == []


def test_upstream_error_passed_through_unrecorded(
    client: TestClient,
    scripted_llm: RunningServer,
    version: int,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    httpx.post(f"{scripted_llm.url}/admin/faults", json={"mode": "error_5xx", "count": 1})
    rollout, attempt_id = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "scripted fault: server error"
    assert recorded_calls(db_engine, attempt_id) == []


def test_no_endpoint_503(
    client: TestClient, no_endpoint: None, attempt: tuple[uuid.UUID, int]
) -> None:
    rollout, _ = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 503
    assert "no policy endpoint" in response.json()["detail"]


def test_paused_endpoint_waits_then_503(
    api_settings: Settings,
    scripted_llm: RunningServer,
    redis_client: redis.Redis,
    no_endpoint: None,
    attempt: tuple[uuid.UUID, int],
) -> None:
    paused = PolicyEndpoint(f"{scripted_llm.url}/v1", "policy", 3, EndpointStatus.PAUSED)
    publish_endpoint(redis_client, paused)
    rollout, _ = attempt
    with TestClient(create_app(api_settings.model_copy(update={"llm_timeout_s": 0.3}))) as client:
        response = client.post(
            f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
            json={"messages": MESSAGES},
            headers=AUTH,
        )
    assert response.status_code == 503
    assert "paused" in response.json()["detail"]
    assert response.headers["retry-after"] == "5"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{nope", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model": "m"}', "'messages'"),
        (b'{"messages": []}', "'messages'"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": true}', "stream"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', "n must be 1"),
    ],
)
def test_bad_body_422(
    client: TestClient,
    version: int,
    attempt: tuple[uuid.UUID, int],
    content: bytes,
    message: str,
) -> None:
    rollout, _ = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        content=content,
        headers={**AUTH, "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert message in response.json()["detail"]


def test_bad_attempt_number_422(client: TestClient, attempt: tuple[uuid.UUID, int]) -> None:
    rollout, _ = attempt
    response = client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/0/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    )
    assert response.status_code == 422


def test_gateway_metrics_observed(
    client: TestClient, version: int, attempt: tuple[uuid.UUID, int]
) -> None:
    rollout, _ = attempt
    client.post(
        f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
        json={"messages": MESSAGES},
        headers=AUTH,
    ).raise_for_status()
    text = client.get("/metrics").text
    assert "wsrl_gateway_overhead_seconds_count 1.0" in text
    assert "wsrl_gateway_request_seconds_count 1.0" in text


def test_concurrent_calls_of_one_attempt_get_consecutive_indexes(
    api_server: RunningServer,
    version: int,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    rollout, attempt_id = attempt
    url = f"{_gateway(api_server.url, rollout)}/chat/completions"
    body = {"messages": MESSAGES, "max_tokens": 16}
    with httpx.Client(timeout=30, headers=AUTH) as http, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: http.post(url, json=body), range(48)))
    assert [a.status_code for a in answers] == [200] * 48
    indexes = sorted(int(a.headers["x-wsrl-call-index"]) for a in answers)
    assert indexes == list(range(48))
    assert [c.index for c in recorded_calls(db_engine, attempt_id)] == list(range(48))


def test_attempt_finished_after_a_call_409_and_not_recorded(
    api_server: RunningServer,
    version: int,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    rollout, attempt_id = attempt
    url = f"{_gateway(api_server.url, rollout)}/chat/completions"
    first = httpx.post(url, json={"messages": MESSAGES}, headers=AUTH, timeout=30)
    assert first.status_code == 200
    with Session(db_engine) as session, session.begin():
        session.execute(
            update(Attempt).where(Attempt.id == attempt_id).values(status=AttemptStatus.FAILED)
        )
    second = httpx.post(url, json={"messages": MESSAGES}, headers=AUTH, timeout=30)
    assert second.status_code == 409
    assert "no longer running; the call was not recorded" in second.json()["detail"]
    assert [c.index for c in recorded_calls(db_engine, attempt_id)] == [0]


def test_upstream_timeout_504_and_not_recorded(
    api_settings: Settings,
    redis_client: redis.Redis,
    no_endpoint: None,
    attempt: tuple[uuid.UUID, int],
    db_engine: Engine,
) -> None:
    rollout, attempt_id = attempt
    hanging = create_scripted_llm("rule", None, fault="timeout", timeout_s=10.0)
    with serve_in_thread(hanging) as llm:
        publish_endpoint(redis_client, PolicyEndpoint(f"{llm.url}/v1", "policy", 7))
        app = create_app(api_settings.model_copy(update={"llm_timeout_s": 0.5}))
        with TestClient(app) as client:
            response = client.post(
                f"/v1/gateway/rollouts/{rollout}/attempts/1/v1/chat/completions",
                json={"messages": MESSAGES},
                headers=AUTH,
            )
    assert response.status_code == 504
    assert f"upstream LLM at {llm.url}/v1 timed out" in response.json()["detail"]
    assert recorded_calls(db_engine, attempt_id) == []
