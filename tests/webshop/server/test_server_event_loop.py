"""Every env-server route runs on the event loop: a step is CPU-bound Python, so FastAPI's
thread pool would add a thread hop per request and no parallelism (the GIL)."""

from __future__ import annotations

from helpers.event_loop import api_routes, thread_pool_calls

from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app


def test_no_route_or_dependency_runs_in_the_thread_pool(webshop_env: WebShopEnv) -> None:
    app = create_app(webshop_env)
    assert len(list(api_routes(app.routes))) > 10
    assert thread_pool_calls(app) == []
