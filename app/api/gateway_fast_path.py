"""The gateway's well-formed calls answered in plain ASGI, ahead of FastAPI's routing.

An external agent pays for every layer between its request and the upstream LLM on each
of its calls. FastAPI's middleware stack, route matching (every route before the
gateway's) and dependency solving cost about as much CPU per call as the gateway's own
work, so a chat completion whose path, attempt number and bearer token are all valid is
answered here, by the same :func:`app.api.routes.gateway.answer_chat` the route uses.
Anything else (a missing or wrong token, a malformed rollout id or attempt number, other
paths and methods) passes through untouched, and FastAPI answers it with its usual
errors. Such requests are counted in ``wsrl_api_requests`` like routed ones.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.metrics import ApiMetrics
from app.api.routes.gateway import CHAT_ROUTE, MAX_INT32, answer_chat
from app.core.gateway_keys import gateway_credentials_ok

_CHAT = re.compile(
    r"/v1/gateway/rollouts/"
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"/attempts/([1-9][0-9]{0,9})/v1/chat/completions"
)


class GatewayFastPath:
    """ASGI middleware; ``token``: the API token (``WSRL_API_TOKEN``), which also signs the
    attempts' gateway keys."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics, token: str) -> None:
        self.app = app
        self._requests = metrics.requests
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self._target(scope) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before sending its request
        status_code = 500  # what the server error middleware answers if this raises
        try:
            answer = await answer_chat(scope["app"].state, target[0], target[1], body)
            status_code = answer.status_code
            headers = [
                (b"content-length", str(len(answer.content)).encode()),
                (b"content-type", answer.media_type.encode()),
                *((name.encode(), value.encode()) for name, value in answer.headers.items()),
            ]
            await send({"type": "http.response.start", "status": status_code, "headers": headers})
            await send({"type": "http.response.body", "body": answer.content})
        finally:
            self._requests.labels("POST", CHAT_ROUTE, str(status_code)).inc()

    def _target(self, scope: Scope) -> tuple[uuid.UUID, int] | None:
        """``(rollout id, attempt number)`` of a well-formed, authorised chat completion."""
        if scope["method"] != "POST":
            return None
        match = _CHAT.fullmatch(scope["path"])
        if match is None:
            return None
        rollout_id, number = uuid.UUID(match[1]), int(match[2])
        if number > MAX_INT32 or not self._authorised(scope, rollout_id, number):
            return None
        return rollout_id, number

    def _authorised(self, scope: Scope, rollout_id: uuid.UUID, number: int) -> bool:
        """``Authorization: Bearer <key>`` with the API token or this attempt's key
        (compared in constant time); the first such header counts, as in FastAPI."""
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                credentials = credentials.strip()
                return scheme.lower() == b"bearer" and gateway_credentials_ok(
                    credentials, self._token, rollout_id, number
                )
        return False


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client disconnects first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
