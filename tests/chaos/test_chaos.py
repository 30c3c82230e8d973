"""``wsrl chaos`` for 3 minutes: every fault kind at least once, every invariant holds.

Worker hosts are network namespaces, so the run needs root (CI has it); elsewhere the test
is skipped with the reason. Its report is kept in the test's tmp dir and quoted on failure.
Three minutes, not the issue's five: CI's whole run must stay within an hour; the ten kinds
still come once each (one every 10-16 s), the link's 60 s cut and 2 minutes of slowness whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import REPO, WSRL, child_env

from app.chaos.faults import KINDS
from app.chaos.hosts import HostsUnavailable, check_available

pytestmark = pytest.mark.slow

try:
    check_available()
    UNAVAILABLE = ""
except HostsUnavailable as exc:
    UNAVAILABLE = str(exc)
REQUIRED = os.environ.get("CI_REQUIRES_CHAOS") == "1"
"""Set by .ci/run: there the run must happen, so a machine without namespaces fails it."""


@pytest.mark.timeout(1200)
def test_three_minutes_of_every_fault_lose_nothing(tmp_path: Path) -> None:
    if UNAVAILABLE:
        if REQUIRED:
            pytest.fail(f"CI requires the chaos run: {UNAVAILABLE}")
        pytest.skip(UNAVAILABLE)
    out = tmp_path / "chaos"
    options = "--duration 3m --every 10-16 --seed 1 --eval-every 4 --eval-goals 10 --settle 4m"
    command = [*WSRL, "chaos", *options.split(), "--out", str(out)]
    run = subprocess.run(
        command, env=child_env(), cwd=REPO, capture_output=True, text=True, timeout=1100
    )
    report_path = out / "report.json"
    assert report_path.is_file(), run.stdout[-3000:] + run.stderr[-5000:]
    report = json.loads(report_path.read_text())
    text = (out / "report.txt").read_text()
    assert run.returncode == 0, text + run.stderr[-3000:]
    assert {f["kind"] for f in report["faults"]} == set(KINDS), text
    assert not [f for f in report["faults"] if f["notes"]], text
    assert all(not violations for violations in report["invariants"].values()), text
    figures = report["figures"]
    assert figures["lost"] == 0 and figures["duplicated"] == 0, text
    assert figures["train_steps"] >= 1 and report["versions_checked"] >= 2, text
    assert all(kind["recovered"] == kind["count"] for kind in report["by_kind"].values()), text


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--duration", "soon"], "a duration such as 300, 300s, 5m or 1h"),
        (["--every", "90-20"], "LOW-HIGH with 0 < LOW <= HIGH"),
    ],
)
def test_a_bad_duration_is_refused_before_anything_starts(option: list[str], says: str) -> None:
    run = subprocess.run(
        [*WSRL, "chaos", *option], env=child_env(), cwd=REPO, capture_output=True, text=True
    )
    if UNAVAILABLE:
        assert run.returncode == 1 and UNAVAILABLE in run.stderr
    else:
        assert run.returncode == 2 and says in run.stderr, run.stderr


def test_the_hosts_of_a_killed_run_are_removed_and_a_live_runs_kept() -> None:
    """A chaos run killed with -9 leaves its bridge and namespaces: the next run removes
    them (found when a killed run's bridge failed the next one). A live run's are kept."""
    if UNAVAILABLE:
        if REQUIRED:
            pytest.fail(f"CI requires the chaos hosts: {UNAVAILABLE}")
        pytest.skip(UNAVAILABLE)
    from app.chaos.hosts import HEAD_IP, HostNetwork

    def on_head_ip() -> list[str]:
        shown = ["ip", "-o", "addr", "show", "to", HEAD_IP]
        return subprocess.run(shown, capture_output=True, text=True).stdout.split()[1:2]

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "chaos"]
    alive = subprocess.Popen(sleeper)  # its argv names chaos, as `wsrl chaos`
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        HostNetwork(alive.pid, 1).create()
        with pytest.raises(HostsUnavailable, match=f"already on wsrl{alive.pid}br"):
            HostNetwork(os.getpid(), 1).create()
        HostNetwork(alive.pid, 1).remove()
        HostNetwork(dead.pid, 2).create()
        network = HostNetwork(os.getpid(), 1).create()
        try:
            assert on_head_ip() == [network.bridge]
            spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
            assert f"wsrl{dead.pid}h" not in spaces.stdout
            assert f"wsrl{os.getpid()}h0" in spaces.stdout
        finally:
            network.remove()
    finally:
        alive.kill()
        for owner in (alive.pid, dead.pid):
            HostNetwork(owner, 2).remove()
    assert on_head_ip() == []
