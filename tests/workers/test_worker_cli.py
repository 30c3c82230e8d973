"""``wsrl enqueue`` / ``wsrl reconcile`` / ``wsrl worker`` as a person runs them (subprocesses)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.processes import WSRL, child_env

from app.config import Settings
from app.supervisor import node_names

pytestmark = pytest.mark.slow


def _wsrl(settings: Settings, *args: str, **overrides: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*WSRL, *args],
        env=child_env(settings, **overrides),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_reconcile_once_reports_what_it_did(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "reconcile", "--once")
    assert result.returncode == 0, result.stderr
    assert "resent" in result.stdout and "attempts marked lost" in result.stdout


def test_enqueue_with_unreachable_env_is_a_clear_error(test_settings: Settings) -> None:
    result = _wsrl(
        test_settings, "enqueue", "--split", "train", "--count", "2", env_url="http://127.0.0.1:9"
    )
    assert result.returncode == 1
    assert "env server http://127.0.0.1:9 unreachable: GET /goals" in result.stderr


def test_enqueue_bad_goal_ids_is_a_clear_error(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "enqueue", "--goal-ids", "1,x")
    assert result.returncode == 1
    assert "--goal-ids must be comma-separated integers" in result.stderr


def test_worker_unknown_queue_is_refused(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "worker", "--queues", "rollouts,nope")
    assert result.returncode == 1
    assert "unknown queues ['nope']" in result.stderr


def test_worker_processes_start_n_nodes_and_stop_on_sigterm(
    test_settings: Settings, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*WSRL, "worker", "--processes", "2", "--concurrency", "2", "--name", "multi@%h"],
            env=child_env(test_settings),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 90
            while log.read_text().count(" ready.") < 2 and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-2000:]
                time.sleep(0.5)
            text = log.read_text()
            assert text.count(" ready.") == 2, text[-2000:]
            assert "multi-0@" in text and "multi-1@" in text
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(90) == 0, log.read_text()[-2000:]


def test_worker_zero_processes_is_refused(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "worker", "--processes", "0")
    assert result.returncode == 2
    assert "--processes" in result.stderr


def test_node_names_put_the_index_before_the_host() -> None:
    assert node_names("w@%h", 2) == ["w-0@%h", "w-1@%h"]
    assert node_names("plain", 1) == ["plain-0"]
