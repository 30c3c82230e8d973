"""Rollout throughput: episodes/s vs concurrency, as a ratio to the ideal.

Runs the real deployment in subprocesses (env server, scripted LLM with a fixed latency
per call playing ``oracle-long``, which buys on step ``--episode-steps`` (10), ``wsrl
worker`` processes with the threads pool) against a scratch PostgreSQL
database and a Redis db of its own, and for each concurrency C enqueues ``C x rounds``
rollouts and measures:

- ``eps``: finished episodes per second, from the first start to the last finish;
- ``steady``: the same ratio in the steady state only, from each worker process's cycle
  (an episode's start to the next start on its thread) over the second half of its
  starts (:func:`steady_eps`). A
  batch enqueued at once starts every thread together, and with a stand-in answering
  every call in the same time the episodes keep in step for the first rounds: their
  steps, finishes and starts come in waves that queue for the two cores, and the
  start-to-start cycle of a round (printed by round) falls for 3-4 rounds before it
  settles, as the order each wave is served in spreads the episodes apart. The
  whole-batch ``ratio`` counts those rounds, the batch's ramp-up and its ragged end;
- ``ideal``: ``C / (mean steps x LLM latency)``, what C threads would do if an episode
  cost nothing but its LLM calls; ``ratio = eps / ideal``. It bounds the run only while
  the LLM answers at most C calls at once, which the stand-in counts and the run prints;
- the share of an episode's wall time (attempt start to finish) spent in the LLM, in the
  env and elsewhere (agent, persistence), and the idle share of the worker threads
  (``1 - sum(episode wall) / (C x run wall)``: queue hand-off and start-up);
- ``ovh%``: the per-episode overhead (queue + env + agent + persistence) as a share of
  the threads' wall time, ``1 - sum(LLM call time) / (C x run wall)``; the ratio to the
  ideal is about ``1 - ovh%`` when calls take their nominal latency;
- the hand-off (:func:`handoff_ms`): how long a freed worker thread waits for its next
  episode, which is most of the idle share.

Then, per episode of the measured batch (the warm-up batch excluded), the CPU by
component and the work behind it:

- CPU ms: the worker processes and the env server and scripted LLM (psutil); the
  Postgres backends serving the workers (found through the workers' TCP client ports in
  ``pg_stat_activity``); the Redis server (``INFO cpu``, server-wide: other users of the
  same Redis count too). ``own`` is workers + Postgres + Redis, the data plane's CPU;
- the SQL statements (by verb), commits and rollbacks the workers issued, the Redis
  commands they sent (by name, BRPOPs and pipelined commands included) and their HTTP
  requests, and the CPU of each worker thread (the Celery consumer is ``MainThread``, the
  episodes run in ``ThreadPoolExecutor``): counted inside the workers by
  ``benchmarks/probe/sitecustomize.py``, loaded only by this benchmark and read only
  before and after the batch (``pg_stat_statements`` needs ``shared_preload_libraries``);
- Postgres' side (``pg_stat_database`` of the scratch database, so only this run):
  commits, rows inserted/updated/fetched, and the database's growth in bytes; and Redis'
  server-wide ``commandstats`` calls.

Targets: ratio >= 0.9 at 32 and >= 0.8 at 128 on a 2-core machine; the data plane's own
CPU per 10-step episode <= 15 ms.

    python benchmarks/rollout_throughput.py                  # 1, 8, 32, 128
    python benchmarks/rollout_throughput.py --levels 1,8 --rounds 2   # quick

Database and Redis come from the settings (``WSRL_DATABASE_URL`` / ``WSRL_REDIS_URL`` or
the embedded services); a database ``wsrl_bench_<hex>`` is created and dropped, and Redis
db ``--redis-db`` (default 12; ``gateway_external.py`` uses 13) is used for the queues;
its rollout queues are deleted at start. Nothing else is touched; a policy endpoint
published in that db (another benchmark's) would route the workers' calls away from the
scripted LLM, so the run refuses to start then.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg
import redis
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import admin_url, scratch_database  # noqa: E402
from helpers.processes import (  # noqa: E402
    celery_worker,
    env_server,
    scripted_llm,
)

from app.config import Settings, get_settings  # noqa: E402
from app.core.celery import QUEUES, create_celery  # noqa: E402
from app.core.endpoint import ENDPOINT_KEY  # noqa: E402
from app.core.enqueue import enqueue_rollouts  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.lifecycle import AttemptStatus  # noqa: E402
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step  # noqa: E402
from app.db.session import make_engine, make_sessionmaker, session_scope  # noqa: E402
from app.environments.webshop.client import EnvClient  # noqa: E402
from app.environments.webshop.goals import sync_goals  # noqa: E402


def measure(sessions, ids: list[uuid.UUID], concurrency: int, llm_s: float) -> dict[str, float]:
    with session_scope(sessions) as session:
        rows = session.execute(
            select(Attempt.id, Attempt.worker, Attempt.started_at, Attempt.finished_at).where(
                Attempt.rollout_id.in_(ids), Attempt.status == AttemptStatus.SUCCEEDED
            )
        ).all()
        attempt_ids = [r.id for r in rows]
        llm_ms = session.scalar(
            select(func.sum(LlmCall.latency_ms)).where(LlmCall.attempt_id.in_(attempt_ids))
        )
        env_ms = session.scalar(
            select(func.sum(Step.info["env_latency_ms"].as_float())).where(
                Step.attempt_id.in_(attempt_ids)
            )
        )
        steps = session.scalar(select(func.avg(Rollout.num_steps)).where(Rollout.id.in_(ids)))
        call_ms = session.scalar(
            select(func.avg(LlmCall.latency_ms)).where(LlmCall.attempt_id.in_(attempt_ids))
        )
    first = min(r.started_at for r in rows)
    last = max(r.finished_at for r in rows)
    run_s = (last - first).total_seconds()
    walls = [(r.finished_at - r.started_at).total_seconds() for r in rows]
    busy_s = sum(walls)
    eps = len(rows) / run_s
    ideal = concurrency / (float(steps) * llm_s)
    return {
        "episodes": len(rows),
        "steps": float(steps),
        "episode_s": statistics.mean(walls),
        "call_ms": float(call_ms or 0),
        "eps": eps,
        "ideal": ideal,
        "ratio": eps / ideal,
        "steady": steady_eps(rows) / ideal,
        "cycles": cycles_by_round(rows),
        "llm_share": (llm_ms or 0) / 1000 / busy_s,
        "env_share": (env_ms or 0) / 1000 / busy_s,
        "other_share": 1 - ((llm_ms or 0) + (env_ms or 0)) / 1000 / busy_s,
        "idle_share": max(0.0, 1 - busy_s / (concurrency * run_s)),
        "overhead_share": 1 - (llm_ms or 0) / 1000 / (concurrency * run_s),
        **handoff_ms(rows),
    }


def handoff_ms(rows) -> dict[str, float]:
    """How long a worker process's freed thread waits for its next episode: in each
    process, the i-th episode to finish is replaced by the (c + i)-th to start, ``c`` being
    the episodes it runs at once; from the finish transaction's start to the start
    transaction's (Postgres' ``now()``), median and 90th percentile over every finish
    that was replaced (the last ``c`` of each process were not). It holds the finish's
    commit, the acknowledgement, the broker's delivery of the next message and the
    pool's start of it."""
    gaps: list[float] = []
    for worker_rows in _by_worker(rows).values():
        peak, starts = _slots(worker_rows)
        finishes = sorted(r.finished_at.timestamp() for r in worker_rows)
        gaps.extend(
            1000 * (starts[peak + i] - finish)
            for i, finish in enumerate(finishes)
            if peak + i < len(starts)
        )
    if not gaps:
        return {"handoff_p50": float("nan"), "handoff_p90": float("nan")}
    gaps.sort()
    return {
        "handoff_p50": gaps[len(gaps) // 2],
        "handoff_p90": gaps[int(len(gaps) * 0.9)],
    }


def steady_eps(rows) -> float:
    """Episodes per second in the steady state: in each worker process running ``c``
    episodes at once, ``c`` over the mean cycle (:func:`slot_cycles`) of the second half
    of its starts, summed over the processes; NaN when a process has no such cycle.

    The first half is left out as the batch's start-up: a batch enqueued at once starts
    every thread together, and its episodes keep in step for the first rounds (the
    module docstring). Cycles are counted rather than episodes in a window: a window's
    edges are the latest of many threads (the last to start, the last start), later
    than a typical one by more the longer the batch has run, and starts come in waves,
    so a count between two of them says more about the waves than about the rate."""
    total = 0.0
    for worker_rows in _by_worker(rows).values():
        peak, cycles = slot_cycles(worker_rows)
        second_half = cycles[len(cycles) // 2 :]
        if not second_half:
            return float("nan")
        total += peak / (statistics.mean(second_half) / 1000)
    return total


def slot_cycles(worker_rows) -> tuple[int, list[float]]:
    """``(c, cycles)`` of one worker process running at most ``c`` episodes at once: the
    milliseconds from each start to the start of the episode that replaced it on its
    thread, in start order (the i-th start is replaced by the (c + i)-th)."""
    peak, starts = _slots(worker_rows)
    return peak, [1000 * (starts[i + peak] - starts[i]) for i in range(len(starts) - peak)]


def _slots(worker_rows) -> tuple[int, list[float]]:
    """``(c, starts)`` of one worker process: the most episodes it ran at once (its
    threads) and its start times, in order."""
    starts = sorted(r.started_at.timestamp() for r in worker_rows)
    return max(running for _, running in _running(worker_rows)), starts


def cycles_by_round(rows) -> list[float]:
    """The mean cycle (:func:`slot_cycles`) by round, round r holding each process's
    starts ``r c`` to ``(r + 1) c - 1``: what the start-up costs shows as the first
    rounds' longer cycles."""
    by_round: dict[int, list[float]] = collections.defaultdict(list)
    for worker_rows in _by_worker(rows).values():
        peak, cycles = slot_cycles(worker_rows)
        for i, cycle in enumerate(cycles):
            by_round[i // peak].append(cycle)
    return [statistics.mean(by_round[r]) for r in sorted(by_round)]


def _by_worker(rows) -> dict[str, list]:
    by_worker: dict[str, list] = collections.defaultdict(list)
    for r in rows:
        by_worker[r.worker].append(r)
    return by_worker


def _running(rows):
    """``(time, episodes running just after it)`` at every start and finish, in order."""
    events = sorted(
        [(r.started_at.timestamp(), 1) for r in rows]
        + [(r.finished_at.timestamp(), -1) for r in rows]
    )
    running = 0
    for at, change in events:
        running += change
        yield at, running


PROBE = REPO / "benchmarks" / "probe"


def probe_env(prefix: Path) -> dict[str, str]:
    """The variables that load the probe into a process, its socket at ``<prefix>.<pid>.sock``."""
    return {
        "WSRL_BENCH_PROBE": str(prefix),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")])),
    }


def _probe_counts(prefix: Path, pids: list[int]) -> collections.Counter[str]:
    """The counters of the workers' probes now (see ``benchmarks/probe``), summed."""
    total: collections.Counter[str] = collections.Counter()
    for pid in pids:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(10)
            probe.connect(f"{prefix}.{pid}.sock")
            total.update(json.loads(b"".join(iter(lambda: probe.recv(65536), b""))))
    return total


def _own_ports() -> set[int]:
    return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.laddr}


def _postgres_backends(admin, database: str) -> list[int]:
    """Backend pids of this database serving other processes than this one (the workers)."""
    own = _own_ports()
    rows = admin.execute(
        "SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s AND pid <> "
        "pg_backend_pid()",
        (database,),
    ).fetchall()
    return [pid for pid, port in rows if port not in own]


_PG_STATS = (
    "xact_commit",
    "xact_rollback",
    "tup_inserted",
    "tup_updated",
    "tup_fetched",
    "tup_returned",
)


def _server_snapshot(admin, broker, database: str) -> dict:
    """CPU and counters of the Postgres backends (per pid) and the Redis server."""
    backends = {}
    for pid in _postgres_backends(admin, database):
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        backends[pid] = times.user + times.system
    stats = admin.execute(
        f"SELECT {', '.join(_PG_STATS)}, pg_database_size(datname) FROM pg_stat_database "
        "WHERE datname = %s",
        (database,),
    ).fetchone()
    cpu = broker.info("cpu")
    commands = {
        name.removeprefix("cmdstat_"): value["calls"]
        for name, value in broker.info("commandstats").items()
    }
    return {
        "pg_cpu": backends,
        "pg": dict(zip([*_PG_STATS, "db_bytes"], stats, strict=True)),
        "redis_cpu": cpu["used_cpu_sys"] + cpu["used_cpu_user"],
        "redis_commands": commands,
    }


def _server_delta(before: dict, after: dict) -> dict:
    # A backend that started during the batch counts whole; one that ended is lost (the
    # workers' pools hold their connections, so none should).
    pg_cpu = sum(cpu - before["pg_cpu"].get(pid, 0.0) for pid, cpu in after["pg_cpu"].items())
    return {
        "pg_cpu": pg_cpu,
        "pg": {k: after["pg"][k] - before["pg"][k] for k in after["pg"]},
        "redis_cpu": after["redis_cpu"] - before["redis_cpu"],
        "redis_commands": collections.Counter(after["redis_commands"])
        - collections.Counter(before["redis_commands"]),
    }


def run_level(
    log_dir: Path,
    settings: Settings,
    sessions,
    goal_ids: list[int],
    *,
    concurrency: int,
    processes: int,
    rounds: int,
    llm_s: float,
    services: list,
    admin,
    broker,
) -> dict[str, float]:
    threads = max(1, concurrency // processes)
    probe = log_dir / f"probe-{concurrency}"
    workers = [
        celery_worker(
            log_dir,
            settings,
            concurrency=threads,
            name=f"bench{concurrency}-{i}",
            extra_env=probe_env(probe),
        )
        for i in range(processes)
    ]
    database = make_url(settings.database_url).database
    for worker in workers:
        worker.start()
    try:
        celery = create_celery(settings)
        # Warm-up: one episode per thread builds each process's clients and pools.
        _run_batch(sessions, celery, settings, goal_ids, concurrency)
        pids = [w.pid for w in workers]
        counts_before = _probe_counts(probe, pids)
        server_before = _server_snapshot(admin, broker, database)
        before = {name: _cpu_s(p) for name, p in _cpu_groups(workers, services).items()}
        calls_before, llm_s_before, _ = _stand_in_served(services[1].url, reset_peak=True)
        ids = _run_batch(sessions, celery, settings, goal_ids, concurrency * rounds)
        calls_after, llm_s_after, peak = _stand_in_served(services[1].url)
        after = {name: _cpu_s(p) for name, p in _cpu_groups(workers, services).items()}
        server = _server_delta(server_before, _server_snapshot(admin, broker, database))
        counts = _probe_counts(probe, pids)
        counts.subtract(counts_before)
        result = measure(sessions, ids, concurrency, llm_s)
        calls = calls_after - calls_before
        result["llm_own_ms"] = 1000 * (llm_s_after - llm_s_before) / calls if calls else math.nan
        result["llm_peak"] = peak
        n = len(ids)
        for name in before:
            result[f"cpu_{name}_ms"] = 1000 * (after[name] - before[name]) / n
        result["cpu_pg_ms"] = 1000 * server["pg_cpu"] / n
        result["cpu_redis_ms"] = 1000 * server["redis_cpu"] / n
        result["cpu_own_ms"] = sum(result[f"cpu_{k}_ms"] for k in ("workers", "pg", "redis"))
        result["work"] = {
            "probe": {k: v / n for k, v in sorted(counts.items()) if v},
            "pg": {k: v / n for k, v in server["pg"].items()},
            "redis_server_calls": {
                k: v / n for k, v in server["redis_commands"].most_common() if v / n >= 0.05
            },
        }
        return result
    finally:
        for worker in workers:
            worker.stop()


def _stand_in_served(llm_url: str, *, reset_peak: bool = False) -> tuple[int, float, int]:
    """The completions the scripted LLM answered so far, its own seconds on them (arrival
    to answer, its latency included) and the most it answered at once since the last
    ``reset_peak`` (which starts a new count)."""
    root = llm_url.removesuffix("/").removesuffix("/v1")
    if reset_peak:
        request = urllib.request.Request(f"{root}/admin/stats/reset-peak", method="POST")
        urllib.request.urlopen(request, timeout=10).close()
    with urllib.request.urlopen(f"{root}/admin/stats", timeout=10) as answer:
        stats = json.load(answer)
    return stats["completions"], stats["completion_s"], stats["peak_in_flight"]


def _cpu_groups(workers, services) -> dict[str, list[int]]:
    return {
        "workers": [w.pid for w in workers],
        "env": [services[0].pid],
        "llm": [services[1].pid],
    }


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by the processes."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _run_batch(
    sessions, celery, settings: Settings, goal_ids: list[int], count: int
) -> list[uuid.UUID]:
    """Enqueue ``count`` rollouts and wait until all are final.

    The poll counts final rollouts in the scratch database, where every earlier batch is
    already final, instead of asking about this batch's ids: an ``IN`` over 1,280 ids
    four times a second took a fifth of a core, from the two the pipeline is measured on.
    """
    goals = [goal_ids[i % len(goal_ids)] for i in range(count)]
    final = select(func.count()).where(Rollout.status.in_(["succeeded", "failed"]))
    with session_scope(sessions) as session:
        before = session.scalar(final) or 0
        ids = enqueue_rollouts(session, celery, goal_ids=goals, settings=settings)
    deadline = time.monotonic() + 600
    while True:
        with session_scope(sessions) as session:
            done = (session.scalar(final) or 0) - before
        if done == len(ids):
            return ids
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done}/{len(ids)} rollouts finished after 600 s")
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,8,32,128", help="Concurrencies to measure.")
    parser.add_argument("--rounds", type=int, default=12, help="Episodes per thread per level.")
    parser.add_argument("--llm-ms", type=float, default=100.0, help="Scripted LLM latency.")
    parser.add_argument("--processes", type=int, default=2, help="Worker processes (levels >= 8).")
    parser.add_argument(
        "--episode-steps", type=int, default=10, help="Steps of each episode (oracle-long)."
    )
    parser.add_argument("--redis-db", type=int, default=12, help="Redis db for the queues.")
    args = parser.parse_args()
    round_trip_us = process_round_trip_us()  # forked before any thread starts

    base = get_settings()
    server_url = base.resolved_database_url()
    redis_url = urlsplit(base.resolved_redis_url())._replace(path=f"/{args.redis_db}").geturl()
    broker = redis.Redis.from_url(redis_url)
    if broker.exists(ENDPOINT_KEY):
        raise SystemExit(
            f"Redis db {args.redis_db} has a published policy endpoint ({ENDPOINT_KEY}): "
            "another run uses it; pick a free db with --redis-db"
        )
    broker.delete(*QUEUES)
    with ExitStack() as stack:
        database_url = stack.enter_context(scratch_database(server_url, "wsrl_bench"))
        stack.callback(broker.delete, *QUEUES)
        migrate.upgrade(database_url)
        log_dir = Path(tempfile.mkdtemp(prefix="wsrl-bench-"))
        settings = Settings(
            _env_file=None,
            database_url=database_url,
            redis_url=redis_url,
            data_dir=base.data_dir,
            max_steps=args.episode_steps,
            step_timeout_s=30.0,
        )
        env = env_server(log_dir, settings).start()
        stack.callback(env.stop)
        llm = scripted_llm(
            log_dir,
            settings,
            latency_ms=args.llm_ms,
            policy="oracle-long",
            steps=args.episode_steps,
        ).start()
        stack.callback(llm.stop)
        settings = settings.model_copy(update={"env_url": env.url, "llm_base_url": llm.url})
        engine = make_engine(settings)
        stack.callback(engine.dispose)
        sessions = make_sessionmaker(engine)
        with session_scope(sessions) as session, EnvClient(env.url) as client:
            sync_goals(session, client)
        with session_scope(sessions) as session:
            goal_ids = list(session.scalars(select(Goal.id).order_by(Goal.id)))
        print(f"logs in {log_dir}; LLM latency {args.llm_ms:g} ms; goals {len(goal_ids)}")
        print(
            f"{'C':>4} {'procs':>5} {'episodes':>8} {'steps':>5} {'call_ms':>7} {'ep_s':>6} "
            f"{'eps':>7} "
            f"{'ideal':>7} {'ratio':>6} {'steady':>6} {'llm%':>5} {'env%':>5} {'other%':>6} "
            f"{'idle%':>5} {'ovh%':>5}"
            " | CPU ms/episode: workers, pg, redis, own, env, llm"
        )
        admin = stack.enter_context(psycopg.connect(admin_url(server_url), autocommit=True))
        print(f"load average at the start: {os.getloadavg()}")
        print(
            "a one-byte round trip between two processes (waking one on this machine): "
            f"median {round_trip_us:.0f} us"
        )
        cpu_before = psutil.cpu_times()
        results = []
        for level in [int(x) for x in args.levels.split(",")]:
            procs = 1 if level < 8 else args.processes
            result = run_level(
                log_dir,
                settings,
                sessions,
                goal_ids,
                concurrency=level,
                processes=procs,
                rounds=args.rounds,
                llm_s=args.llm_ms / 1000,
                services=[env, llm],
                admin=admin,
                broker=broker,
            )
            print(_row(level, procs, result), flush=True)
            results.append((level, result))
        print(f"load average at the end: {os.getloadavg()}")
        stolen = steal_share(cpu_before, psutil.cpu_times())
        print(f"CPU time the VM's host took meanwhile (steal): {stolen:.0%}")
        print("hand-off (a finished episode to the next start in its worker process):")
        for level, result in results:
            print(
                f"  C={level}: median {result['handoff_p50']:.0f} ms, "
                f"90th percentile {result['handoff_p90']:.0f} ms"
            )
        print("an episode's start to the next start on its thread, ms, by round:")
        for level, result in results:
            print(f"  C={level}: " + " ".join(f"{cycle:.0f}" for cycle in result["cycles"]))
        print("the scripted LLM's own time per call (arrival to answer; call_ms adds the way):")
        for level, result in results:
            bound = "" if result["llm_peak"] <= level else " (more than C: the ideal is no bound)"
            print(
                f"  C={level}: {result['llm_own_ms']:.2f} ms, at most {result['llm_peak']} "
                f"calls at once{bound}"
            )
        for level, result in results:
            print(f"work per episode at C={level}:")
            for group, values in result["work"].items():
                shown = ", ".join(f"{k}={v:.2f}" for k, v in values.items())
                print(f"  {group}: {shown}")


def process_round_trip_us(trips: int = 2000) -> float:
    """Median microseconds of a one-byte round trip between this process and a forked
    child over a socket pair, wherever the scheduler puts them: each one wakes the other.

    Every LLM answer, env step and database reply wakes a worker thread, and the VMs this
    benchmark ran on differ by several times in what a wake-up costs (16 us with both
    processes on one core, 50-80 us across the cores of one 2-core VM), far more than in
    what the code costs on one thread: the line puts a run's CPU figures in context.
    """
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent.close()
        try:
            while data := child.recv(1):
                child.send(data)
        finally:
            os._exit(0)
    child.close()
    times = []
    try:
        for _ in range(trips):
            start = time.perf_counter_ns()
            parent.send(b"x")
            parent.recv(1)
            times.append(time.perf_counter_ns() - start)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    return statistics.median(times) / 1000


def steal_share(before, after) -> float:
    """The share of the machine's CPU time between two ``psutil.cpu_times()`` that a
    hypervisor gave to others (``steal``; 0 where the kernel does not count it): runs of
    one VM differ most by it."""
    fields = [f for f in after._fields if not f.startswith("guest")]  # guest is in user too
    total = sum(getattr(after, f) - getattr(before, f) for f in fields)
    return (getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)) / total if total else 0.0


def _row(level: int, procs: int, result: dict) -> str:
    """One level's line of the table."""
    return (
        f"{level:>4} {procs:>5} {result['episodes']:>8} {result['steps']:>5.1f} "
        f"{result['call_ms']:>7.1f} {result['episode_s']:>6.2f} {result['eps']:>7.2f} "
        f"{result['ideal']:>7.2f} "
        f"{result['ratio']:>6.2f} {result['steady']:>6.2f} "
        f"{100 * result['llm_share']:>5.1f} "
        f"{100 * result['env_share']:>5.1f} {100 * result['other_share']:>6.1f} "
        f"{100 * result['idle_share']:>5.1f} {100 * result['overhead_share']:>5.1f} | "
        f"{result['cpu_workers_ms']:>7.1f} {result['cpu_pg_ms']:>5.1f} "
        f"{result['cpu_redis_ms']:>5.1f} {result['cpu_own_ms']:>5.1f} "
        f"{result['cpu_env_ms']:>5.1f} {result['cpu_llm_ms']:>5.1f}"
    )


if __name__ == "__main__":
    main()
