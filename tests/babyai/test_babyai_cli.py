"""``wsrl env babyai`` as a real process: AgentGym's calls play an episode to its end."""

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


def test_env_babyai_serves_agentgyms_protocol(tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "state"), "WSRL_LOG_LEVEL": "INFO"}
    cmd = [sys.executable, "-m", "app.cli", "env", "babyai", "--port", str(port),
           "--max-turns", "3", "--max-envs", "2"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"wsrl env babyai exited {proc.returncode}: {log.read_text()}")
            try:
                if httpx.get(f"{url}/", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        with httpx.Client(base_url=url, timeout=30) as client:
            env_id = client.post("/create").json()["id"]
            reset = client.post("/reset", json={"id": env_id, "data_idx": 0}).json()
            assert reset["observation"].startswith("Your goal: ") and not reset["done"]
            answers = [
                client.post("/step", json={"id": env_id, "action": "turn left"}).json()
                for _ in range(3)
            ]
            assert [a["done"] for a in answers] == [False, False, True]  # --max-turns 3
            client.post("/create")
            assert client.post("/create").status_code == 429  # --max-envs 2
            assert client.post("/close", json={"id": env_id}).json() is True
        assert f"serving BabyAI (AgentGym's protocol) on http://127.0.0.1:{port}" in log.read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
