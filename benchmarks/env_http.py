"""Env server over HTTP: start-up time, step latency per action type, concurrent throughput.

Starts ``wsrl env serve`` as a separate process on a free port (the client never shares a
GIL with the server), then measures:

1. start-up: seconds from launching the process to the first 200 from ``/health``
   (first with the catalog cache as found, then again with it warm), and to the reward's
   noun tagger ready (``/health``'s ``noun_tagger.state``: spaCy loads in the background;
   ``WSRL_NOUN_TAGGER=rules`` for the rule tagger);
2. latency: p50 / p99 of ``POST /sessions/{id}/step`` per action type, one keep-alive
   httpx client, episodes played one after the other, and the server process's CPU per
   request meanwhile (steps, session opening and closing, the pages' actions);
3. throughput: step requests per second with ``--concurrency`` sessions stepping at once
   (one thread and keep-alive client per session, spread over ``--client-procs``
   processes, each session looping short episodes).

    .venv/bin/python benchmarks/env_http.py --products 2000 --episodes 200 --seconds 10

Target: step p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx
import psutil

ASIN = re.compile(r"^[a-z0-9]{10}$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, port: int) -> tuple[subprocess.Popen, float]:
    """Launch the CLI; returns the process and seconds until /health answered 200."""
    cmd = [
        sys.executable, "-m", "app.cli", "env", "serve", "--port", str(port),
        "--max-sessions", str(max(10_000, args.concurrency * 4)),
    ]  # fmt: skip
    cmd += ["--data", str(args.data)] if args.data else ["--products", str(args.products)]
    env = {**os.environ, "WSRL_DATA_DIR": str(args.state), "WSRL_LOG_LEVEL": "WARNING"}
    started = time.perf_counter()
    log_path = args.state / f"server-{port}.log"  # a file, not a pipe: it never fills up
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}/health"
    deadline = started + args.startup_timeout
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc, time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("server did not become healthy in time")


def tagger_ready(port: int, started: float, timeout_s: float = 120) -> tuple[str, float]:
    """(tagger name, seconds from ``started`` until ``/health`` says it is ready)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        tagger = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()["noun_tagger"]
        if tagger["state"] != "loading":
            return tagger["name"], time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError("the noun tagger did not load in time")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def episode_actions(client: httpx.Client, sid: str, query: str, record) -> None:
    """One scripted tour of every page kind, each step timed under its action type."""

    def step(kind: str, action: str) -> dict:
        t0 = time.perf_counter()
        r = client.post(f"/sessions/{sid}/step", json={"action": action})
        record(kind, time.perf_counter() - t0)
        r.raise_for_status()
        return r.json()

    def clickables() -> list[str]:
        return client.get(f"/sessions/{sid}/available_actions").json()["clickables"]

    step("search", f"search[{query}]")
    step("next", "click[next >]")
    step("prev", "click[< prev]")
    products = [c for c in clickables() if ASIN.match(c)]
    step("invalid", "click[nothing to click]")
    if not products:
        return
    step("item", f"click[{products[0]}]")
    options = [c for c in clickables() if c not in {"back to search", "< prev", "description",
                                                     "features", "reviews", "buy now"}]  # fmt: skip
    if options:
        step("option", f"click[{options[0]}]")
    step("subpage", "click[description]")
    step("prev", "click[< prev]")
    step("buy", "click[buy now]")


def measure_latency(url: str, episodes: int) -> tuple[dict[str, list[float]], int]:
    """The seconds of each request by action type, and how many requests were sent."""
    timings: dict[str, list[float]] = defaultdict(list)
    sent = [0]

    def record(kind: str, seconds: float) -> None:
        timings[kind].append(seconds)

    def count(request: httpx.Request) -> None:
        sent[0] += 1

    hooks = {"request": [count]}
    with httpx.Client(base_url=url, timeout=30, event_hooks=hooks) as client:
        goals = client.get("/goals", params={"limit": 1000}).json()["goals"]
        for i in range(episodes):
            goal = goals[i % len(goals)]
            t0 = time.perf_counter()
            created = client.post("/sessions", json={"goal_id": goal["id"]})
            record("create", time.perf_counter() - t0)
            sid = created.json()["session_id"]
            words = goal["instruction"].split(" with ")[0].split()[-6:]
            episode_actions(client, sid, " ".join(words), record)
            client.delete(f"/sessions/{sid}")
    return timings, sent[0]


