"""``make watch`` (``wsrl view``): the tmux session starts detached and each pane shows its
stream; without tmux, a message that says how to get it."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers.processes import REPO, WSRL, child_env

from app.config import Settings


def _capture(socket: str, pane: str) -> str:
    result = subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-t", pane], capture_output=True, text=True
    )
    return result.stdout


def _wait_for(socket: str, pane: str, text: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        screen = _capture(socket, pane)
        if text in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not in pane {pane}:\n{_capture(socket, pane)}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_session_shows_agent_steps_progress_and_env_log(
    test_settings: Settings, tmp_path: Path
) -> None:
    run = tmp_path / "logs" / "dev-20250101-000000"
    run.mkdir(parents=True)
    run.with_suffix(".log").write_text("step    1  v1  reward 0.250  success  25.0%\n")
    (run / "env.log").write_text("INFO: 127.0.0.1 - GET /health HTTP/1.1 200 OK\n")
    socket = f"wsrl-test-{uuid.uuid4().hex[:8]}"
    env = child_env(test_settings, data_dir=tmp_path, logs_channel="wsrl:logs:view-test")
    try:
        result = subprocess.run(
            [*WSRL, "view", "--no-attach", "--session", "w", "--socket", socket],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "attach with" in result.stdout
        _wait_for(socket, "w:0.0", "following wsrl:logs:view-test")
        _wait_for(socket, "w:0.1", "reward 0.250")
        _wait_for(socket, "w:0.2", "GET /health")
        titles = subprocess.run(
            ["tmux", "-L", socket, "list-panes", "-t", "w", "-F", "#{pane_title}"],
            capture_output=True,
            text=True,
        ).stdout
        assert "agent decisions" in titles and "env server" in titles
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def test_watch_without_tmux_says_how_to_install_it(tmp_path: Path) -> None:
    env = child_env(data_dir=tmp_path)
    env["PATH"] = str(tmp_path)  # no tmux (nor anything else) on the PATH
    result = subprocess.run(
        [*WSRL, "view", "--no-attach"], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "apt-get install tmux" in result.stderr and "make watch-steps" in result.stderr
