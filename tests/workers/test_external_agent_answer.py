"""The external agent's answer and URLs, without services (the pipeline is in tests/examples)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from workers.external_agent import (
    ExternalAgentError,
    agent_timeout_s,
    gateway_base_url,
    parse_answer,
)

URL = "http://agent/episode"


def _response(status: int, content: bytes) -> httpx.Response:
    return httpx.Response(status, content=content, request=httpx.Request("POST", URL))


def test_parse_answer_accepts_done_and_steps() -> None:
    answer = parse_answer(_response(200, b'{"done": true, "steps": 4}'), URL)
    assert answer.done is True and answer.steps == 4


def test_parse_answer_steps_is_optional() -> None:
    assert parse_answer(_response(200, b'{"done": false}'), URL).steps is None


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b'{"error": "crash"}', "answered HTTP 500"),
        (404, b"not here", "answered HTTP 404"),
        (200, b"bought it", "not JSON"),
        (200, b"[1, 2]", "expected an object"),
        (200, b'{"steps": 3}', "'done' must be true or false"),
        (200, b'{"done": "yes"}', "'done' must be true or false"),
        (200, b'{"done": true, "steps": -1}', "'steps' must be a count"),
        (200, b'{"done": true, "steps": "3"}', "'steps' must be a count"),
    ],
)
def test_parse_answer_rejects_with_reason(status: int, body: bytes, reason: str) -> None:
    with pytest.raises(ExternalAgentError, match=reason) as caught:
        parse_answer(_response(status, body), URL)
    assert URL in caught.value.reason


def test_gateway_base_url_is_the_attempts_route() -> None:
    rollout = uuid.UUID(int=7)
    assert gateway_base_url("http://api:8000/", rollout, 2) == (
        f"http://api:8000/v1/gateway/rollouts/{rollout}/attempts/2/v1"
    )


def test_agent_timeout_is_max_steps_times_step_timeout() -> None:
    assert agent_timeout_s(15, 0.4) == pytest.approx(6.0)