def _throughput_worker(url: str, sessions: int, offset: int, stride: int, seconds: float):
    """One client process: ``sessions`` threads, each with its own keep-alive client."""
    counts = [0, 0]
    lock = threading.Lock()
    with httpx.Client(base_url=url, timeout=60) as probe:
        goals = probe.get("/goals", params={"limit": 1000}).json()["goals"]
    stop_at = time.perf_counter() + seconds

    def loop(n: int) -> None:
        steps = requests = 0
        i = n
        with httpx.Client(base_url=url, timeout=60) as client:
            while time.perf_counter() < stop_at:
                goal = goals[i % len(goals)]
                i += stride
                sid = client.post("/sessions", json={"goal_id": goal["id"]}).json()["session_id"]
                query = " ".join(goal["instruction"].split(" with ")[0].split()[-6:])
                actions = [f"search[{query}]", "click[next >]", "click[< prev]",
                           "click[back to search]", f"search[{goal['asin'].lower()}]"]  # fmt: skip
                for action in actions:
                    client.post(f"/sessions/{sid}/step", json={"action": action}).raise_for_status()
                    steps += 1
                client.delete(f"/sessions/{sid}")
                requests += len(actions) + 2
        with lock:
            counts[0] += steps
            counts[1] += requests

    threads = [threading.Thread(target=loop, args=(offset + k,)) for k in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts[0], counts[1]


def measure_throughput(url: str, concurrency: int, seconds: float, procs: int) -> tuple[int, int]:
    """(step requests, all requests) completed in ``seconds`` by ``concurrency`` sessions,
    spread over ``procs`` client processes so that the client is not the bottleneck."""
    procs = max(1, min(procs, concurrency))
    shares = [concurrency // procs + (k < concurrency % procs) for k in range(procs)]
    offsets = [sum(shares[:k]) for k in range(procs)]
    with ProcessPoolExecutor(max_workers=procs) as pool:
        futures = [
            pool.submit(_throughput_worker, url, shares[k], offsets[k], concurrency, seconds)
            for k in range(procs)
        ]
        results = [f.result() for f in futures]
    return sum(r[0] for r in results), sum(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=2000, help="generated catalog size")
    parser.add_argument("--data", type=Path, default=None, help="original files instead")
    parser.add_argument("--state", type=Path, default=None, help="cache dir (default: temp)")
    parser.add_argument("--episodes", type=int, default=100, help="latency episodes")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent sessions")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput duration")
    parser.add_argument("--client-procs", type=int, default=4, help="client processes")
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    args = parser.parse_args()
    tmp = None
    if args.state is None:
        tmp = tempfile.TemporaryDirectory(prefix="wsrl-bench-")
        args.state = Path(tmp.name)
    args.state.mkdir(parents=True, exist_ok=True)

    source = args.data or f"generated catalog, {args.products} products"
    print(f"# env server over HTTP ({source})")
    port = free_port()
    proc, first = start_server(args, port)
    stop(proc)
    port = free_port()
    launched = time.perf_counter()
    proc, warm = start_server(args, port)
    tagger, ready = tagger_ready(port, launched)
    print(f"startup_to_healthy_first_s  {first:8.2f}   (catalog cache as found; cold if new)")
    print(f"startup_to_healthy_warm_s   {warm:8.2f}   (compiled catalog + index cached)")
    print(f"startup_to_tagger_ready_s   {ready:8.2f}   (noun tagger {tagger}, warm cache)")
    url = f"http://127.0.0.1:{port}"
    try:
        server = psutil.Process(proc.pid)
        before = server.cpu_times()
        timings, sent = measure_latency(url, args.episodes)
        after = server.cpu_times()
        cpu_s = (after.user + after.system) - (before.user + before.system)
        print(f"\n{'action':<10} {'n':>6} {'p50_ms':>8} {'p99_ms':>8} {'mean_ms':>8}")
        every_step: list[float] = []
        for kind, values in sorted(timings.items()):
            if kind != "create":
                every_step += values
            print(
                f"{kind:<10} {len(values):>6} {pct(values, 0.5) * 1e3:>8.2f} "
                f"{pct(values, 0.99) * 1e3:>8.2f} {statistics.fmean(values) * 1e3:>8.2f}"
            )
        print(
            f"{'ALL STEPS':<10} {len(every_step):>6} {pct(every_step, 0.5) * 1e3:>8.2f} "
            f"{pct(every_step, 0.99) * 1e3:>8.2f} {statistics.fmean(every_step) * 1e3:>8.2f}"
        )
        print(f"server CPU per request, one client: {1e6 * cpu_s / sent:.0f} us ({sent} requests)")
        steps, requests = measure_throughput(url, args.concurrency, args.seconds, args.client_procs)
        print(
            f"\nconcurrent sessions={args.concurrency} seconds={args.seconds:g}: "
            f"{steps / args.seconds:.0f} steps/s, {requests / args.seconds:.0f} requests/s"
        )
    finally:
        stop(proc)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
