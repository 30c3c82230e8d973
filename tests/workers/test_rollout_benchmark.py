"""The rollout benchmark's measures (``benchmarks/rollout_throughput.py``): the hand-off,
the steady window and the workers' probe."""

from __future__ import annotations

import collections
import importlib.util
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import psutil

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "rollout_throughput.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("rollout_throughput", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(worker: str, start_s: float, finish_s: float) -> SimpleNamespace:
    t0 = datetime(2026, 11, 27, tzinfo=UTC)
    return SimpleNamespace(
        worker=worker,
        started_at=t0 + timedelta(seconds=start_s),
        finished_at=t0 + timedelta(seconds=finish_s),
    )


def test_the_hand_off_pairs_each_finish_with_the_start_that_replaces_it() -> None:
    """Two threads per process: each finished episode is replaced by the start two
    places later in its process, whatever the other process does."""
    rows = [
        _row("a", 0.0, 1.0),
        _row("a", 0.0, 1.1),
        _row("a", 1.02, 2.0),  # replaces the first: 20 ms
        _row("a", 1.15, 2.2),  # replaces the second: 50 ms
        _row("b", 0.5, 1.5),
        _row("b", 3.0, 4.0),  # b runs one at a time: 1.5 s after its first finish
    ]
    measured = _benchmark().handoff_ms(rows)
    assert round(measured["handoff_p50"]) == 50
    assert round(measured["handoff_p90"]) == 1500


def _settling_batch() -> list[SimpleNamespace]:
    """Process ``a`` runs two episodes at once, its first round's cycle 1.2 s and then
    1.05 s; process ``b`` one at a time, 1.5 s and then 1.0 s. Every episode plays 1 s."""
    a = [0.0, 0.0, 1.2, 1.2, 2.25, 2.25, 3.3, 3.3]
    b = [0.0, 1.5, 2.5, 3.5]
    return [_row("a", s, s + 1.0) for s in a] + [_row("b", s, s + 1.0) for s in b]


def test_the_steady_rate_counts_the_cycles_of_each_process_s_second_half() -> None:
    """``a``'s second half of cycles (the last three of six) are 1.05 s on two threads,
    ``b``'s (the last two of three) 1.0 s on one: the first round's longer cycles count
    in neither, and ``a``'s two threads starting together do not count as a shorter
    interval."""
    rate = _benchmark().steady_eps(_settling_batch())
    assert math.isclose(rate, 2 / 1.05 + 1 / 1.0, rel_tol=1e-6)  # microsecond times
    assert math.isnan(_benchmark().steady_eps(_settling_batch()[:-3]))  # b: no cycle


def test_the_cycles_by_round_show_the_start_up() -> None:
    """Round 0: a's two 1.2-s cycles and b's 1.5 s; then a's 1.05 s and b's 1.0 s."""
    cycles = _benchmark().cycles_by_round(_settling_batch())
    assert [round(c, 1) for c in cycles] == [1300.0, 1033.3, 1033.3]


def test_the_steal_share_counts_guest_time_once() -> None:
    """Of 200 ticks (100 user, of which 40 ran a guest, 50 idle, 50 stolen) a quarter
    was stolen: guest time is inside user time and is not added again."""
    times = collections.namedtuple("times", "user idle steal guest")
    share = _benchmark().steal_share(times(0, 0, 0, 0), times(100, 50, 50, 40))
    assert share == 0.25


def test_the_probe_answers_its_counters_when_asked(tmp_path: Path) -> None:
    """A process started with the probe (as the benchmark starts its workers) counts its
    Redis commands, its threads' CPU and the CPU and wall time inside a stage (here one
    that waits 50 ms), and gives them only when asked, on its socket."""
    prefix = tmp_path / "probe"
    script = (
        "import sys, time, types\n"
        "from redis.connection import Encoder, PythonRespSerializer\n"
        "import workers.rollout\n"
        "PythonRespSerializer(6000, Encoder('utf-8', 'strict', False).encode).pack('PING')\n"
        "waits = types.SimpleNamespace(current=lambda: time.sleep(0.05) or 1 / 0)\n"
        "try:\n"
        "    workers.rollout.played_protocol(types.SimpleNamespace(endpoints=waits))\n"
        "except ZeroDivisionError:\n"
        "    pass\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    benchmark = _benchmark()
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, **benchmark.probe_env(prefix)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        assert list(tmp_path.iterdir()) == [Path(f"{prefix}.{process.pid}.sock")]
        counts = benchmark._probe_counts(prefix, [process.pid])
        assert counts["redis:PING"] == 1
        assert counts["thread_cpu_us:MainThread"] > 0
        assert counts["wall_us:task/agent protocol"] >= 50_000
        assert counts["cpu_us:task/agent protocol"] < 50_000
    finally:
        process.kill()
        process.wait()


def test_the_round_trip_between_two_processes_is_timed_and_its_child_reaped() -> None:
    children = {child.pid for child in psutil.Process().children()}
    value = _benchmark().process_round_trip_us(trips=200)
    assert 1.0 < value < 50_000.0  # microseconds: a wake-up, not a timeout
    assert {child.pid for child in psutil.Process().children()} == children
