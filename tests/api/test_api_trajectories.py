"""GET /v1/rollouts/{id}/trajectory: the final (or a chosen) attempt's steps and LLM calls."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers.api_rows import Rows

from app.db.lifecycle import AttemptStatus, RolloutStatus

PROMPT = [11, 12, 13, 2_000_000_000]
RESPONSE = [21, 22]
LOGPROBS = [-0.125, -2.718281828]


def _call(text: str, version: int) -> dict:
    return {
        "policy_version": version,
        "model": "policy",
        "request_messages": [{"role": "user", "content": "find shoes"}],
        "response_text": text,
        "prompt_token_ids": PROMPT,
        "response_token_ids": RESPONSE,
        "response_logprobs": LOGPROBS,
        "finish_reason": "stop",
        "latency_ms": 3.5,
    }


@pytest.fixture
def two_attempts(rows: Rows) -> uuid.UUID:
    """A rollout whose attempt 1 failed and attempt 2 succeeded."""
    goal = rows.goal(instruction="i need blue running shoes")
    rollout = rows.rollout(goal, status=RolloutStatus.SUCCEEDED, reward=1.0)
    rows.attempt(
        rollout,
        1,
        status=AttemptStatus.FAILED,
        steps=[{"action": "search[shoes]", "observation": "results", "valid": True}],
        calls=[_call("Action: search[shoes]", 1)],
    )
    rows.attempt(
        rollout,
        2,
        status=AttemptStatus.SUCCEEDED,
        reward=1.0,
        steps=[
            {"action": "search[blue shoes]", "observation": "page 1", "valid": True},
            {"action": "dance", "observation": "invalid action", "valid": False},
            {"action": "click[buy now]", "observation": "thanks", "reward": 1.0, "done": True},
        ],
        calls=[_call("Action: search[blue shoes]", 2), _call("Action: click[buy now]", 3)],
    )
    return rollout


def test_default_is_the_succeeded_attempt_without_tokens(
    client: TestClient, two_attempts: uuid.UUID
) -> None:
    body = client.get(f"/v1/rollouts/{two_attempts}/trajectory").json()
    assert body["instruction"] == "i need blue running shoes"
    assert body["attempt"]["number"] == 2
    assert body["attempt"]["status"] == "succeeded"
    assert body["reward"] == 1.0
    assert [(s["index"], s["action"], s["valid"]) for s in body["steps"]] == [
        (0, "search[blue shoes]", True),
        (1, "dance", False),
        (2, "click[buy now]", True),
    ]
    assert body["steps"][2]["done"] is True
    assert [c["policy_version"] for c in body["llm_calls"]] == [2, 3]
    call = body["llm_calls"][0]
    assert call["num_prompt_tokens"] == len(PROMPT)
    assert call["num_response_tokens"] == len(RESPONSE)
    assert call["prompt_token_ids"] is None
    assert call["response_logprobs"] is None


def test_tokens_true_gives_exact_ids_and_float32_logprobs(
    client: TestClient, two_attempts: uuid.UUID
) -> None:
    body = client.get(f"/v1/rollouts/{two_attempts}/trajectory", params={"tokens": "true"}).json()
    call = body["llm_calls"][1]
    assert call["prompt_token_ids"] == PROMPT
    assert call["response_token_ids"] == RESPONSE
    assert call["response_logprobs"] == [float(np.float32(v)) for v in LOGPROBS]


def test_given_attempt(client: TestClient, two_attempts: uuid.UUID) -> None:
    body = client.get(f"/v1/rollouts/{two_attempts}/trajectory", params={"attempt": 1}).json()
    assert body["attempt"]["status"] == "failed"
    assert [s["action"] for s in body["steps"]] == ["search[shoes]"]
    assert [c["response_text"] for c in body["llm_calls"]] == ["Action: search[shoes]"]


def test_latest_attempt_when_none_succeeded(client: TestClient, rows: Rows) -> None:
    rollout = rows.rollout(status=RolloutStatus.RUNNING)
    rows.attempt(rollout, 1, status=AttemptStatus.LOST)
    rows.attempt(rollout, 2)
    body = client.get(f"/v1/rollouts/{rollout}/trajectory").json()
    assert body["attempt"]["number"] == 2
    assert body["steps"] == []


def test_unknown_rollout_404(client: TestClient) -> None:
    missing = uuid.uuid4()
    response = client.get(f"/v1/rollouts/{missing}/trajectory")
    assert response.status_code == 404
    assert response.json()["detail"] == f"unknown rollout {missing}"


def test_unknown_attempt_404(client: TestClient, two_attempts: uuid.UUID) -> None:
    response = client.get(f"/v1/rollouts/{two_attempts}/trajectory", params={"attempt": 7})
    assert response.status_code == 404
    assert response.json()["detail"] == f"unknown attempt 7 of rollout {two_attempts}"


def test_queued_rollout_has_no_trajectory_404(client: TestClient, rows: Rows) -> None:
    rollout = rows.rollout()
    response = client.get(f"/v1/rollouts/{rollout}/trajectory")
    assert response.status_code == 404
    assert "no attempt yet" in response.json()["detail"]


@pytest.mark.parametrize("params", [{"attempt": 0}, {"attempt": "x"}, {"tokens": "maybe"}])
def test_bad_query_422(client: TestClient, two_attempts: uuid.UUID, params: dict) -> None:
    response = client.get(f"/v1/rollouts/{two_attempts}/trajectory", params=params)
    assert response.status_code == 422
