"""Latency the LLM gateway adds over calling the LLM directly.

Starts the scripted LLM (rule policy, no added latency) and the API (``wsrl api serve``)
as separate processes, each on a free port, the API on a scratch database (created on
the server of ``--database-url`` / the settings' database, migrated, dropped at the end)
and on Redis db ``--redis-db`` (its endpoint key is set here and deleted at the end).
Then it makes ``--calls`` chat completions one at a time, alternating: directly to the
scripted LLM, and through ``/v1/gateway/rollouts/{id}/attempts/1/v1/chat/completions``
(which forwards, asks for token ids, and writes one ``llm_calls`` row per call). Both use
one keep-alive ``httpx.Client`` and the same body. Prints p50/p99 of both and of the
overhead (gateway minus direct, per pair), after ``--warmup`` unmeasured pairs, and the
API process's CPU time per call (unlike latencies, free of waits for a busy core).

Target: overhead p50 <= 2 ms.

    python benchmarks/gateway_overhead.py --calls 2000
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import scratch_database  # noqa: E402

from app.config import get_settings  # noqa: E402
from app.core.endpoint import PolicyEndpoint, publish_endpoint, withdraw_endpoint  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.lifecycle import RolloutMode, RolloutStatus  # noqa: E402
from app.db.models import Attempt, Goal, LlmCall, Rollout  # noqa: E402
from app.db.session import session_scope  # noqa: E402

TOKEN = "bench-token"
BODY = {
    "model": "policy",
    "messages": [
        {"role": "system", "content": "You are a shopping agent on WebShop."},
        {"role": "user", "content": "Instruction: find blue running shoes under 50 dollars."},
    ],
    "max_tokens": 64,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(
    stack: ExitStack, args: list[str], env: dict[str, str], health: str
) -> subprocess.Popen[bytes]:
    """``wsrl <args>`` once ``health`` answers; stopped when ``stack`` closes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def stop() -> None:
        proc.terminate()
        proc.wait(10)

    stack.callback(stop)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{args[0]} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(health, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{args[0]} did not start")


def _seed_attempt(database_url: str) -> tuple[uuid.UUID, int]:
    engine = create_engine(database_url)
    rollout_id = uuid.uuid4()
    with session_scope(engine) as session:
        session.add(Goal(id=0, split="test", instruction="find blue shoes", spec={"asin": "B0"}))
        session.flush()
        session.add(
            Rollout(
                id=rollout_id,
                goal_id=0,
                group_id=uuid.uuid4(),
                mode=RolloutMode.EVAL,
                status=RolloutStatus.RUNNING,
            )
        )
        session.flush()
        attempt = Attempt(rollout_id=rollout_id, number=1)
        session.add(attempt)
        session.flush()
        attempt_id = attempt.id
    engine.dispose()
    return rollout_id, attempt_id


def _count_calls(database_url: str, attempt_id: int) -> int:
    engine = create_engine(database_url)
    with session_scope(engine) as session:
        count = session.scalar(
            select(func.count()).select_from(LlmCall).where(LlmCall.attempt_id == attempt_id)
        )
    engine.dispose()
    return int(count or 0)


def _server_overhead(metrics_text: str) -> str:
    """The API's own view (``wsrl_gateway_overhead_seconds``): mean and bucketed median."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        if family.name != "wsrl_gateway_overhead_seconds":
            continue
        values = {s.name: s for s in family.samples}
        count = values["wsrl_gateway_overhead_seconds_count"].value
        total = values["wsrl_gateway_overhead_seconds_sum"].value
        buckets = [
            (float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket")
        ]
        median = next(le for le, n in sorted(buckets) if n >= count / 2)
        return f"mean={1000 * total / count:.3f} ms  p50<={1000 * median:g} ms (bucket)"
    return "not reported"


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="Measured call pairs.")
    parser.add_argument("--warmup", type=int, default=100, help="Unmeasured pairs first.")
    parser.add_argument("--database-url", default=None, help="Server for the scratch db.")
    parser.add_argument("--redis-url", default=None, help="Redis server (default: settings).")
    parser.add_argument("--redis-db", type=int, default=14, help="Redis db index to use.")
    args = parser.parse_args()

    settings = get_settings()
    server_url = args.database_url or settings.resolved_database_url()
    redis_base = args.redis_url or settings.resolved_redis_url()
    redis_url = urlsplit(redis_base)._replace(path=f"/{args.redis_db}").geturl()
    with ExitStack() as stack:
        database_url = stack.enter_context(scratch_database(server_url, "wsrl_bench"))
        store = redis.Redis.from_url(redis_url)
        stack.callback(store.close)
        stack.callback(withdraw_endpoint, store)
        migrate.upgrade(database_url)
        rollout_id, attempt_id = _seed_attempt(database_url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
        env.update(
            WSRL_DATABASE_URL=database_url,
            WSRL_REDIS_URL=redis_url,
            WSRL_API_TOKEN=TOKEN,
            WSRL_LOG_LEVEL="WARNING",
        )
        llm_port, api_port = _free_port(), _free_port()
        llm = f"http://127.0.0.1:{llm_port}"
        api = f"http://127.0.0.1:{api_port}"
        llm_args = ["scripted-llm", "--policy", "rule", "--port", str(llm_port)]
        _start(stack, llm_args, env, f"{llm}/health")
        publish_endpoint(store, PolicyEndpoint(f"{llm}/v1", "policy", 1))
        api_proc = _start(stack, ["api", "serve", "--port", str(api_port)], env, f"{api}/health")

        direct_url = f"{llm}/v1/chat/completions"
        gateway_url = f"{api}/v1/gateway/rollouts/{rollout_id}/attempts/1/v1/chat/completions"
        direct_body = {**BODY, "logprobs": True, "return_token_ids": True}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        direct, through = [], []
        api_process = psutil.Process(api_proc.pid)
        with httpx.Client(timeout=30) as client:
            for i in range(args.warmup + args.calls):
                if i == args.warmup:
                    cpu_before = sum(api_process.cpu_times()[:2])
                t0 = time.perf_counter()
                client.post(direct_url, json=direct_body).raise_for_status()
                t1 = time.perf_counter()
                client.post(gateway_url, json=BODY, headers=headers).raise_for_status()
                t2 = time.perf_counter()
                if i >= args.warmup:
                    direct.append((t1 - t0) * 1000)
                    through.append((t2 - t1) * 1000)
        api_cpu_ms = 1000 * (sum(api_process.cpu_times()[:2]) - cpu_before) / args.calls
        recorded = _count_calls(database_url, attempt_id)
        server_side = _server_overhead(httpx.get(f"{api}/metrics").text)

    d, g = np.array(direct), np.array(through)
    overhead = g - d
    print(f"calls={args.calls} (after {args.warmup} warm-up pairs), concurrency 1")
    print(f"direct   p50={_pct(d, 50):.3f} ms  p99={_pct(d, 99):.3f} ms")
    print(f"gateway  p50={_pct(g, 50):.3f} ms  p99={_pct(g, 99):.3f} ms")
    print(
        f"overhead p50={_pct(overhead, 50):.3f} ms  p99={_pct(overhead, 99):.3f} ms  "
        f"(p50 gateway - p50 direct = {_pct(g, 50) - _pct(d, 50):.3f} ms)"
    )
    print(f"server-side overhead (forward + record, no client/transport): {server_side}")
    print(f"API process CPU per gateway call: {api_cpu_ms:.3f} ms")
    print(f"llm_calls rows written: {recorded} (expected {args.warmup + args.calls})")
    print(f"target p50 overhead <= 2 ms: {'met' if _pct(overhead, 50) <= 2.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
