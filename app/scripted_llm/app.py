"""``create_app``: an OpenAI-compatible chat server that plays a scripted WebShop policy.

It reads the agent's prompt (instruction, page, actions, last steps), asks the oracle or
the rule policy of :mod:`app.webshop.agents` for the action and answers in the agent's
text format, or as a tool call when tools are offered. Token ids and logprobs come back
in vLLM's shape (``prompt_token_ids`` on the response, ``token_ids`` and
``logprobs.content`` on the choice) when asked for, from a hash tokenizer.

Everything per request is cheap and async: added latency is an ``asyncio.sleep``, so
hundreds of concurrent calls each take about ``latency_ms``. Faults (5xx, hangs past the
client's timeout, garbage replies, well-formed actions the page does not offer) are set
per server or at run time through ``POST /admin/faults``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request, Response

from app.scripted_llm import tokenizer
from app.scripted_llm.faults import (
    GARBAGE_REPLIES,
    INVALID_ACTION_REPLY,
    FaultMode,
    FaultRequest,
    FaultState,
)
from app.scripted_llm.padding import padded_action
from app.scripted_llm.prompt import AgentPrompt, PromptFormatError, parse_prompt

if TYPE_CHECKING:
    from app.webshop.env import Goal, WebShopEnv

logger = logging.getLogger(__name__)

POLICIES = ("oracle", "oracle-long", "rule")
DEFAULT_LONG_STEPS = 10
UNREADABLE_PROMPT_REPLY = "I can only shop: this prompt is not a WebShop agent prompt."
Policy = Callable[[AgentPrompt], str]


def _json(payload: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status_code, media_type="application/json")


def _error(message: str, status_code: int, kind: str) -> Response:
    """An error in OpenAI's shape, which the openai client turns into its message."""
    body = {"error": {"message": message, "type": kind, "code": status_code}}
    return _json(body, status_code)


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.completions = 0
        self.oracle_goal_misses = 0
        # Seconds from a completion's arrival to its answer, summed: the stand-in's own
        # time per call, its added latency included (benchmarks compare calls against it).
        self.completion_s = 0.0
        # Completions being answered now, and the most at once since the last reset: what
        # bounds a benchmark's ideal (C calls at once at most).
        self.in_flight = 0
        self.peak_in_flight = 0


def make_policy(
    name: str, env: WebShopEnv | None, stats: Stats, *, steps: int = DEFAULT_LONG_STEPS
) -> Policy:
    """The policy as a function of the prompt. The oracle finds its goal by instruction
    text; on an instruction it does not know it plays the rule policy instead.
    ``oracle-long`` is the oracle padded to buy on step ``steps`` (:mod:`.padding`)."""
    from app.webshop.agents import oracle_action, rule_action

    def rule(prompt: AgentPrompt) -> str:
        return rule_action(
            prompt.instruction, prompt.observation, prompt.available_actions, prompt.history
        )

    if name == "rule":
        return rule
    if name not in ("oracle", "oracle-long"):
        raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
    if env is None:
        raise ValueError("the oracle policy needs the env (its goals) to find the target")
    goals: dict[str, Goal] = {}
    for goal in env.goals:
        goals.setdefault(_normalise(goal.instruction), goal)

    def oracle(prompt: AgentPrompt) -> str:
        goal = goals.get(_normalise(prompt.instruction))
        if goal is None:
            stats.oracle_goal_misses += 1
            return rule(prompt)
        return oracle_action(goal, prompt.observation, prompt.available_actions, prompt.history)

    if name == "oracle":
        return oracle

    def oracle_long(prompt: AgentPrompt) -> str:
        action = oracle(prompt)
        goal = goals.get(_normalise(prompt.instruction))
        if goal is None:
            return action
        clickables = list(prompt.available_actions.get("clickables") or [])
        return padded_action(goal, action, clickables, prompt.history, prompt.steps_taken, steps)

    return oracle_long


