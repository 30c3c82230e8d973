"""``wsrl env serve`` as a real process: start-up log, health, an episode, shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"wsrl env serve exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            r = httpx.get(f"{url}/health", timeout=1)
            if r.status_code == 200:
                return r.json()
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(f"wsrl env serve not healthy in {timeout_s} s: {log.read_text()[-3000:]}")


@pytest.mark.slow
def test_env_serve_generated_catalog_logs_startup_and_serves(tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state"), "WSRL_LOG_LEVEL": "INFO"}
    env["WSRL_ENV_UNMATCHED"] = "refuse"
    cmd = [sys.executable, "-m", "app.cli", "env", "serve", "--port", str(port),
           "--products", "60", "--session-ttl", "30", "--max-sessions", "5"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        health = _wait_healthy(url, proc, log)
        assert health["products"] == 60
        assert health["goals"] > 0
        with httpx.Client(base_url=url) as client:
            created = client.post("/sessions", json={"goal_id": 0})
            assert created.status_code == 201
            sid = created.json()["session_id"]
            step = client.post(f"/sessions/{sid}/step", json={"action": "search[shirt]"})
            assert step.status_code == 200
            assert client.get("/agentgym/").json() == "ok"
            assert client.get("/agl/health").json()["status"] == "ok"
            unmatched = client.post("/agl/reset", json={"instruction": "a unicorn, please"})
            assert unmatched.status_code == 409, unmatched.text
            assert "WSRL_ENV_UNMATCHED=refuse" in unmatched.json()["error"]
            health = {**health, **client.get("/health").json()}
            assert (health["unmatched"], health["unmatched_instructions"]) == ("refuse", 1)
            for _ in range(4):
                client.post("/sessions")
            assert client.post("/sessions").status_code == 429  # --max-sessions 5
        text = log.read_text()
        assert f"loaded 60 products and {health['goals']} synthetic goals" in text
        assert "serving the WebShop env on" in text
        assert "refused a reset: no goal has the instruction 'a unicorn, please'" in text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # uvicorn re-raises the signal it handled once it has shut down: 130 = 128 + SIGINT.
    assert proc.returncode in (0, 130, -signal.SIGINT), log.read_text()[-3000:]
    assert "Application shutdown complete" in log.read_text()


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_two_servers_on_one_empty_data_dir_both_come_up(tmp_path: Path) -> None:
    """Both generate-or-wait for the same catalog at once; both serve the same one."""
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state")}
    running = []
    try:
        for name in ("a", "b"):
            port, log = _free_port(), tmp_path / f"serve-{name}.log"
            cmd = [sys.executable, "-m", "app.cli", "env", "serve", "--port", str(port),
                   "--products", "20000"]  # fmt: skip
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
            running.append((f"http://127.0.0.1:{port}", proc, log))
        healths = [_wait_healthy(url, proc, log, timeout_s=120) for url, proc, log in running]
        assert healths[0]["products"] == healths[1]["products"] == 20000
        assert healths[0]["goals"] == healths[1]["goals"] > 0
        for url, _, _ in running:
            with httpx.Client(base_url=url) as client:
                sid = client.post("/sessions", json={"goal_id": 0}).json()["session_id"]
                step = client.post(f"/sessions/{sid}/step", json={"action": "search[shirt]"})
                assert step.status_code == 200 and step.json()["info"]["valid"]
    finally:
        for _, proc, _ in running:
            _stop(proc)
    catalogs = tmp_path / "state" / "catalog"
    assert not [p for p in catalogs.rglob("*") if p.name.endswith(".tmp")]


def test_env_serve_refuses_data_with_products(tmp_path: Path) -> None:
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state")}
    cmd = [sys.executable, "-m", "app.cli", "env", "serve", "--data", str(tmp_path),
           "--products", "10"]  # fmt: skip
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "--data or --products, not both" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("setting", "health_tagger", "log_text"),
    [
        (None, {"name": "spacy", "exact": True}, "reward noun tagger: spacy"),
        (
            "rules",
            {"name": "rules", "exact": False},
            "reward noun tagger: rules (approximate, chosen)",
        ),
    ],
    ids=["default", "rules-chosen"],
)
def test_env_serve_names_its_reward_tagger_in_health_and_log(
    tmp_path: Path, setting: str | None, health_tagger: dict, log_text: str
) -> None:
    """The exact tagger by default (its model loads after the server answers); the rule
    tagger only when WSRL_NOUN_TAGGER chooses it, and then said so."""
    port, log = _free_port(), tmp_path / "serve.log"
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state"), "WSRL_LOG_LEVEL": "INFO"}
    env.pop("WSRL_NOUN_TAGGER", None)
    if setting:
        env["WSRL_NOUN_TAGGER"] = setting
    cmd = [sys.executable, "-m", "app.cli", "env", "serve", "--port", str(port),
           "--products", "40"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        health = _wait_healthy(url, proc, log)
        assert {k: health["noun_tagger"][k] for k in ("name", "exact")} == health_tagger
        deadline = time.monotonic() + 60
        while health["noun_tagger"]["state"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
            health = httpx.get(f"{url}/health").json()
        assert health["noun_tagger"]["state"] == "ready"
        assert log_text in log.read_text()
    finally:
        _stop(proc)


def test_env_serve_refuses_an_unknown_tagger(tmp_path: Path) -> None:
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state"), "WSRL_NOUN_TAGGER": "auto"}
    cmd = [sys.executable, "-m", "app.cli", "env", "serve", "--products", "10"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "noun_tagger" in result.stdout + result.stderr
    assert not (tmp_path / "state" / "catalog").exists()
