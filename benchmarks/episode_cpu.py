"""A worker's CPU per episode, without Celery or concurrency: one thread plays rollouts in turn.

Runs the env server and the scripted LLM (``oracle-long``, which buys on step 10) in
subprocesses, as ``rollout_throughput.py`` does, and calls
:func:`workers.rollout.execute_rollout` itself in a loop: the attempt's start, the
episode, the finish, every Postgres and Redis write the worker makes. For each scripted
LLM latency in ``--llm-ms`` it prints the thread CPU (``time.thread_time``) and the wall
time per episode.

Why: it takes Celery, the worker's other threads and the episodes' contention for the GIL
out of the figure, and sets the wait between steps. Played with an LLM that answers at
once (``0``) and with one that takes 100 ms a call, the same work shows how much of a
worker's CPU is the work itself and how much is taking it up again after a wait
(docs/benchmarks.md, "The data plane's CPU per episode"). It is no less noisy than the
rollout benchmark: runs of the same code within half an hour on one VM spread by 20 %.

    python benchmarks/episode_cpu.py                       # 200 episodes at 0 and 100 ms
    python benchmarks/episode_cpu.py --llm-ms 0 --episodes 500

The database comes from the settings (``WSRL_DATABASE_URL`` or the embedded server): a
database ``wsrl_episode_<hex>`` is created on its server and dropped at the end, unless
``--database-url`` names one to use as it is (migrated to head first). Redis is a server
of the benchmark's own (embedded, on a free port), so a policy published in the configured
Redis is neither played nor touched. No message goes to Redis: the rollouts are enqueued
through Celery's in-memory transport, and Redis serves only the worker's log lines and
endpoint record, as in a worker.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from celery import Celery
from sqlalchemy import select

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import scratch_database  # noqa: E402
from helpers.processes import env_server, scripted_llm, set_llm_fault  # noqa: E402

from app.config import Settings, get_settings  # noqa: E402
from app.core.enqueue import enqueue_rollouts  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.models import Goal  # noqa: E402
from app.db.session import make_engine, make_sessionmaker, session_scope  # noqa: E402
from app.embedded.ports import free_port  # noqa: E402
from app.embedded.redis import EmbeddedRedis  # noqa: E402
from app.environments.webshop.client import EnvClient  # noqa: E402
from app.environments.webshop.goals import sync_goals  # noqa: E402
from workers.rollout import Outcome, execute_rollout  # noqa: E402
from workers.runtime import WorkerRuntime  # noqa: E402


def play(runtime: WorkerRuntime, celery: Celery, goal_ids: list[int], count: int) -> float:
    """Enqueue ``count`` rollouts and play them in turn; returns the thread CPU seconds."""
    goals = [goal_ids[i % len(goal_ids)] for i in range(count)]
    with session_scope(runtime.sessions) as session:
        ids = enqueue_rollouts(session, celery, goal_ids=goals, settings=runtime.settings)
    started = time.thread_time()
    for rollout_id in ids:
        outcome = execute_rollout(runtime, celery, rollout_id)
        if outcome != Outcome.SUCCEEDED:
            raise RuntimeError(f"rollout {rollout_id}: {outcome}, expected succeeded")
    return time.thread_time() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm-ms", default="0,100", help="Scripted LLM latencies, in turn.")
    parser.add_argument("--episodes", type=int, default=200, help="Measured episodes per latency.")
    parser.add_argument("--warmup", type=int, default=10, help="Episodes before each measure.")
    parser.add_argument("--steps", type=int, default=10, help="Steps of each episode.")
    parser.add_argument("--database-url", help="A database to use as it is (default: scratch).")
    args = parser.parse_args(argv)
    latencies = [float(x) for x in args.llm_ms.split(",")]

    base = get_settings()
    with ExitStack() as stack:
        database_url = args.database_url or stack.enter_context(
            scratch_database(base.resolved_database_url(), "wsrl_episode")
        )
        migrate.upgrade(database_url)
        log_dir = Path(tempfile.mkdtemp(prefix="wsrl-episode-"))
        redis_server = EmbeddedRedis(log_dir / "redis")
        redis_url = redis_server.start(free_port())
        stack.callback(redis_server.stop)
        settings = Settings(
            _env_file=None,
            database_url=database_url,
            redis_url=redis_url,
            data_dir=base.data_dir,
            max_steps=args.steps,
            step_timeout_s=30.0,
        )
        env = env_server(log_dir, settings).start()
        stack.callback(env.stop)
        llm = scripted_llm(log_dir, settings, policy="oracle-long", steps=args.steps).start()
        stack.callback(llm.stop)
        settings = settings.model_copy(update={"env_url": env.url, "llm_base_url": llm.url})
        engine = make_engine(settings)
        stack.callback(engine.dispose)
        sessions = make_sessionmaker(engine)
        with session_scope(sessions) as session, EnvClient(env.url) as client:
            sync_goals(session, client)
        with session_scope(sessions) as session:
            goal_ids = list(session.scalars(select(Goal.id).order_by(Goal.id)))
        celery = Celery("episode-cpu", broker="memory://")
        runtime = WorkerRuntime(settings)
        stack.callback(runtime.close)
        print(f"logs in {log_dir}; {args.episodes} episodes of {args.steps} steps per latency")
        print(f"{'llm_ms':>7} {'cpu_ms/episode':>15} {'wall_ms/episode':>16}")
        for latency in latencies:
            set_llm_fault(llm, "ok", latency_ms=latency)
            play(runtime, celery, goal_ids, args.warmup)
            wall = time.perf_counter()
            cpu = play(runtime, celery, goal_ids, args.episodes)
            wall = time.perf_counter() - wall
            n = args.episodes
            print(f"{latency:>7g} {1000 * cpu / n:>15.2f} {1000 * wall / n:>16.1f}", flush=True)


if __name__ == "__main__":
    main()
