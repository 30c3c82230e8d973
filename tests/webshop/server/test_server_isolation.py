"""Sessions of one route family cannot be changed through another, and a full server
says so in ``/health`` (real uvicorn servers)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest


def test_agl_key_cannot_reset_an_agentgym_env(client: httpx.Client) -> None:
    env_idx = client.post("/agentgym/create").json()
    client.post("/agentgym/reset", json={"env_idx": env_idx, "session_id": 2})
    client.post("/agentgym/step", json={"env_idx": env_idx, "action": "search[shoes]"})
    before = client.get("/agentgym/observation", params={"env_idx": env_idx}).json()
    assert not before.startswith("WebShop [SEP] Instruction:"), "a results page, not the start"

    agl = client.post("/agl/reset", json={"session_id": f"ag-{env_idx}"})
    assert agl.status_code == 200 and agl.json()["session_id"] == f"ag-{env_idx}"
    step = client.post("/agl/step", json={"session_id": f"ag-{env_idx}", "action": "search[x]"})
    assert step.status_code == 200

    after = client.get("/agentgym/observation", params={"env_idx": env_idx}).json()
    assert after == before, "the AgentGym env was not touched"


def test_native_routes_cannot_step_or_delete_other_families_sessions(
    client: httpx.Client,
) -> None:
    env_idx = client.post("/agentgym/create").json()
    agl_id = client.post("/agl/reset", json={}).json()["session_id"]
    for foreign in (f"ag-{env_idx}", agl_id):
        step = client.post(f"/sessions/{foreign}/step", json={"action": "search[x]"})
        assert step.status_code == 404, step.text
        assert client.delete(f"/sessions/{foreign}").status_code == 404
        assert client.get(f"/sessions/{foreign}").status_code == 200, "reads stay open"
    assert env_idx in client.get("/agentgym/list_envs").json()


def test_health_reports_saturation(start_server) -> None:
    with (
        start_server(max_sessions=2, max_sessions_per_client=2) as running,
        httpx.Client(base_url=running.url) as client,
    ):
        health = client.get("/health").json()
        assert (health["status"], health["max_sessions"]) == ("ok", 2)
        ids = [client.post("/sessions", json={}).json()["session_id"] for _ in range(2)]
        assert client.post("/sessions", json={}).status_code == 429
        assert client.get("/health").json()["status"] == "saturated"
        assert client.get("/agl/health").json()["status"] == "saturated"
        client.delete(f"/sessions/{ids[0]}")
        assert client.get("/health").json()["status"] == "ok"


def test_one_client_cannot_take_every_session(start_server) -> None:
    """A flood from one address stops at its share; another address still gets sessions."""
    with start_server(max_sessions=6) as running:
        with httpx.Client(base_url=running.url) as flooder:
            codes = [flooder.post("/sessions", json={}).status_code for _ in range(8)]
            assert codes == [201] * 3 + [429] * 5
            refused = flooder.post("/agl/reset", json={})
            assert "too many live sessions from 127.0.0.1 (3)" in refused.json()["detail"]
        elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")  # another client address
        with httpx.Client(base_url=running.url, transport=elsewhere, timeout=10) as other:
            assert other.get("/health").json()["status"] == "ok"
            assert other.post("/sessions", json={}).status_code == 201


@pytest.mark.slow
def test_flood_of_10_000_sessions_leaves_room_for_other_clients(start_server) -> None:
    """The issue's flood at the default caps: 10,000 ``POST /sessions`` from one address
    get half of the 10,000 sessions; a worker on another address still plays."""

    def flood(requests: int) -> list[int]:
        with httpx.Client(base_url=running.url, timeout=30) as flooder:
            return [flooder.post("/sessions").status_code for _ in range(requests)]

    with start_server() as running:
        with ThreadPoolExecutor(8) as pool:
            codes = [code for part in pool.map(flood, [1250] * 8) for code in part]
        assert (codes.count(201), codes.count(429)) == (5_000, 5_000)
        elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=running.url, transport=elsewhere, timeout=30) as worker:
            health = worker.get("/health").json()
            assert (health["status"], health["sessions"]) == ("ok", 5_000)
            session = worker.post("/sessions", json={"goal_id": 0})
            assert session.status_code == 201, session.text
            sid = session.json()["session_id"]
            step = worker.post(f"/sessions/{sid}/step", json={"action": "search[shoes]"})
            assert step.status_code == 200 and step.json()["info"]["valid"]
