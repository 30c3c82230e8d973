"""The LLM gateway route: OpenAI chat completions recorded against a rollout attempt.

Point an OpenAI client at ``{api}/v1/gateway/rollouts/{rollout_id}/attempts/{n}/v1``
with ``api_key=WSRL_API_TOKEN``. Answers: the upstream's own status and body; 404 for
an unknown rollout/attempt; 409 when the attempt is no longer running; 422 for a body
that is not a (non-streaming, n=1) chat completion request; 502 when the upstream is
unreachable or answers no completion; 503 while the policy endpoint is paused too long;
504 on upstream timeout. See :mod:`app.api.services.gateway` for what is recorded.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import JSONResponse

from app.api.deps import WriteAuth
from app.api.services.gateway import GatewayError

router = APIRouter(prefix="/v1/gateway", tags=["gateway"], dependencies=[WriteAuth])

MAX_INT32 = 2**31 - 1


@router.post(
    "/rollouts/{rollout_id}/attempts/{number}/v1/chat/completions",
    response_class=Response,
    responses={
        200: {"description": "The upstream chat completion, unchanged."},
        404: {"description": "Unknown rollout or attempt."},
        409: {"description": "The attempt is no longer running."},
        502: {"description": "Upstream unreachable or no completion."},
    },
)
async def chat_completions(
    rollout_id: uuid.UUID,
    number: Annotated[int, Path(ge=1, le=MAX_INT32, description="Attempt number.")],
    request: Request,
) -> Response:
    """Forward one chat completion to the current policy endpoint and record it."""
    started = time.perf_counter()
    metrics = request.app.state.metrics
    try:
        forwarded = await request.app.state.gateway.chat_completion(
            rollout_id, number, await request.body()
        )
    except GatewayError as exc:
        metrics.gateway_errors.labels(str(exc.status_code)).inc()
        return JSONResponse(_error_body(exc), exc.status_code, headers=exc.headers)
    elapsed = time.perf_counter() - started
    metrics.gateway_latency.observe(elapsed)
    metrics.gateway_overhead.observe(max(elapsed - forwarded.upstream_ms / 1000, 0.0))
    headers = {}
    if forwarded.call_index is not None:
        headers["x-wsrl-call-index"] = str(forwarded.call_index)
        headers["x-wsrl-policy-version"] = str(forwarded.endpoint.version)
    return Response(
        forwarded.content,
        forwarded.status_code,
        headers=headers,
        media_type=forwarded.content_type,
    )


def _error_body(exc: GatewayError) -> dict[str, object]:
    """``detail`` like every API error, plus OpenAI's ``error`` shape that OpenAI clients
    turn into their exception's message."""
    kind = "invalid_request_error" if exc.status_code < 500 else "upstream_error"
    return {
        "detail": exc.message,
        "error": {"message": exc.message, "type": kind, "code": exc.status_code},
    }