def _as_tool_call(action: str, tools: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    """``search[x]`` -> search(keywords=x); ``click[buy now]`` -> buy() when offered."""
    offered = {t.get("function", {}).get("name") for t in tools}
    verb, _, rest = action.partition("[")
    argument = rest[:-1] if rest.endswith("]") else rest
    if verb == "click" and argument == "buy now" and "buy" in offered:
        name, args = "buy", {}
    elif verb == "search":
        name, args = "search", {"keywords": argument}
    else:
        name, args = "click", {"element": argument}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _completion(
    body: dict[str, Any],
    text: str | None,
    tool_call: dict[str, Any] | None,
    request_id: str,
    served_model: str,
    token_ids: bool,
) -> dict[str, Any]:
    """A chat completion in vLLM's shape; the generated text is cut at ``max_tokens``, and a
    text reply at its first ``stop`` sequence as vLLM does: the text ends before the
    sequence, the tokens with the one that completed it, ``stop_reason`` names it."""
    messages = body["messages"]
    tools = body.get("tools")
    generated = tool_call_text(tool_call) if tool_call is not None else (text or "")
    gen_pieces = tokenizer.pieces(generated)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    finish = "tool_calls" if tool_call is not None else "stop"
    ended = True
    stop_reason = None
    limit = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
    stopped = _stopped(gen_pieces[:limit], body.get("stop")) if tool_call is None else None
    if stopped is not None:
        gen_pieces, text, stop_reason = stopped
        ended = False
    elif limit is not None and limit <= len(gen_pieces):
        gen_pieces, finish, ended = gen_pieces[:limit], "length", False
        if tool_call is not None:
            tool_call = None
        text = "".join(gen_pieces)
    response_ids = [tokenizer.piece_id(p) for p in gen_pieces]
    shown = list(gen_pieces)
    if ended:
        response_ids.append(tokenizer.IM_END_ID)
        shown.append(tokenizer.IM_END)
    prompt_ids = tokenizer.encode_chat(messages, tools)
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None if tool_call is not None else text,
            "tool_calls": [tool_call] if tool_call is not None else [],
        },
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": stop_reason,
    }
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {
                    "token": piece,
                    "logprob": tokenizer.logprob(tid, i),
                    "bytes": list(piece.encode()),
                    "top_logprobs": [],
                }
                for i, (piece, tid) in enumerate(zip(shown, response_ids, strict=True))
            ]
        }
    completion: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or served_model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(response_ids),
            "total_tokens": len(prompt_ids) + len(response_ids),
        },
    }
    if token_ids and body.get("return_token_ids"):
        choice["token_ids"] = response_ids
        completion["prompt_token_ids"] = prompt_ids
    return completion


def _stopped(gen_pieces: list[str], stop: Any) -> tuple[list[str], str, str] | None:
    """``(pieces up to the one completing a stop sequence, text before it, the sequence)``,
    or None when no sequence of ``stop`` (a string or a list of them) occurs."""
    sequences = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    sequences = [s for s in sequences if isinstance(s, str) and s]
    text = ""
    for count, piece in enumerate(gen_pieces, start=1):
        text += piece
        found = [(text.find(s), s) for s in sequences if s in text]
        if found:
            at, sequence = min(found)
            return gen_pieces[:count], text[:at], sequence
    return None


def tool_call_text(tool_call: dict[str, Any]) -> str:
    """What a hermes-style model generates for a tool call (tokenised for the ids)."""
    function = tool_call["function"]
    payload = {"name": function["name"], "arguments": json.loads(function["arguments"])}
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"


