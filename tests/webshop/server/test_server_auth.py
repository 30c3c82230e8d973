"""The optional session token of the env server (real uvicorn servers)."""

from __future__ import annotations

import httpx
import pytest

from app.core.env_client import EnvError
from app.environments.webshop.client import EnvClient

TOKEN = "s3cret"


def test_without_token_session_routes_401_and_probes_stay_open(start_server) -> None:
    with start_server(token=TOKEN) as running, httpx.Client(base_url=running.url) as client:
        for method, path, body in (
            ("POST", "/sessions", {}),
            ("GET", "/sessions/abc", None),
            ("POST", "/sessions/abc/step", {"action": "search[a]"}),
            ("POST", "/agentgym/create", None),
            ("POST", "/agl/reset", {}),
            ("POST", "/agl/step", {"session_id": "x", "action": "search[a]"}),
        ):
            refused = client.request(method, path, json=body)
            assert refused.status_code == 401, (path, refused.text)
            assert "WSRL_ENV_TOKEN" in refused.json()["detail"]
        wrong = client.post("/sessions", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert client.get("/health").json()["status"] == "ok"
        assert client.get("/goals", params={"limit": 1}).status_code == 200
        assert client.get("/agentgym/").status_code == 200


def test_env_client_sends_the_token(start_server) -> None:
    with start_server(token=TOKEN) as running:
        with EnvClient(running.url, token=TOKEN) as env:
            session = env.create_session(0)
            assert env.step(session.session_id, "search[a]").valid
            env.close_session(session.session_id)
        with EnvClient(running.url) as anonymous, pytest.raises(EnvError) as caught:
            anonymous.create_session(0)
        assert caught.value.status_code == 401
