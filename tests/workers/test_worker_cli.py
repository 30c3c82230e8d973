"""``wsrl enqueue`` / ``wsrl reconcile`` / ``wsrl worker`` as a person runs them (subprocesses)."""

from __future__ import annotations

import subprocess

import pytest
from helpers.processes import WSRL, child_env

from app.config import Settings

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
    assert "cannot read goals from http://127.0.0.1:9" in result.stderr


def test_enqueue_bad_goal_ids_is_a_clear_error(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "enqueue", "--goal-ids", "1,x")
    assert result.returncode == 1
    assert "--goal-ids must be comma-separated integers" in result.stderr


def test_worker_unknown_queue_is_refused(test_settings: Settings) -> None:
    result = _wsrl(test_settings, "worker", "--queues", "rollouts,nope")
    assert result.returncode == 1
    assert "unknown queues ['nope']" in result.stderr