async def _hang(request: Request, seconds: float) -> None:
    """Sleep like a stuck server, but stop once the client has given up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.05)


def create_app(
    policy: str,
    env: WebShopEnv | None,
    latency_ms: float = 0.0,
    *,
    model: str = "policy",
    token_ids: bool = True,
    fault: FaultMode | str = FaultMode.OK,
    fault_count: int | None = None,
    timeout_s: float = 600.0,
    steps: int = DEFAULT_LONG_STEPS,
) -> FastAPI:
    """The scripted LLM server.

    ``policy``: "oracle" or "oracle-long" (both need ``env``) or "rule"; ``steps``: the
    step on which "oracle-long" buys. ``latency_ms``: added to every call.
    ``token_ids=False`` plays a server without vLLM's token ids (calls are untrainable).
    ``fault`` / ``fault_count``: the fault to start with. ``timeout_s``: how long a
    ``timeout`` fault hangs unless the client disconnects first.
    """
    app = FastAPI(title="WebShop scripted LLM", summary="An OpenAI-compatible scripted policy.")
    stats = Stats()
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    play = make_policy(policy, env, stats, steps=steps)
    faults = FaultState(FaultMode(fault), fault_count)
    state = {"latency_ms": float(latency_ms), "timeout_s": float(timeout_s)}
    ids = itertools.count(1)
    app.state.faults = faults
    app.state.stats = stats

    @app.get("/health")
    async def health() -> Response:
        return _json({"status": "ok", "policy": policy, "model": model})

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": model, "object": "model", "created": 0, "owned_by": "wsrl-scripted"}
        return _json({"object": "list", "data": [card]})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        stats.in_flight += 1
        stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
        try:
            return await _chat(request)
        finally:
            stats.in_flight -= 1

    async def _chat(request: Request) -> Response:
        arrived = time.perf_counter()
        stats.requests += 1
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error("the body is not JSON", 400, "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error("'messages' must be a list of messages", 400, "invalid_request_error")
        if body.get("stream"):
            return _error("streaming is not supported here", 400, "invalid_request_error")
        mode = faults.take()
        if state["latency_ms"] > 0:
            await asyncio.sleep(state["latency_ms"] / 1000)
        if mode == FaultMode.ERROR_5XX:
            return _error("scripted fault: server error", 503, "server_error")
        if mode == FaultMode.TIMEOUT:
            await _hang(request, state["timeout_s"])
            return _error("scripted fault: hung past the timeout", 504, "server_error")
        request_id = f"chatcmpl-scripted-{next(ids)}"
        tools = body.get("tools") or None
        text: str | None
        tool_call = None
        if mode == FaultMode.GARBAGE:
            text = GARBAGE_REPLIES[stats.requests % len(GARBAGE_REPLIES)]
        elif mode == FaultMode.INVALID_ACTION:
            text = INVALID_ACTION_REPLY
        else:
            try:
                prompt = parse_prompt(body["messages"])
            except PromptFormatError as exc:
                logger.debug("unreadable prompt: %s", exc)
                text = UNREADABLE_PROMPT_REPLY
            else:
                try:
                    action = play(prompt)
                except Exception as exc:
                    logger.exception("the %s policy failed", policy)
                    return _error(f"scripted policy failed: {exc}", 500, "server_error")
                text = action
                if tools:
                    tool_call = _as_tool_call(action, tools, f"call-{request_id}")
                    text = None
        answer = _json(_completion(body, text, tool_call, request_id, model, token_ids))
        stats.completions += 1
        stats.completion_s += time.perf_counter() - arrived
        return answer

    @app.get("/admin/faults")
    async def get_faults() -> Response:
        return _json({**faults.as_dict(), **state})

    @app.post("/admin/faults")
    async def set_faults(body: FaultRequest) -> Response:
        """Set the fault for the next ``count`` requests (all when unset)."""
        faults.set(body.mode, body.count)
        if body.latency_ms is not None:
            state["latency_ms"] = body.latency_ms
        if body.timeout_s is not None:
            state["timeout_s"] = body.timeout_s
        logger.info("fault set to %s (count %s)", body.mode, body.count)
        return _json({**faults.as_dict(), **state})

    @app.post("/admin/stats/reset-peak")
    async def reset_peak() -> Response:
        stats.peak_in_flight = stats.in_flight
        return _json({"peak_in_flight": stats.peak_in_flight})

    @app.get("/admin/stats")
    async def get_stats() -> Response:
        return _json(
            {
                "requests": stats.requests,
                "completions": stats.completions,
                "oracle_goal_misses": stats.oracle_goal_misses,
                "completion_s": stats.completion_s,
                "peak_in_flight": stats.peak_in_flight,
                "faults_served": dict(faults.served),
            }
        )

    return app
