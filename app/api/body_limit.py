"""A cap on request bodies, checked before anything reads them.

A body over ``api_max_body_bytes`` is answered 413 without being read into memory: a
declared ``Content-Length`` over the cap is refused at once, and a body without one
(chunked) is refused as soon as its chunks pass the cap. The largest legitimate bodies
are gateway calls carrying a whole conversation; 4 MiB by default leaves them room.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """Pure ASGI middleware; costs one header lookup per request."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server reads no more than declared
            return
        received = 0
        started = refused = False

        async def counted() -> Message:
            # Past the cap: answer 413 here and tell the app the client left, so it stops
            # reading; whatever it answers then is dropped.
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    refused = True
                    if not started:
                        await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted, tracked)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"detail": f"request body larger than {self.max_bytes} bytes (WSRL_API_MAX_BODY_BYTES)"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
