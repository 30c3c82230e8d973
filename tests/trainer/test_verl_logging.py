"""Our log lines in a process where verl was imported first (Ray's actors: the task runner)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

REPO = Path(__file__).resolve().parents[2]


def test_the_task_runners_lines_carry_our_format_after_verls_import() -> None:
    """verl's import configures the root logger with its own format (no logger names); the
    task runner's setup replaces it, so its step lines read like the driver's (seen on a
    GPU: ``INFO:<time>:enqueued 8 train rollouts``, from which logger no one could tell)."""
    code = (
        "import logging\n"
        "import verl\n"
        "from app.logging import setup_logging\n"
        "setup_logging(replace=True)\n"
        "logging.getLogger('trainer.loop').info('step 1 -> v1')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "WSRL_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "step 1 -> v1" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert " INFO trainer.loop: step 1 -> v1" in lines[0]
