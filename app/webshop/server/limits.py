"""A request-body size cap, applied before any route parses JSON.

A 1 MB action must be refused quickly and cheaply: a declared ``Content-Length`` over the
cap is answered 413 without parsing anything; a chunked body is buffered up to the cap
and refused the moment it passes it. Either way the rest of the body (up to 16 MB) is
read and dropped first, so the client, still sending, gets the 413 and not a reset.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.webshop.server.responses import send_error

DEFAULT_MAX_BODY_BYTES = 64 * 1024
# A refused body up to this size is read and dropped before answering, so that the client,
# still sending, gets the 413 instead of a connection reset; larger ones are cut off.
MAX_DRAIN_BYTES = 16 * 1024 * 1024


class BodySizeLimit:
    """Pure ASGI middleware (no per-request task or copy on the normal path)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_body_bytes:
                await _drain(receive, min(declared, MAX_DRAIN_BYTES))
                await self._refuse(scope, send, declared)
                return
            await self.app(scope, receive, send)
            return
        # No declared length (chunked): buffer up to the cap, then replay to the app.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                if message.get("more_body", False):
                    await _drain(receive, MAX_DRAIN_BYTES - size)
                await self._refuse(scope, send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replaying(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, send: Send, size: int) -> None:
        message = f"request body too large: {size} bytes, the limit is {self.max_body_bytes} bytes"
        await send_error(
            send, scope.get("path", ""), 413, message, headers=[(b"connection", b"close")]
        )


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body``, already read, then goes on to ``receive``."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _drain(receive: Receive, limit: int) -> None:
    seen = 0
    while seen < limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
