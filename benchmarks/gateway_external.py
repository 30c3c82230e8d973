"""LLM gateway overhead as an external agent sees it (agent-as-a-service rollouts).

Starts the env server, the scripted LLM (oracle, no added latency), the API
(``wsrl api serve``) and the example agent (``examples/external_agent``) as processes on
a scratch database and a Redis db of ``--redis-db``. For ``--episodes`` pairs it asks the
agent to play the same goal twice, as the worker would: once with ``llm.base_url`` the
scripted LLM itself, once the gateway route of a running attempt (which forwards, asks
for token ids and writes one ``llm_calls`` row per call); which of the two goes first
alternates from pair to pair, so neither path gets the warmer caches. The oracle plays
both the same way, so ``(gateway episode - direct episode) / calls`` is the gateway's cost
per call as the agent pays it. Prints p50/p99 of that over the pairs (after ``--warmup``
pairs), the gateway's own server-side overhead histogram from ``/metrics``, and the API
process's CPU time per gateway call: on shared cores the latencies include waits for a
core, the CPU time does not.

Target: overhead p50 <= 2 ms per call.

    python benchmarks/gateway_external.py --episodes 100
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import psutil
import redis
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import scratch_database  # noqa: E402
from helpers.processes import api_server, env_server, example_agent, scripted_llm  # noqa: E402

from app.config import Settings, get_settings  # noqa: E402
from app.core.endpoint import PolicyEndpoint, publish_endpoint, withdraw_endpoint  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.lifecycle import RolloutMode, RolloutStatus  # noqa: E402
from app.db.models import Attempt, Goal, LlmCall, Rollout  # noqa: E402
from app.db.session import session_scope  # noqa: E402

TOKEN = "bench-token"


def _seed_attempt(database_url: str) -> uuid.UUID:
    engine = create_engine(database_url)
    rollout_id = uuid.uuid4()
    with session_scope(engine) as session:
        session.add(Goal(id=10**9, split="test", instruction="benchmark", spec={"asin": "B0"}))
        session.flush()
        session.add(
            Rollout(
                id=rollout_id,
                goal_id=10**9,
                group_id=uuid.uuid4(),
                mode=RolloutMode.EVAL,
                status=RolloutStatus.RUNNING,
            )
        )
        session.flush()
        session.add(Attempt(rollout_id=rollout_id, number=1))
    engine.dispose()
    return rollout_id


def _calls(database_url: str) -> int:
    engine = create_engine(database_url)
    with session_scope(engine) as session:
        count = session.scalar(select(func.count()).select_from(LlmCall))
    engine.dispose()
    return int(count or 0)


def _episode(
    client: httpx.Client, env_url: str, agent_url: str, llm_url: str, goal: int
) -> tuple[float, int]:
    session = client.post(f"{env_url}/sessions", json={"goal_id": goal}).json()
    payload = {
        "rollout_id": str(uuid.uuid4()),
        "attempt": 1,
        "instruction": session["goal"]["instruction"],
        "env": {"base_url": env_url, "session_id": session["session_id"]},
        "llm": {"base_url": llm_url, "model": "policy", "api_key": TOKEN},
        "sampling": {"temperature": 1.0, "max_tokens": 64},
        "max_steps": 15,
    }
    started = time.perf_counter()
    answer = client.post(agent_url, json=payload, timeout=120)
    elapsed = (time.perf_counter() - started) * 1000
    answer.raise_for_status()
    client.delete(f"{env_url}/sessions/{session['session_id']}")
    return elapsed, int(answer.json()["steps"])


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100, help="Measured episode pairs.")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--database-url", default=None, help="Server for the scratch db.")
    parser.add_argument("--redis-db", type=int, default=13)
    args = parser.parse_args()

    base = get_settings()
    server_url = args.database_url or base.resolved_database_url()
    redis_url = urlsplit(base.resolved_redis_url())._replace(path=f"/{args.redis_db}").geturl()
    with ExitStack() as stack:
        database_url = stack.enter_context(scratch_database(server_url, "wsrl_bench_gwext"))
        store = redis.Redis.from_url(redis_url)
        stack.callback(store.close)
        stack.callback(withdraw_endpoint, store)
        log_dir = Path(f"/tmp/{make_url(database_url).database}")
        log_dir.mkdir()
        migrate.upgrade(database_url)
        rollout_id = _seed_attempt(database_url)
        settings = Settings(
            _env_file=None, database_url=database_url, redis_url=redis_url, api_token=TOKEN
        )
        env = env_server(log_dir, settings).start()
        stack.callback(env.stop)
        llm = scripted_llm(log_dir, settings, policy="oracle").start()
        stack.callback(llm.stop)
        publish_endpoint(store, PolicyEndpoint(str(llm.url), "policy", 1))
        api = api_server(log_dir, settings).start()
        stack.callback(api.stop)
        agent = example_agent(log_dir).start()
        stack.callback(agent.stop)
        gateway = f"{api.url}/v1/gateway/rollouts/{rollout_id}/attempts/1/v1"
        goals = httpx.get(f"{env.url}/goals", params={"limit": 1000}).json()["goals"]
        per_call, direct_ms, gateway_ms, calls_total = [], [], [], 0
        api_cpu_s, api_calls = 0.0, 0
        with httpx.Client(timeout=60) as client:

            def direct(goal: int) -> tuple[float, int]:
                return _episode(client, str(env.url), str(agent.url), str(llm.url), goal)

            def through(goal: int) -> tuple[float, int, int, float]:
                before, cpu_before = _calls(database_url), _cpu_s(api.pid)
                elapsed, steps = _episode(client, str(env.url), str(agent.url), gateway, goal)
                cpu = _cpu_s(api.pid) - cpu_before
                return elapsed, steps, _calls(database_url) - before, cpu

            for i in range(args.warmup + args.episodes):
                goal = goals[i % len(goals)]["id"]
                if i % 2:
                    g, g_steps, calls, cpu = through(goal)
                    d, d_steps = direct(goal)
                else:
                    d, d_steps = direct(goal)
                    g, g_steps, calls, cpu = through(goal)
                if i < args.warmup:
                    continue
                api_cpu_s, api_calls = api_cpu_s + cpu, api_calls + calls
                if calls and d_steps == g_steps:
                    per_call.append((g - d) / calls)
                    direct_ms.append(d / calls)
                    gateway_ms.append(g / calls)
                    calls_total += calls
        metrics = httpx.get(f"{api.url}/metrics").text

    overhead = np.array(per_call)
    print(f"episode pairs measured: {len(per_call)} ({calls_total} gateway calls)")
    print(f"per call, direct : p50={np.percentile(direct_ms, 50):.2f} ms  (LLM + env step + agent)")
    print(f"per call, gateway: p50={np.percentile(gateway_ms, 50):.2f} ms")
    print(
        f"gateway overhead per call: p50={np.percentile(overhead, 50):.2f} ms  "
        f"p99={np.percentile(overhead, 99):.2f} ms  mean={overhead.mean():.2f} ms"
    )
    print(f"target p50 <= 2 ms: {'met' if np.percentile(overhead, 50) <= 2.0 else 'NOT met'}")
    print(f"API process CPU per gateway call: {1000 * api_cpu_s / max(api_calls, 1):.3f} ms")
    for line in metrics.splitlines():
        if "gateway_overhead" in line and ("_sum" in line or "_count" in line):
            print(f"  server-side {line}")


if __name__ == "__main__":
    main()
