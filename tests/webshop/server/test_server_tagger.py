"""``/health`` names the reward's noun tagger; one that failed to load is an error there."""

from __future__ import annotations

import time

import httpx

from app.webshop.env import WebShopEnv
from app.webshop.nouns import SpacyTagger, get_tagger
from app.webshop.server.app import create_app
from app.webshop.server.runner import serve_in_thread


def _env_with(webshop_env: WebShopEnv, tagger) -> WebShopEnv:
    return WebShopEnv(webshop_env.catalog, webshop_env.index, webshop_env.goal_kind, tagger)


def _health_once_ready(client: httpx.Client, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        body = client.get("/health").json()
        if body["noun_tagger"]["state"] != "loading" or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_health_names_the_exact_tagger_by_default(webshop_env, reference_episode) -> None:
    assert webshop_env.nouns.name == "spacy"
    with (
        serve_in_thread(create_app(webshop_env)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        body = _health_once_ready(client)
        assert body["status"] == "ok"
        assert body["noun_tagger"] == {"name": "spacy", "exact": True, "state": "ready"}


def test_health_names_the_rule_tagger_when_chosen(webshop_env) -> None:
    env = _env_with(webshop_env, get_tagger("rules"))
    with (
        serve_in_thread(create_app(env)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        body = client.get("/health").json()
        assert body["noun_tagger"] == {"name": "rules", "exact": False, "state": "ready"}


def test_a_tagger_that_failed_to_load_makes_health_503(webshop_env, reference_episode) -> None:
    env = _env_with(webshop_env, SpacyTagger(models=("json",)))  # no pipeline in there
    episode = reference_episode(0)
    with (
        serve_in_thread(create_app(env)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        deadline = time.monotonic() + 30
        while (r := client.get("/health")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.status_code == 503
        assert r.json()["status"] == "error"
        assert r.json()["noun_tagger"]["state"].startswith("failed: ")
        # A purchase is refused, not scored by another tagger.
        sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
        for action in episode.actions:
            step = client.post(f"/sessions/{sid}/step", json={"action": action})
        assert step.status_code == 503, step.text
        assert "failed to load" in step.json()["detail"]
        assert client.get(f"/sessions/{sid}").json()["reward"] in (None, 0.0)
