"""JSON responses and error handlers of the env server.

Every answer is rendered with orjson (several times faster than the standard library on
observation-sized strings). Every error is ``{"detail": "<message>"}``; under ``/agl`` the
message is also given as ``"error"`` and a bad body is a 400, as that example's server
answers (elsewhere 422).

One message shape per fault, on every route family: ``malformed JSON body: <reason>``
(not JSON), ``unreadable JSON body: <reason>`` (JSON that cannot be decoded here: not
UTF-8, nested too deeply, an integer of more than 4,300 digits), ``body.<field>:
<problem>`` (a missing field, a wrong type, an empty action), ``unknown session <id as
sent>`` (404).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import Send

from app.webshop.nouns import TaggerUnavailableError
from app.webshop.server.sessions import SessionError

logger = logging.getLogger(__name__)

AGL_PREFIX = "/agl"
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


async def send_error(
    send: Send,
    path: str,
    status: int,
    message: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """An error answered below FastAPI (from an ASGI middleware), in the same shape as the
    routes' errors: ``{"detail": message}``, plus ``"error"`` under ``/agl``."""
    body: dict[str, Any] = {"detail": message}
    if path.startswith(AGL_PREFIX):
        body["error"] = message
    payload = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class OrjsonResponse(JSONResponse):
    """A JSON response rendered by orjson."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=_ORJSON_OPTIONS)


def bad_body_status(path: str) -> int:
    """The status of a body the route cannot take: 400 under ``/agl``, else 422."""
    return 400 if path.startswith(AGL_PREFIX) else 422


def error_response(request: Request, status: int, message: str) -> Response:
    body: dict[str, Any] = {"detail": message}
    if request.url.path.startswith(AGL_PREFIX):
        body["error"] = message
    return OrjsonResponse(body, status_code=status)


def client_error(exc: Exception) -> tuple[int, str] | None:
    """The status and message of an error that is the request's, not the server's: a
    session's state, a reward this server cannot compute as configured (no other tagger
    stands in: 503). None for anything else."""
    if isinstance(exc, SessionError):
        return exc.status, exc.message
    if isinstance(exc, TaggerUnavailableError):
        return 503, str(exc)
    return None


def _validation_message(exc: RequestValidationError) -> str:
    """One readable line per problem: ``body.action: String should have at most ...``."""
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "invalid JSON")
            parts.append(f"malformed JSON body: {reason}")
            continue
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", ""))
    return "; ".join(parts) or "invalid request"


# FastAPI's words for a body its JSON decoder raised on with anything but a syntax error.
_UNPARSED_BODY = "There was an error parsing the body"


def _unreadable_reason(cause: BaseException) -> str:
    """Why a body that is not malformed JSON could not be decoded, in the client's terms."""
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8: {cause.reason} at byte {cause.start}"
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    if isinstance(cause, ValueError):  # int digits; the advice after ";" is for the server
        return str(cause).split(";", 1)[0]
    return f"{type(cause).__name__}: {cause}"


def install_error_handlers(app: FastAPI) -> None:
    """Map the store's, FastAPI's and Starlette's errors to ``{"detail": message}``."""

    async def _client_error(request: Request, exc: Exception) -> Response:
        status, message = client_error(exc) or (500, str(exc))
        return error_response(request, status, message)

    app.add_exception_handler(SessionError, _client_error)
    app.add_exception_handler(TaggerUnavailableError, _client_error)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        status = bad_body_status(request.url.path)
        return error_response(request, status, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.detail == _UNPARSED_BODY and exc.__cause__ is not None:
            status = bad_body_status(request.url.path)
            message = f"unreadable JSON body: {_unreadable_reason(exc.__cause__)}"
            return error_response(request, status, message)
        return error_response(request, exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, 500, f"internal error: {type(exc).__name__}: {exc}")
