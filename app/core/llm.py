"""The LLM wire contract: sampling, the recorded call, and parsing an OpenAI chat answer.

Token fidelity: training uses the token ids the inference server generated, never a
re-tokenisation. Each call therefore asks the vLLM way for them (``logprobs=True`` and
``return_token_ids=True``) and reads ``prompt_token_ids`` (response level, or choice level
as in vLLM's completions API), ``choices[0].token_ids`` and
``choices[0].logprobs.content[i].logprob``. A server that returns none of these still
works; its calls are recorded with ``trainable=False`` and the reason. So is a generation
the server cut off (``finish_reason: "abort"``, as vLLM answers requests in flight when
weights sync): its tokens are not what the policy would have generated.

The worker's client (:mod:`workers.llm_client`) and the API's gateway both parse answers here,
and both record them with :func:`call_row`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.config import Settings
from app.db.types import without_nul


class LLMError(RuntimeError):
    """Any failure of an LLM call; ``reason`` is what gets recorded on the attempt."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LLMUnavailable(LLMError):
    """The endpoint kept failing (5xx, timeouts, connection) past the retry budget,
    or no serving endpoint could be found."""

    def __init__(self, reason: str, *, attempts: int = 0, elapsed_s: float = 0.0) -> None:
        super().__init__(reason)
        self.attempts = attempts
        self.elapsed_s = elapsed_s

    def __str__(self) -> str:
        return f"{self.reason} (after {self.attempts} attempt(s), {self.elapsed_s:.1f}s)"


class LLMRequestRejected(LLMError):
    """The endpoint refused the request (4xx): retrying the same request cannot help."""

    def __init__(self, reason: str, *, status_code: int) -> None:
        super().__init__(reason)
        self.status_code = status_code


class LLMBadResponse(LLMError):
    """The endpoint answered 200 with something that is not a chat completion."""


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one call; ``seed`` None = server's choice; ``stop``: strings
    that end the generation (the server leaves them out of the reply's text)."""

    temperature: float = 1.0
    max_tokens: int = 256
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Sampling:
        return cls(temperature=settings.llm_temperature, max_tokens=settings.llm_max_tokens)

    def overridden(self, overrides: dict[str, Any] | None) -> Sampling:
        """The enqueued sampling parameters (a rollout's ``sampling``) over these defaults;
        unknown keys are left out."""
        if not overrides:
            return self
        known = {k: v for k, v in overrides.items() if k in SAMPLING_FIELDS}
        if known.get("stop") is not None:
            known["stop"] = tuple(known["stop"])
        return Sampling(**{**asdict(self), **known})


SAMPLING_FIELDS = frozenset(Sampling.__dataclass_fields__)

StopSequence = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00]+$")]


