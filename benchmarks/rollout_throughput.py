"""Rollout throughput: episodes/s vs concurrency, as a ratio to the ideal.

Runs the real deployment in subprocesses (env server, scripted LLM with a fixed latency
per call playing ``oracle-long``, which buys on step ``--episode-steps`` (10), ``wsrl
worker`` processes with the threads pool) against a scratch PostgreSQL
database and a Redis db of its own, and for each concurrency C enqueues ``C x rounds``
rollouts and measures:

- ``eps``: finished episodes per second, from the first start to the last finish;
- ``steady``: the same ratio in the steady state only, from the moment all C threads
  first run an episode to the last start (after which threads run out of work): the
  whole-batch ``ratio`` also counts the batch's ramp-up and its ragged end, which a
  long-running pool does not have (with 4 rounds they are 4-8 % of the run);
- ``ideal``: ``C / (mean steps x LLM latency)``, what C threads would do if an episode
  cost nothing but its LLM calls; ``ratio = eps / ideal``;
- the share of an episode's wall time (attempt start to finish) spent in the LLM, in the
  env and elsewhere (agent, persistence), and the idle share of the worker threads
  (``1 - sum(episode wall) / (C x run wall)``: queue hand-off and start-up);
- ``ovh%``: the per-episode overhead (queue + env + agent + persistence) as a share of
  the threads' wall time, ``1 - sum(LLM call time) / (C x run wall)``; the ratio to the
  ideal is about ``1 - ovh%`` when calls take their nominal latency.

Targets: ratio >= 0.9 at 32 and >= 0.8 at 128 on a 2-core machine.

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
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg
import redis
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.processes import (  # noqa: E402
    celery_worker,
    env_server,
    scripted_llm,
)

from app.config import Settings, get_settings  # noqa: E402
from app.core.celery import QUEUES, create_celery  # noqa: E402
from app.core.endpoint import ENDPOINT_KEY  # noqa: E402
from app.core.enqueue import enqueue_rollouts, sync_goals  # noqa: E402
from app.core.env_client import EnvClient  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.lifecycle import AttemptStatus  # noqa: E402
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step  # noqa: E402
from app.db.session import make_engine, make_sessionmaker, session_scope  # noqa: E402


def _admin(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def measure(sessions, ids: list[uuid.UUID], concurrency: int, llm_s: float) -> dict[str, float]:
    with session_scope(sessions) as session:
        rows = session.execute(
            select(Attempt.id, Attempt.started_at, Attempt.finished_at).where(
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
        "steady": steady_eps(rows, concurrency) / ideal,
        "llm_share": (llm_ms or 0) / 1000 / busy_s,
        "env_share": (env_ms or 0) / 1000 / busy_s,
        "other_share": 1 - ((llm_ms or 0) + (env_ms or 0)) / 1000 / busy_s,
        "idle_share": max(0.0, 1 - busy_s / (concurrency * run_s)),
        "overhead_share": 1 - (llm_ms or 0) / 1000 / (concurrency * run_s),
    }


def steady_eps(rows, concurrency: int) -> float:
    """Episodes finished per second between the first moment ``concurrency`` episodes run
    at once and the last start (see the module docstring); NaN when there is no such
    window."""
    events = sorted(
        [(r.started_at.timestamp(), 1) for r in rows]
        + [(r.finished_at.timestamp(), -1) for r in rows]
    )
    running, full_at = 0, None
    for at, change in events:
        running += change
        if running >= concurrency:
            full_at = at
            break
    last_start = max(r.started_at.timestamp() for r in rows)
    if full_at is None or last_start <= full_at:
        return float("nan")
    finished = sum(1 for r in rows if full_at < r.finished_at.timestamp() <= last_start)
    return finished / (last_start - full_at)


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
) -> dict[str, float]:
    threads = max(1, concurrency // processes)
    workers = [
        celery_worker(log_dir, settings, concurrency=threads, name=f"bench{concurrency}-{i}")
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        celery = create_celery(settings)
        # Warm-up: one episode per thread builds each process's clients and pools.
        _run_batch(sessions, celery, settings, goal_ids, concurrency)
        before = {name: _cpu_s(p) for name, p in _cpu_groups(workers, services).items()}
        ids = _run_batch(sessions, celery, settings, goal_ids, concurrency * rounds)
        after = {name: _cpu_s(p) for name, p in _cpu_groups(workers, services).items()}
        result = measure(sessions, ids, concurrency, llm_s)
        for name in before:
            result[f"cpu_{name}_ms"] = 1000 * (after[name] - before[name]) / len(ids)
        return result
    finally:
        for worker in workers:
            worker.stop()


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
    parser.add_argument("--rounds", type=int, default=4, help="Episodes per thread per level.")
    parser.add_argument("--llm-ms", type=float, default=100.0, help="Scripted LLM latency.")
    parser.add_argument("--processes", type=int, default=2, help="Worker processes (levels >= 8).")
    parser.add_argument(
        "--episode-steps", type=int, default=10, help="Steps of each episode (oracle-long)."
    )
    parser.add_argument("--redis-db", type=int, default=12, help="Redis db for the queues.")
    args = parser.parse_args()

    base = get_settings()
    server_url = base.resolved_database_url()
    name = f"wsrl_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_admin(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    database_url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    redis_url = urlsplit(base.resolved_redis_url())._replace(path=f"/{args.redis_db}").geturl()
    broker = redis.Redis.from_url(redis_url)
    if broker.exists(ENDPOINT_KEY):
        raise SystemExit(
            f"Redis db {args.redis_db} has a published policy endpoint ({ENDPOINT_KEY}): "
            "another run uses it; pick a free db with --redis-db"
        )
    broker.delete(*QUEUES)
    started = []
    try:
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
        started.append(env)
        llm = scripted_llm(
            log_dir,
            settings,
            latency_ms=args.llm_ms,
            policy="oracle-long",
            steps=args.episode_steps,
        ).start()
        started.append(llm)
        settings = settings.model_copy(update={"env_url": env.url, "llm_base_url": llm.url})
        engine = make_engine(settings)
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
            " | CPU ms/episode: workers, env, llm"
        )
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
            )
            print(
                f"{level:>4} {procs:>5} {result['episodes']:>8} {result['steps']:>5.1f} "
                f"{result['call_ms']:>7.1f} {result['episode_s']:>6.2f} {result['eps']:>7.2f} "
                f"{result['ideal']:>7.2f} "
                f"{result['ratio']:>6.2f} {result['steady']:>6.2f} "
                f"{100 * result['llm_share']:>5.1f} "
                f"{100 * result['env_share']:>5.1f} {100 * result['other_share']:>6.1f} "
                f"{100 * result['idle_share']:>5.1f} {100 * result['overhead_share']:>5.1f} | "
                f"{result['cpu_workers_ms']:>7.1f} "
                f"{result['cpu_env_ms']:>5.1f} {result['cpu_llm_ms']:>5.1f}",
                flush=True,
            )
        engine.dispose()
    finally:
        for process in reversed(started):
            process.stop()
        broker.delete(*QUEUES)
        with psycopg.connect(_admin(server_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
