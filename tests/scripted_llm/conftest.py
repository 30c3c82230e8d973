"""Real scripted LLM servers (uvicorn on a free port of 127.0.0.1) for the tests here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest

from app.scripted_llm import create_app
from app.webshop.server.runner import RunningServer, serve_in_thread

ScriptedFactory = Callable[..., AbstractContextManager[RunningServer]]


@pytest.fixture(scope="session")
def start_scripted() -> ScriptedFactory:
    """``with start_scripted(policy="rule", env=None, latency_ms=0, **options) as s:``"""

    def start(policy: str = "rule", env: object = None, **kwargs: object):
        return serve_in_thread(create_app(policy, env, **kwargs))

    return start


@pytest.fixture(scope="module")
def rule_server(start_scripted: ScriptedFactory) -> Iterator[RunningServer]:
    with start_scripted("rule") as running:
        yield running


@pytest.fixture
def http(rule_server: RunningServer) -> Iterator[httpx.Client]:
    """A client of the rule server, with its faults reset to ok."""
    with httpx.Client(base_url=rule_server.url, timeout=30) as client:
        client.post("/admin/faults", json={"mode": "ok", "latency_ms": 0}).raise_for_status()
        yield client
