"""``docker/compose-test.sh`` says PASSED only when every step ran and passed.

The script runs for real, in a copy of the files it reads, with one stand-in: a
``docker`` on PATH (and a ``dockerd`` that is never run) whose ``build`` blocks or fails,
so that the run is stopped or broken in its build step as a ``timeout`` or a broken
Dockerfile would. Everything else docker answers succeeds silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_STUB = """#!/usr/bin/env bash
# Stand-in for the docker CLI: `... build ...` does what $STUB_BUILD says; the rest succeeds.
for arg in "$@"; do
  if [ "$arg" = build ]; then
    case "$STUB_BUILD" in
      block) exec sleep 600 ;;
      fail) echo "stub: the build broke" >&2; exit 1 ;;
    esac
  fi
done
exit 0
"""


@pytest.fixture
def script_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The script and what it reads, in a folder of their own, and its environment."""
    tree = tmp_path / "repo"
    (tree / "docker" / "wheels").mkdir(parents=True)
    for name in ("docker/compose-test.sh", "docker/local-images.sh", ".env.example"):
        shutil.copy(ROOT / name, tree / name)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"stand-in")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", DOCKER_STUB), ("dockerd", "#!/bin/sh\nexit 1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "COMPOSE_TEST_PYTHON": sys.executable,
        "COMPOSE_TEST_WHEELS": str(wheels),
        "TMPDIR": str(tmp_path),
    }
    return tree / "docker" / "compose-test.sh", env


def _start(script: Path, env: dict[str, str], build: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["bash", str(script)],
            env={**env, "STUB_BUILD": build},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as under `timeout`
        )


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {text!r} in the script's output:\n{log.read_text()}")
        time.sleep(0.05)


def _last_line(log: Path) -> str:
    return log.read_text().strip().splitlines()[-1]


def _build_pid(proc: subprocess.Popen) -> int:
    """The stand-in build's process (the stub's ``exec sleep``) in the script's group."""
    found = subprocess.run(
        ["pgrep", "-g", str(proc.pid), "-x", "sleep"], capture_output=True, text=True
    )
    pids = [int(p) for p in found.stdout.split()]
    assert len(pids) == 1, f"expected one build process in the group, found {pids}"
    return pids[0]


@pytest.mark.parametrize("sent_to", ["group", "script"])
def test_terminated_during_the_build_reports_failed_and_exits_non_zero(
    script_copy: tuple[Path, dict[str, str]], tmp_path: Path, sent_to: str
) -> None:
    """``timeout`` (and Ctrl-C) signal the whole process group: the build and the script;
    ``kill PID`` the script only, which reports once its build has ended."""
    script, env = script_copy
    log = tmp_path / "out.txt"
    proc = _start(script, env, "block", log)
    try:
        _wait_for(log, "building images", proc)
        time.sleep(0.3)  # the stand-in build is running
        build = _build_pid(proc)
        if sent_to == "group":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert proc.poll() is None  # bash waits for the command in the foreground
            os.kill(build, signal.SIGKILL)  # the build ends (failed)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert proc.returncode != 0, text
    assert "PASSED" not in text, text
    assert "FAILED" in _last_line(log) and "in step 'build'" in _last_line(log), text
    if sent_to == "group":
        assert "stopped by SIGTERM" in _last_line(log), text


def test_a_broken_build_reports_failed_with_its_step(
    script_copy: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    script, env = script_copy
    log = tmp_path / "out.txt"
    proc = _start(script, env, "fail", log)
    assert proc.wait(timeout=60) == 1, log.read_text()
    last = _last_line(log)
    assert "FAILED (status 1) in step 'build'" in last, log.read_text()
    assert "FAIL: build" in log.read_text()
