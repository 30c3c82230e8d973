"""Which parts of a FastAPI app would run in its thread pool instead of on the event loop."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute


def _is_async(call: Any) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (security schemes)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)


def _sync_calls(dependant: Any, route: str) -> list[str]:
    found = []
    if dependant.call is not None and not _is_async(dependant.call):
        found.append(f"{route}: {getattr(dependant.call, '__qualname__', dependant.call)!r}")
    for sub in dependant.dependencies:
        found += _sync_calls(sub, route)
    return found


def thread_pool_calls(app: FastAPI, path_prefix: str = "/") -> list[str]:
    """The endpoints and dependencies (at any depth) of ``app``'s routes under
    ``path_prefix`` that are plain functions. FastAPI runs each of those in its thread
    pool: a thread hop per request, which CPU-bound handlers under the GIL gain nothing
    from."""
    found = []
    for route in api_routes(app.routes):
        if route.path.startswith(path_prefix):
            found += _sync_calls(route.dependant, f"{sorted(route.methods)} {route.path}")
    return found


def api_routes(routes: Sequence[Any]) -> Iterator[APIRoute]:
    """Every APIRoute, also inside included routers (FastAPI >= 0.16x keeps those as
    wrappers holding the ``original_router``). Paths are as the routers declare them
    (with an ``APIRouter(prefix=...)``, without a prefix given to ``include_router``)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (router := getattr(route, "original_router", None)) is not None:
            yield from api_routes(router.routes)
