"""``benchmarks/episode_cpu.py``: one thread plays real rollouts in turn and measures them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis
from sqlalchemy import create_engine, func, select

from app.core.agent import AgentMode, AgentProtocol
from app.core.endpoint import (
    PolicyEndpoint,
    publish_endpoint,
    read_endpoint,
    withdraw_endpoint,
)
from app.db.models import LlmCall, Rollout, Step

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "episode_cpu.py"


def test_episodes_are_played_in_full_at_each_latency(
    empty_database_url: str, redis_url: str
) -> None:
    """Two latencies, one warm-up and two measured episodes each: every rollout succeeds
    with its ten steps and calls written, and an episode at 20 ms a call takes at least its
    ten calls' 200 ms.

    The configured Redis already holds another policy's publication (as a live stack's
    does, or an earlier test's in this session's db): the benchmark neither plays it nor
    touches it."""
    live = PolicyEndpoint(
        base_url="http://127.0.0.1:9/v1",
        model="someone-elses-policy",
        version=3,
        protocol=AgentProtocol(AgentMode.TEXT, 1, True, 15),
    )
    client = redis.Redis.from_url(redis_url)
    publish_endpoint(client, live)
    try:
        result = subprocess.run(
            [
                sys.executable,
                str(BENCHMARK),
                *("--llm-ms", "0,20", "--episodes", "2", "--warmup", "1"),
                *("--database-url", empty_database_url),
            ],
            env={**os.environ, "WSRL_REDIS_URL": redis_url},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert read_endpoint(client) == live
    finally:  # the session's later tests must not follow it
        withdraw_endpoint(client)
        client.close()
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()[-2:]]
    assert [row[0] for row in rows] == ["0", "20"]
    cpu_ms = [float(row[1]) for row in rows]
    wall_ms = [float(row[2]) for row in rows]
    assert all(cpu > 0 for cpu in cpu_ms)
    assert wall_ms[1] >= 200

    engine = create_engine(empty_database_url)
    try:
        with engine.connect() as conn:
            statuses = conn.execute(select(Rollout.status, func.count()).group_by(Rollout.status))
            assert dict(statuses.all()) == {"succeeded": 6}
            assert conn.scalar(select(func.count()).select_from(Step)) == 60
            assert conn.scalar(select(func.count()).select_from(LlmCall)) == 60
    finally:
        engine.dispose()
