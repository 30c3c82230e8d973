"""Fixtures of the agent-side tests: real scripted LLM servers and settings for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from app.config import Settings
from app.scripted_llm import create_app
from app.webshop.server.runner import RunningServer, serve_in_thread

SettingsFactory = Callable[..., Settings]


@pytest.fixture(scope="module")
def rule_llm() -> Iterator[RunningServer]:
    """A scripted LLM server playing the rule policy (needs no catalog)."""
    with serve_in_thread(create_app("rule", None)) as running:
        yield running


@pytest.fixture
def llm_admin(rule_llm: RunningServer) -> Iterator[httpx.Client]:
    """The rule server's admin client; faults and latency reset to none for each test."""
    with httpx.Client(base_url=rule_llm.url, timeout=10) as client:
        client.post("/admin/faults", json={"mode": "ok", "latency_ms": 0}).raise_for_status()
        yield client


@pytest.fixture
def make_settings() -> SettingsFactory:
    """Settings with fast retries (``.env`` ignored); keyword arguments override."""

    def make(**overrides: object) -> Settings:
        values: dict[str, object] = {
            "llm_retry_budget_s": 10.0,
            "llm_backoff_initial_s": 0.05,
            "llm_backoff_max_s": 0.2,
            "llm_timeout_s": 10.0,
            "llm_paused_max_wait_s": 10.0,
            **overrides,
        }
        return Settings(_env_file=None, **values)

    return make