class SamplingOverrides(BaseModel):
    """Sampling parameters a rollout may set over the settings' defaults.

    Typed strictly (no ``"0.7"`` strings, no floats for integers, no NaN/inf) and bounded,
    so a bad value is refused when the rollout is enqueued instead of failing each of its
    attempts at the LLM server. The bounds are the OpenAI API's (temperature 0-2, top_p in
    (0, 1]); ``max_tokens`` at most 32768.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 to 2.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Above 0, at most 1.")
    max_tokens: int | None = Field(None, ge=1, le=32_768, description="1 to 32768.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="Non-negative 64-bit.")
    stop: list[StopSequence] | None = Field(
        None, min_length=1, max_length=4, description="1 to 4 strings, each 1-64 characters."
    )

    def as_dict(self) -> dict[str, Any]:
        """The parameters set, as stored on the rollout (``rollouts.sampling``)."""
        return self.model_dump(exclude_none=True)


@dataclass
class LLMCall:
    """One chat completion as it must be persisted (an ``llm_calls`` row).

    ``trainable`` holds when prompt and response token ids are present and one logprob
    exists per response token; ``untrainable_reason`` says what was missing otherwise.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response_text: str
    tool_calls: list[dict[str, Any]]
    reasoning_text: str | None
    prompt_token_ids: list[int] | None
    response_token_ids: list[int] | None
    response_logprobs: list[float] | None
    finish_reason: str | None
    latency_ms: float
    policy_version: int
    model: str
    base_url: str = ""
    attempts: int = 1
    trainable: bool = False
    untrainable_reason: str | None = None
    usage: dict[str, Any] | None = field(default=None)
    structured_outputs: dict[str, Any] | None = None
    """The request's constraint on the reply (vLLM's ``structured_outputs``), if any: the
    trainer replays it to compute log-probabilities under the same mask."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_capture_params() -> dict[str, Any]:
    """Body fields that make a vLLM server return token ids and logprobs.

    The gateway merges these into forwarded requests; :class:`LLMClient` sends them.
    """
    return {"logprobs": True, "return_token_ids": True}


def _int_list(value: Any) -> list[int] | None:
    # The set of element types (not a per-element isinstance loop): prompts are thousands
    # of ids, and ``type(v) is int`` also rules out bools.
    if not isinstance(value, list) or not {*map(type, value)} <= {int}:
        return None
    return value


def _logprob_list(logprobs: Any) -> list[float] | None:
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if not isinstance(content, list):
        return None
    values: list[float] = []
    for entry in content:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        values.append(float(value))
    return values


def _untrainable_reason(
    prompt_ids: list[int] | None,
    response_ids: list[int] | None,
    logprobs: list[float] | None,
    finish_reason: Any = None,
) -> str | None:
    if finish_reason == "abort":
        return "generation aborted by the server (finish_reason abort)"
    if prompt_ids is None or not prompt_ids:
        return "no prompt_token_ids in response"
    if response_ids is None or not response_ids:
        return "no response token_ids in response"
    if logprobs is None:
        return "no logprobs in response"
    if len(logprobs) != len(response_ids):
        return f"{len(logprobs)} logprobs for {len(response_ids)} response tokens"
    if not all(math.isfinite(v) for v in logprobs):
        return "non-finite logprob"
    return None


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(
            {
                "id": call.get("id"),
                "type": call.get("type", "function"),
                "function": {"name": function.get("name"), "arguments": arguments},
            }
        )
    return calls


def _served_version(raw: dict[str, Any], published: int) -> int:
    served = raw.get("policy_version")
    return served if isinstance(served, int) and not isinstance(served, bool) else published


def parse_chat_response(
    raw: dict[str, Any],
    *,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    structured_outputs: dict[str, Any] | None = None,
    policy_version: int = 0,
    base_url: str = "",
    latency_ms: float = 0.0,
    attempts: int = 1,
) -> LLMCall:
    """An OpenAI-compatible chat completion (parsed JSON) as an :class:`LLMCall`.

    Only the first choice is read (the agent asks for n=1). Raises
    :class:`LLMBadResponse` when ``raw`` has no choice with a message. A server that
    names the version it served (the local policy server's ``policy_version``) is
    believed over ``policy_version`` read from Redis before the call: a call served just
    after a weight swap is then labelled with the new version, not the old one.
    """
    choices = raw.get("choices") if isinstance(raw, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMBadResponse(f"chat completion without choices: {str(raw)[:200]!r}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMBadResponse(f"chat completion choice without message: {str(choice)[:200]!r}")
    prompt_ids = _int_list(raw.get("prompt_token_ids", choice.get("prompt_token_ids")))
    response_ids = _int_list(choice.get("token_ids"))
    logprobs = _logprob_list(choice.get("logprobs"))
    reason = _untrainable_reason(prompt_ids, response_ids, logprobs, choice.get("finish_reason"))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return LLMCall(
        messages=messages,
        tools=tools,
        response_text=message.get("content") or "",
        tool_calls=_tool_calls(message),
        reasoning_text=reasoning if isinstance(reasoning, str) else None,
        prompt_token_ids=prompt_ids,
        response_token_ids=response_ids,
        response_logprobs=logprobs,
        finish_reason=choice.get("finish_reason"),
        latency_ms=latency_ms,
        policy_version=_served_version(raw, policy_version),
        model=str(raw.get("model", "")),
        base_url=base_url,
        attempts=attempts,
        trainable=reason is None,
        untrainable_reason=reason,
        usage=raw.get("usage") if isinstance(raw.get("usage"), dict) else None,
        structured_outputs=structured_outputs,
    )


def call_row(index: int, call: LLMCall) -> dict[str, Any]:
    """An ``llm_calls`` row with the server's token ids, never a re-tokenisation."""
    return {
        "index": index,
        "policy_version": call.policy_version,
        "model": call.model,
        "request_messages": call.messages,  # jsonb: the engine's serializer replaces NULs
        "response_text": without_nul(call.response_text),
        "prompt_token_ids": call.prompt_token_ids,
        "response_token_ids": call.response_token_ids,
        "response_logprobs": call.response_logprobs,
        "finish_reason": call.finish_reason,
        "latency_ms": call.latency_ms,
        "trainable": call.trainable,
        "structured_outputs": call.structured_outputs,
    }
