"""The scripted LLM server over real HTTP: OpenAI shape, vLLM token fields, faults."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from app.environments.webshop.agent import TOOLS, build_messages, parse_action
from app.scripted_llm import create_app, tokenizer
from app.scripted_llm.faults import GARBAGE_REPLIES

SEARCH_PAGE = {"has_search_bar": True, "clickables": ["search"]}
RESULTS_PAGE = {"has_search_bar": False, "clickables": ["back to search", "next >", "b000000007"]}


def _body(**extra: object) -> dict:
    messages = build_messages("a red lamp for my desk", "WebShop [SEP] Search", SEARCH_PAGE, [])
    return {"model": "policy", "messages": messages, **extra}


def test_models_lists_the_served_model(http: httpx.Client) -> None:
    data = http.get("/v1/models").json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["policy"]


def test_completion_carries_vllm_token_fields(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", json=_body(logprobs=True, return_token_ids=True))
    assert response.status_code == 200
    data = response.json()
    choice = data["choices"][0]
    assert choice["message"]["content"] == "search[a red lamp for my desk]"
    assert choice["finish_reason"] == "stop"
    assert data["prompt_token_ids"] == tokenizer.encode_chat(_body()["messages"], None)
    ids = choice["token_ids"]
    assert ids[-1] == tokenizer.IM_END_ID
    assert ids[:-1] == tokenizer.encode(choice["message"]["content"])
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert len(logprobs) == len(ids)
    assert all(v < 0 for v in logprobs)
    assert data["usage"]["completion_tokens"] == len(ids)


def test_no_token_fields_unless_asked(http: httpx.Client) -> None:
    data = http.post("/v1/chat/completions", json=_body()).json()
    assert "prompt_token_ids" not in data
    assert "token_ids" not in data["choices"][0]
    assert data["choices"][0]["logprobs"] is None


def test_server_without_token_ids_ignores_the_request(start_scripted) -> None:
    with start_scripted("rule", token_ids=False) as server:
        data = httpx.post(
            f"{server.url}/v1/chat/completions",
            json=_body(logprobs=True, return_token_ids=True),
            timeout=10,
        ).json()
    assert "prompt_token_ids" not in data
    assert "token_ids" not in data["choices"][0]
    assert data["choices"][0]["logprobs"]["content"]


def test_results_page_rule_policy_clicks_first_product(http: httpx.Client) -> None:
    messages = build_messages("a red lamp", "Instruction: [SEP] ...", RESULTS_PAGE, [])
    data = http.post("/v1/chat/completions", json={"model": "m", "messages": messages}).json()
    assert data["choices"][0]["message"]["content"] == "click[b000000007]"
    assert data["model"] == "m"


def test_tools_offered_answer_is_a_tool_call(http: httpx.Client) -> None:
    body = _body(tools=TOOLS, logprobs=True, return_token_ids=True)
    data = http.post("/v1/chat/completions", json=body).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "search"
    assert call["function"]["arguments"] == '{"keywords": "a red lamp for my desk"}'
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"])


def test_max_tokens_cuts_reply_with_finish_length(http: httpx.Client) -> None:
    data = http.post(
        "/v1/chat/completions", json=_body(max_tokens=3, logprobs=True, return_token_ids=True)
    ).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 3
    assert tokenizer.IM_END_ID not in choice["token_ids"]
    assert choice["message"]["content"] == "search[a"


def test_unreadable_prompt_gets_a_reply_without_action(http: httpx.Client) -> None:
    body = {"model": "policy", "messages": [{"role": "user", "content": "hello"}]}
    data = http.post("/v1/chat/completions", json=body).json()
    assert parse_action(data["choices"][0]["message"]["content"]) is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"model": "policy"}, "'messages' must be a list"),
        ({"model": "policy", "messages": [], "stream": True}, "streaming is not supported"),
    ],
)
def test_bad_request_400_with_openai_error(http: httpx.Client, payload: dict, message: str) -> None:
    response = http.post("/v1/chat/completions", json=payload)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_body_not_json_400(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b"{nope")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "the body is not JSON"


def test_admin_unknown_fault_mode_422(http: httpx.Client) -> None:
    response = http.post("/admin/faults", json={"mode": "explode"})
    assert response.status_code == 422
    assert "mode" in response.text


def test_fault_5xx_for_count_requests_then_ok(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "error_5xx", "count": 2}).raise_for_status()
    codes = [http.post("/v1/chat/completions", json=_body()).status_code for _ in range(3)]
    assert codes == [503, 503, 200]
    state = http.get("/admin/faults").json()
    assert state["mode"] == "ok"
    assert state["served"]["error_5xx"] >= 2


def test_fault_garbage_replies_hold_no_action(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "garbage", "count": len(GARBAGE_REPLIES)})
    replies = [
        http.post("/v1/chat/completions", json=_body()).json()["choices"][0]["message"]["content"]
        for _ in GARBAGE_REPLIES
    ]
    assert set(replies) == set(GARBAGE_REPLIES)
    assert all(parse_action(r) is None for r in replies)
    ok = http.post("/v1/chat/completions", json=_body()).json()
    assert parse_action(ok["choices"][0]["message"]["content"]) is not None


def test_fault_timeout_hangs_past_client_timeout(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "timeout", "count": 1, "timeout_s": 30})
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json=_body(), timeout=0.5)
    assert time.monotonic() - started < 5
    assert http.post("/v1/chat/completions", json=_body()).status_code == 200


def test_oracle_without_env_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the env"):
        create_app("oracle", None)
    with pytest.raises(ValueError, match="unknown policy"):
        create_app("random", None)


def test_concurrent_calls_all_take_about_the_latency(http: httpx.Client, rule_server) -> None:
    """128 calls at once each wait ~latency, not in turn (asyncio.sleep, no blocking)."""
    http.post("/admin/faults", json={"mode": "ok", "latency_ms": 400}).raise_for_status()

    async def burst() -> list[float]:
        limits = httpx.Limits(max_connections=128)
        async with httpx.AsyncClient(base_url=rule_server.url, limits=limits, timeout=30) as c:

            async def one() -> float:
                started = time.monotonic()
                response = await c.post("/v1/chat/completions", json=_body())
                response.raise_for_status()
                return time.monotonic() - started

            return await asyncio.gather(*(one() for _ in range(128)))

    started = time.monotonic()
    latencies = asyncio.run(burst())
    wall = time.monotonic() - started
    assert min(latencies) >= 0.4
    assert wall < 4.0, f"128 calls at 400 ms took {wall:.2f}s in all"


def test_peak_in_flight_counts_calls_answered_at_once(http: httpx.Client, rule_server) -> None:
    """What bounds a benchmark's ideal: the most completions in flight since the reset."""
    http.post("/admin/faults", json={"mode": "ok", "latency_ms": 300}).raise_for_status()
    assert http.post("/admin/stats/reset-peak").json() == {"peak_in_flight": 0}

    async def calls(n: int) -> None:
        async with httpx.AsyncClient(base_url=rule_server.url, timeout=30) as c:
            answers = await asyncio.gather(
                *(c.post("/v1/chat/completions", json=_body()) for _ in range(n))
            )
        for answer in answers:
            answer.raise_for_status()

    asyncio.run(calls(5))
    assert http.get("/admin/stats").json()["peak_in_flight"] == 5
    http.post("/admin/stats/reset-peak").raise_for_status()
    asyncio.run(calls(2))
    assert http.get("/admin/stats").json()["peak_in_flight"] == 2
