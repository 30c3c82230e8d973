"""``wsrl api serve`` as a real process, and ``wsrl show`` on committed rows."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import httpx
import pytest
from helpers.api_rows import AUTH, Rows
from helpers.processes import WSRL, ServiceProcess, child_env, free_port

from app.config import Settings
from app.db.lifecycle import AttemptStatus, RolloutStatus


@pytest.fixture
def served_api(api_settings: Settings, tmp_path) -> Iterator[ServiceProcess]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready(_: ServiceProcess) -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    process = ServiceProcess(
        name=f"api:{port}",
        args=[*WSRL, "api", "serve", "--port", str(port)],
        env=child_env(api_settings),
        log_path=tmp_path / "api.log",
        ready=ready,
        url=url,
    ).start()
    yield process
    process.stop()


def test_api_serve_answers_reads_writes_and_docs(served_api: ServiceProcess, rows: Rows) -> None:
    goal = rows.goal()
    assert httpx.get(f"{served_api.url}/docs").status_code == 200
    assert httpx.post(f"{served_api.url}/v1/rollouts", json={"goal_ids": [goal]}).status_code == 401
    created = httpx.post(f"{served_api.url}/v1/rollouts", json={"goal_ids": [goal]}, headers=AUTH)
    assert created.status_code == 201, created.text
    (rollout_id,) = created.json()["ids"]
    fetched = httpx.get(f"{served_api.url}/v1/rollouts/{rollout_id}")
    assert fetched.json()["goal_id"] == goal


def test_api_serve_without_services_fails_clearly(tmp_path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)
    result = subprocess.run(
        [*WSRL, "api", "serve", "--port", str(free_port())],
        env=child_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "No database" in result.stderr


def _show(settings: Settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*WSRL, "show", *args],
        env=child_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_show_prints_a_readable_trajectory(api_settings: Settings, rows: Rows) -> None:
    goal = rows.goal(instruction="i want [blue] shoes under 30 dollars")
    rollout = rows.rollout(goal, status=RolloutStatus.SUCCEEDED, reward=0.75)
    rows.attempt(
        rollout,
        1,
        status=AttemptStatus.SUCCEEDED,
        reward=0.75,
        steps=[
            {"action": "search[blue shoes]", "observation": "Page 1 [SEP] " + "x " * 200},
            {"action": "fly away", "observation": "Invalid action.", "valid": False},
            {"action": "click[Buy Now]", "observation": "Thank you", "reward": 0.75},
        ],
    )
    result = _show(api_settings, str(rollout))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "i want [blue] shoes under 30 dollars" in out
    assert "step 0 search[blue shoes]  (valid)" in out
    assert "step 1 fly away  (INVALID)" in out
    assert "click[Buy Now]" in out
    assert "reward 0.750" in out
    assert "..." in out  # the long observation is cut to a snippet
    assert f"dashboard: {api_settings.api_url}/dashboard/rollouts/{rollout}" in out


def test_show_unknown_rollout_fails_with_message(api_settings: Settings) -> None:
    missing = uuid.uuid4()
    result = _show(api_settings, str(missing))
    assert result.returncode == 1
    assert f"unknown rollout {missing}" in result.stderr


def test_show_bad_id_fails_with_message(api_settings: Settings) -> None:
    result = _show(api_settings, "not-an-id")
    assert result.returncode == 1
    assert "not a rollout id" in result.stderr
