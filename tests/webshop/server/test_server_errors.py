"""Every bad input gets a clear 4xx, and the server keeps serving afterwards."""

from __future__ import annotations

import time

import httpx
import pytest


def assert_still_serving(client: httpx.Client) -> None:
    """A health check and a normal episode start + step still succeed."""
    health = client.get("/health")
    assert health.status_code == 200, health.text
    assert health.json()["status"] == "ok"
    created = client.post("/sessions", json={"goal_id": 0})
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    step = client.post(f"/sessions/{sid}/step", json={"action": "search[shirt]"})
    assert step.status_code == 200, step.text
    assert step.json()["info"]["valid"] is True
    client.delete(f"/sessions/{sid}")


def _detail(response: httpx.Response) -> str:
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    return body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("POST", "/sessions/nope/step", {"action": "search[x]"}),
        ("GET", "/sessions/nope", None),
        ("GET", "/sessions/nope/observation", None),
        ("GET", "/sessions/nope/available_actions", None),
    ],
)
def test_step_unknown_session_404(client, method, path, payload) -> None:
    r = client.request(method, path, json=payload)
    assert r.status_code == 404
    assert "unknown session" in _detail(r)
    assert_still_serving(client)


def test_expired_session_410_then_new_sessions_work(start_server) -> None:
    with start_server(session_ttl_s=0.3) as running, httpx.Client(base_url=running.url) as c:
        sid = c.post("/sessions", json={"goal_id": 0}).json()["session_id"]
        assert c.post(f"/sessions/{sid}/step", json={"action": "search[a]"}).status_code == 200
        time.sleep(0.5)
        r = c.post(f"/sessions/{sid}/step", json={"action": "search[a]"})
        assert r.status_code == 410
        assert "expired" in _detail(r)
        time.sleep(0.6)  # the background sweep has run by now: still 410, not 404
        assert c.get(f"/sessions/{sid}").status_code == 410
        assert c.get("/sessions/never-existed").status_code == 404
        assert_still_serving(c)


def test_session_kept_alive_by_use_does_not_expire(start_server) -> None:
    with start_server(session_ttl_s=0.4) as running, httpx.Client(base_url=running.url) as c:
        sid = c.post("/sessions", json={"goal_id": 0}).json()["session_id"]
        for _ in range(4):
            time.sleep(0.2)
            assert c.get(f"/sessions/{sid}").status_code == 200


def test_too_many_sessions_429_until_one_is_deleted(start_server) -> None:
    with (
        start_server(max_sessions=3, max_sessions_per_client=3) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        ids = [c.post("/sessions", json={"goal_id": i}).json()["session_id"] for i in range(3)]
        r = c.post("/sessions", json={"goal_id": 0})
        assert r.status_code == 429
        assert "too many live sessions" in _detail(r)
        assert c.post("/agentgym/create").status_code == 429
        assert c.post("/agl/reset", json={}).status_code == 429
        assert c.post(f"/sessions/{ids[0]}/step", json={"action": "search[a]"}).status_code == 200
        c.delete(f"/sessions/{ids[0]}")
        assert_still_serving(c)


def test_expired_sessions_free_their_slots(start_server) -> None:
    with (
        start_server(max_sessions=2, max_sessions_per_client=2, session_ttl_s=0.2) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        for _ in range(2):
            assert c.post("/sessions").status_code == 201
        time.sleep(0.3)
        assert c.post("/sessions").status_code == 201


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"action": "search[a]"', b"[1, 2]", b'"text"', b""],
)
def test_step_malformed_json_422(client, content) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    r = client.post(
        f"/sessions/{sid}/step", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422
    _detail(r)
    assert_still_serving(client)


@pytest.mark.parametrize(
    ("path", "payload", "expected"),
    [
        ("/sessions/{sid}/step", {"action": 5}, "action"),
        ("/sessions/{sid}/step", {"action": None}, "action"),
        ("/sessions/{sid}/step", {}, "action"),
        ("/sessions/{sid}/step", {"action": "search[a]", "extra": 1}, "extra"),
        ("/sessions", {"goal_id": "three"}, "goal_id"),
        ("/sessions", {"goal_id": True}, "goal_id"),
        ("/sessions", {"split": "train"}, "split and index"),
        ("/sessions", {"split": "dev", "index": 0}, "split"),
        ("/sessions", {"goal_id": 1, "split": "test", "index": 0}, "not both"),
        ("/agentgym/step", {"env_idx": "zero", "action": "x"}, "env_idx"),
    ],
)
def test_wrong_types_422_with_message(client, path, payload, expected) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    r = client.post(path.format(sid=sid), json=payload)
    assert r.status_code == 422, r.text
    assert expected in _detail(r)
    assert_still_serving(client)


def test_action_over_limit_422(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    r = client.post(f"/sessions/{sid}/step", json={"action": "search[" + "a" * 2_000 + "]"})
    assert r.status_code == 422
    assert "at most 2000 characters" in _detail(r)
    assert_still_serving(client)


def test_one_megabyte_action_refused_fast(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    action = "search[" + "x" * 1_000_000 + "]"
    started = time.perf_counter()
    r = client.post(f"/sessions/{sid}/step", json={"action": action})
    elapsed = time.perf_counter() - started
    assert r.status_code == 413
    assert "too large" in _detail(r)
    assert elapsed < 2.0
    assert client.get(f"/sessions/{sid}").json()["num_steps"] == 0
    assert_still_serving(client)


def test_one_megabyte_chunked_body_refused(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]

    def chunks():
        yield b'{"action": "search['
        for _ in range(100):
            yield b"y" * 10_000
        yield b']"}'

    r = client.post(
        f"/sessions/{sid}/step", content=chunks(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413
    assert_still_serving(client)


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("POST", "/sessions", {"goal_id": 10**9}),
        ("POST", "/sessions", {"goal_id": -1}),
        ("POST", "/sessions", {"split": "test", "index": 10**6}),
        ("GET", "/goals/999999", None),
        ("POST", "/agentgym/reset", "agentgym"),
        ("POST", "/agl/reset", {"session_id": 10**9}),
        ("POST", "/agl/reset", {"goal_id": 10**9}),
    ],
)
def test_unknown_goal_404(client, method, path, payload) -> None:
    if payload == "agentgym":
        env_idx = client.post("/agentgym/create").json()
        payload = {"env_idx": env_idx, "session_id": 10**9}
    r = client.request(method, path, json=payload)
    assert r.status_code == 404, r.text
    assert "goal" in _detail(r)
    assert_still_serving(client)


def test_huge_body_beyond_drain_limit_does_not_hurt_the_server(client) -> None:
    sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
    body = b'{"action": "' + b"z" * 20_000_000 + b'"}'
    try:
        r = client.post(
            f"/sessions/{sid}/step", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 413
    except httpx.TransportError:
        pass  # cut off mid-upload: the connection is dropped instead of reading 20 MB
    assert_still_serving(client)
