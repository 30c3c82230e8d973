"""The LLM client against a real scripted LLM server over HTTP."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi import Request

from app.core.llm import (
    LLMBadResponse,
    LLMRequestRejected,
    LLMUnavailable,
    Sampling,
    parse_chat_response,
)
from app.environments.webshop.agent import TOOLS, build_messages
from app.scripted_llm import create_app, tokenizer
from app.webshop.server.runner import RunningServer, serve_in_thread
from workers.llm_client import LLMClient

SEARCH_PAGE = {"has_search_bar": True, "clickables": ["search"]}
MESSAGES = build_messages("a red desk lamp", "WebShop [SEP] Search", SEARCH_PAGE, [])


def _v1(server: RunningServer) -> str:
    return f"{server.url}/v1"


def test_chat_captures_token_ids_and_logprobs(rule_llm, llm_admin, make_settings) -> None:
    with LLMClient(make_settings(llm_base_url=_v1(rule_llm), llm_model="wsrl-rule")) as llm:
        call = llm.chat(MESSAGES, sampling=Sampling(temperature=0.0, max_tokens=64))
    assert call.trainable, call.untrainable_reason
    assert call.response_text == "search[a red desk lamp]"
    assert call.prompt_token_ids == tokenizer.encode_chat(MESSAGES, None)
    assert call.response_token_ids[:-1] == tokenizer.encode(call.response_text)
    assert len(call.response_logprobs) == len(call.response_token_ids)
    assert call.finish_reason == "stop"
    assert call.policy_version == 0
    assert call.model == "wsrl-rule"
    assert call.messages == MESSAGES
    assert call.latency_ms > 0
    assert call.attempts == 1


def test_tool_call_is_recorded(rule_llm, llm_admin, make_settings) -> None:
    with LLMClient(make_settings(llm_base_url=_v1(rule_llm))) as llm:
        call = llm.chat(MESSAGES, tools=TOOLS)
    assert call.trainable
    assert call.response_text == ""
    assert call.finish_reason == "tool_calls"
    assert call.tool_calls[0]["function"] == {
        "name": "search",
        "arguments": '{"keywords": "a red desk lamp"}',
    }
    assert call.tools == TOOLS


def test_server_without_token_ids_gives_untrainable_call(make_settings) -> None:
    with (
        serve_in_thread(create_app("rule", None, token_ids=False)) as plain,
        LLMClient(make_settings(llm_base_url=_v1(plain))) as llm,
    ):
        call = llm.chat(MESSAGES)
    assert call.response_text == "search[a red desk lamp]"
    assert not call.trainable
    assert call.untrainable_reason == "no prompt_token_ids in response"
    assert call.prompt_token_ids is None and call.response_token_ids is None


def test_token_capture_off_sends_no_vllm_fields(rule_llm, llm_admin, make_settings) -> None:
    settings = make_settings(llm_base_url=_v1(rule_llm), llm_token_capture=False)
    with LLMClient(settings) as llm:
        call = llm.chat(MESSAGES)
    assert not call.trainable
    assert call.response_logprobs is None


def test_5xx_for_a_while_is_retried_then_succeeds(rule_llm, llm_admin, make_settings) -> None:
    llm_admin.post("/admin/faults", json={"mode": "error_5xx", "count": 3}).raise_for_status()
    with LLMClient(make_settings(llm_base_url=_v1(rule_llm))) as llm:
        call = llm.chat(MESSAGES)
    assert call.attempts == 4
    assert call.trainable
    assert llm_admin.get("/admin/faults").json()["mode"] == "ok"


def test_5xx_past_the_budget_raises_unavailable_with_reason(
    rule_llm, llm_admin, make_settings
) -> None:
    llm_admin.post("/admin/faults", json={"mode": "error_5xx"}).raise_for_status()
    settings = make_settings(llm_base_url=_v1(rule_llm), llm_retry_budget_s=0.5)
    with LLMClient(settings) as llm, pytest.raises(LLMUnavailable) as caught:
        llm.chat(MESSAGES)
    assert caught.value.reason.startswith("HTTP 503 from ")
    assert "scripted fault: server error" in caught.value.reason
    assert caught.value.attempts >= 2
    assert caught.value.elapsed_s <= 0.5


def test_timeout_past_the_budget_raises_unavailable(rule_llm, llm_admin, make_settings) -> None:
    llm_admin.post("/admin/faults", json={"mode": "timeout", "timeout_s": 30}).raise_for_status()
    settings = make_settings(llm_base_url=_v1(rule_llm), llm_timeout_s=0.3, llm_retry_budget_s=0.5)
    with LLMClient(settings) as llm, pytest.raises(LLMUnavailable) as caught:
        llm.chat(MESSAGES)
    assert caught.value.reason.startswith("timeout after 0.3s")


def test_one_timeout_is_retried_then_succeeds(rule_llm, llm_admin, make_settings) -> None:
    body = {"mode": "timeout", "count": 1, "timeout_s": 30}
    llm_admin.post("/admin/faults", json=body).raise_for_status()
    settings = make_settings(llm_base_url=_v1(rule_llm), llm_timeout_s=0.3)
    with LLMClient(settings) as llm:
        call = llm.chat(MESSAGES)
    assert call.attempts == 2
    assert call.response_text == "search[a red desk lamp]"


def test_server_down_raises_unavailable_cannot_connect(make_settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = make_settings(llm_base_url=f"http://127.0.0.1:{port}/v1", llm_retry_budget_s=0.3)
    with LLMClient(settings) as llm, pytest.raises(LLMUnavailable) as caught:
        llm.chat(MESSAGES)
    assert caught.value.reason.startswith(f"cannot connect to http://127.0.0.1:{port}/v1")


def test_4xx_is_rejected_without_retry(rule_llm, llm_admin, make_settings) -> None:
    before = llm_admin.get("/admin/stats").json()["requests"]
    settings = make_settings(llm_base_url=f"{rule_llm.url}/wrong/v1")
    with LLMClient(settings) as llm, pytest.raises(LLMRequestRejected) as caught:
        llm.chat(MESSAGES)
    assert caught.value.status_code == 404
    assert "HTTP 404" in caught.value.reason
    assert llm_admin.get("/admin/stats").json()["requests"] == before


def test_no_endpoint_configured_raises_unavailable(make_settings) -> None:
    with LLMClient(make_settings(llm_base_url=None)) as llm, pytest.raises(LLMUnavailable) as e:
        llm.chat(MESSAGES)
    assert "no policy endpoint" in e.value.reason


def test_garbage_200_body_is_a_bad_response(make_settings) -> None:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def nonsense() -> dict:
        return {"hello": "world"}

    with (
        serve_in_thread(app) as odd,
        LLMClient(make_settings(llm_base_url=_v1(odd))) as llm,
        pytest.raises(LLMBadResponse, match="without choices"),
    ):
        llm.chat(MESSAGES)


def test_structured_outputs_are_sent_and_kept_on_the_call(make_settings) -> None:
    from fastapi import FastAPI

    from app.core.llm import call_row
    from app.environments.webshop.agent import action_structured_outputs

    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def answer(request: Request) -> dict:
        seen.append(await request.json())
        return _raw()

    constraint = action_structured_outputs(SEARCH_PAGE)
    with serve_in_thread(app) as server, LLMClient(make_settings(llm_base_url=_v1(server))) as llm:
        call = llm.chat(MESSAGES, structured_outputs=constraint)
        plain = llm.chat(MESSAGES)
    assert seen[0]["structured_outputs"] == constraint
    assert "structured_outputs" not in seen[1]
    assert call_row(0, call)["structured_outputs"] == constraint
    assert call_row(1, plain)["structured_outputs"] is None


# --- parse_chat_response on raw vLLM-shaped dicts (the gateway's path) ------------------


def _raw(**choice_extra: object) -> dict:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "click[b1]"},
        "finish_reason": "stop",
        "token_ids": [5, 6, 7],
        "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}, {"logprob": -0.3}]},
        **choice_extra,
    }
    return {"model": "qwen", "choices": [choice], "prompt_token_ids": [1, 2, 3]}


def test_parse_vllm_response_is_trainable() -> None:
    call = parse_chat_response(_raw(), messages=MESSAGES, policy_version=7, latency_ms=12.0)
    assert call.trainable and call.untrainable_reason is None
    assert call.prompt_token_ids == [1, 2, 3]
    assert call.response_token_ids == [5, 6, 7]
    assert call.response_logprobs == [-0.1, -0.2, -0.3]
    assert (call.policy_version, call.model, call.latency_ms) == (7, "qwen", 12.0)


def test_an_aborted_generation_is_never_trainable() -> None:
    # vLLM answers requests in flight during a weight sync with 200, cut-off token ids and
    # finish_reason "abort": those tokens are not what the policy would have generated.
    call = parse_chat_response(_raw(finish_reason="abort"), messages=MESSAGES)
    assert not call.trainable
    assert "aborted" in (call.untrainable_reason or "")
    assert call.finish_reason == "abort"


def test_parse_believes_the_version_the_server_says_it_served() -> None:
    served = parse_chat_response({**_raw(), "policy_version": 8}, messages=[], policy_version=7)
    assert served.policy_version == 8
    assert parse_chat_response(_raw(), messages=[], policy_version=7).policy_version == 7
    odd = parse_chat_response({**_raw(), "policy_version": "8"}, messages=[], policy_version=7)
    assert odd.policy_version == 7


def test_parse_choice_level_prompt_token_ids() -> None:
    raw = _raw(prompt_token_ids=[9, 9])
    del raw["prompt_token_ids"]
    assert parse_chat_response(raw, messages=[]).prompt_token_ids == [9, 9]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"token_ids": None}, "no response token_ids in response"),
        ({"token_ids": []}, "no response token_ids in response"),
        ({"token_ids": [1, "2", 3]}, "no response token_ids in response"),
        ({"logprobs": None}, "no logprobs in response"),
        ({"logprobs": {"content": [{"logprob": -1.0}]}}, "1 logprobs for 3 response tokens"),
        ({"logprobs": {"content": [{"logprob": -1.0}, {}, {"logprob": -1.0}]}}, "no logprobs"),
        (
            {"logprobs": {"content": [{"logprob": float("nan")}] * 3}},
            "non-finite logprob",
        ),
    ],
)
def test_parse_inconsistent_capture_is_untrainable(change: dict, reason: str) -> None:
    call = parse_chat_response(_raw(**change), messages=[])
    assert not call.trainable
    assert call.untrainable_reason.startswith(reason)


def test_parse_reasoning_content_is_kept() -> None:
    raw = _raw(message={"role": "assistant", "content": "click[b1]", "reasoning_content": "hm"})
    assert parse_chat_response(raw, messages=[]).reasoning_text == "hm"


@pytest.mark.parametrize("raw", [{}, {"choices": []}, {"choices": [{"index": 0}]}, []])
def test_parse_not_a_completion_raises(raw: object) -> None:
    with pytest.raises(LLMBadResponse):
        parse_chat_response(raw, messages=[])  # type: ignore[arg-type]


def test_openai_error_body_reaches_reason(rule_llm, llm_admin) -> None:
    llm_admin.post("/admin/faults", json={"mode": "error_5xx", "count": 1})
    response = httpx.post(f"{rule_llm.url}/v1/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "scripted fault: server error"
