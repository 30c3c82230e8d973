"""The LLM gateway route: OpenAI chat completions recorded against a rollout attempt.

Point an OpenAI client at ``{api}/v1/gateway/rollouts/{rollout_id}/attempts/{n}/v1``
with ``api_key=WSRL_API_TOKEN``. Answers: the upstream's own status and body; 404 for
an unknown rollout/attempt; 409 when the attempt is no longer running; 422 for a body
that is not a (non-streaming, n=1) chat completion request; 502 when the upstream is
unreachable or answers no completion; 503 while the policy endpoint is paused too long
(or Postgres cannot record the call); 504 on upstream timeout. See
:mod:`app.api.services.gateway` for what is recorded.

Well-formed, authorised calls are answered by :mod:`app.api.gateway_fast_path` before
FastAPI's routing; this route answers the others (its validation and 401/422 errors) and
documents the endpoint. Both answer through :func:`answer_chat`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request, Response

from app.api.deps import GatewayAuth
from app.api.schemas import error_responses
from app.api.services.gateway import GatewayError

PREFIX = "/v1/gateway"
CHAT_PATH = "/rollouts/{rollout_id}/attempts/{number}/v1/chat/completions"
# The route's template, as request metrics label it.
CHAT_ROUTE = PREFIX + CHAT_PATH
MAX_INT32 = 2**31 - 1

router = APIRouter(prefix=PREFIX, tags=["gateway"], dependencies=[GatewayAuth])


@dataclass(frozen=True)
class ChatAnswer:
    """What the gateway answers to one chat completion request."""

    status_code: int
    content: bytes
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)


async def answer_chat(state: Any, rollout_id: uuid.UUID, number: int, body: bytes) -> ChatAnswer:
    """Forward one chat completion and record it; ``state``: the app's ``state``."""
    started = time.perf_counter()
    metrics = state.metrics
    try:
        forwarded = await state.gateway.chat_completion(rollout_id, number, body)
    except GatewayError as exc:
        metrics.gateway_errors.labels(str(exc.status_code)).inc()
        return ChatAnswer(
            exc.status_code, orjson.dumps(_error_body(exc)), "application/json", exc.headers or {}
        )
    elapsed = time.perf_counter() - started
    metrics.gateway_latency.observe(elapsed)
    metrics.gateway_overhead.observe(max(elapsed - forwarded.upstream_ms / 1000, 0.0))
    headers = {}
    if forwarded.call_index is not None:
        headers["x-wsrl-call-index"] = str(forwarded.call_index)
        headers["x-wsrl-policy-version"] = str(forwarded.policy_version)
    return ChatAnswer(forwarded.status_code, forwarded.content, forwarded.content_type, headers)


@router.post(
    CHAT_PATH,
    response_class=Response,
    responses={
        200: {"description": "The upstream chat completion, unchanged."},
        **error_responses(
            {
                401: "Neither WSRL_API_TOKEN nor the attempt's gateway key.",
                404: "Unknown rollout or attempt.",
                409: "The attempt is no longer running.",
                413: "Body over WSRL_API_MAX_BODY_BYTES.",
                422: "Not a non-streaming chat completion request with n=1.",
                502: "Upstream unreachable or no completion.",
                503: "Policy endpoint paused too long, or the call cannot be recorded.",
                504: "Upstream timeout.",
            }
        ),
    },
)
async def chat_completions(
    rollout_id: uuid.UUID,
    number: Annotated[int, Path(ge=1, le=MAX_INT32, description="Attempt number.")],
    request: Request,
) -> Response:
    """Forward one chat completion to the current policy endpoint and record it.

    The answer carries ``x-wsrl-call-index`` (the call's index in the attempt) and
    ``x-wsrl-policy-version`` (the version it was recorded with) when it was recorded.
    """
    answer = await answer_chat(request.app.state, rollout_id, number, await request.body())
    return Response(
        answer.content, answer.status_code, headers=answer.headers, media_type=answer.media_type
    )


def _error_body(exc: GatewayError) -> dict[str, object]:
    """``detail`` like every API error, plus OpenAI's ``error`` shape that OpenAI clients
    turn into their exception's message."""
    kind = "invalid_request_error" if exc.status_code < 500 else "upstream_error"
    return {
        "detail": exc.message,
        "error": {"message": exc.message, "type": kind, "code": exc.status_code},
    }
