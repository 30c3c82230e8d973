"""An optional bearer token on the session routes of the env server.

With a token configured, every route that creates, steps, reads or deletes a session
(native ``/sessions...``, ``/agentgym/...``, ``/agl/reset`` and ``/agl/step``) needs
``Authorization: Bearer <token>``; others get 401 before any work. ``/health``, the goals
and the AgentGym root stay open (probes, goal sync). Without a token nothing changes.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from app.webshop.server.responses import send_error

OPEN_PATHS = frozenset({"/health", "/agl/health", "/agentgym/", "/agentgym"})
SESSION_PREFIXES = ("/sessions", "/agentgym", "/agl/")


class SessionToken:
    """Pure ASGI middleware: one header comparison per session request."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path in OPEN_PATHS
            or not path.startswith(SESSION_PREFIXES)
            or hmac.compare_digest(_authorization(scope), self.expected)
        ):
            await self.app(scope, receive, send)
            return
        message = "session routes need Authorization: Bearer <token> (WSRL_ENV_TOKEN)"
        await send_error(send, path, 401, message, headers=[(b"www-authenticate", b"Bearer")])


def _authorization(scope: Scope) -> bytes:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return bytes(value)
    return b""
