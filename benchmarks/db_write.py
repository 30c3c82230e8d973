"""Write throughput of trajectory rows and the trainer's read of complete trajectories.

Inserts ``--steps`` steps and ``--calls`` LLM calls (``--tokens`` response tokens with
logprobs, ``--prompt-tokens`` prompt ids, the conversation so far as the request's
messages) in batches, through the workers' engine, into a scratch database (created on
the server of ``--database-url`` / the settings' database, dropped at the end); then
reads back the calls of ``--read-rollouts`` rollouts with the trainer's own query
(:func:`trainer.ready_groups.trainable_calls`). Prints rows/s, MB on disk and the read
time.

Targets: >= 5,000 steps/s written; 256 trajectories read in < 1 s.

    python benchmarks/db_write.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import numpy as np
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import scratch_database  # noqa: E402

from app.config import Settings, get_settings  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus  # noqa: E402
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step  # noqa: E402
from app.db.session import make_engine, session_scope  # noqa: E402
from trainer.ready_groups import trainable_calls  # noqa: E402

OBSERVATION = (
    "Instruction: [SEP] i need a long lasting blue cotton t-shirt, and price lower than "
    "30.00 dollars [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > "
) + " [SEP] B0TEST1234 [SEP] Some product title with a few words [SEP] $19.99" * 10


def _seed_rollouts(engine: Engine, rollouts: int) -> list[tuple[uuid.UUID, int]]:
    """One goal, ``rollouts`` succeeded rollouts in groups of 8, one attempt each."""
    with session_scope(engine) as session:
        session.add(Goal(id=0, split="train", instruction="find a shirt", spec={"asin": "B0"}))
        session.flush()
        rows = [
            {
                "id": uuid.uuid4(),
                "goal_id": 0,
                "group_id": uuid.UUID(int=i // 8),
                "sample_index": i % 8,
                "mode": RolloutMode.TRAIN,
                "status": RolloutStatus.SUCCEEDED,
                "policy_version_min": 0,
                "policy_version_max": 0,
            }
            for i in range(rollouts)
        ]
        session.execute(insert(Rollout), rows)
        attempt_ids = session.scalars(
            insert(Attempt).returning(Attempt.id, sort_by_parameter_order=True),
            [
                {"rollout_id": row["id"], "number": 1, "status": AttemptStatus.SUCCEEDED}
                for row in rows
            ],
        ).all()
    return [(row["id"], attempt_id) for row, attempt_id in zip(rows, attempt_ids, strict=True)]


def _write(engine: Engine, table: type, rows: list[dict], batch: int) -> float:
    """Seconds to insert ``rows``, one transaction per batch (as workers flush)."""
    start = time.perf_counter()
    for offset in range(0, len(rows), batch):
        with session_scope(engine) as session:
            session.execute(insert(table), rows[offset : offset + batch])
    return time.perf_counter() - start


def _read_trajectories(engine: Engine, rollout_ids: list[uuid.UUID]) -> tuple[float, int]:
    """The trainer's read (:func:`trainer.ready_groups.trainable_calls`): the calls of the
    succeeded attempt of each rollout, in order."""
    start = time.perf_counter()
    with Session(engine) as session:
        calls = trainable_calls(session, rollout_ids)
    tokens = sum(len(call.response_token_ids) for found in calls.values() for call in found)
    return time.perf_counter() - start, tokens


def _conversation(turns: int) -> list[dict[str, str]]:
    """The messages of a call made after ``turns`` earlier steps (the agent's history)."""
    messages = [{"role": "system", "content": "You are a shopping agent. " * 20}]
    for _ in range(turns):
        messages.append({"role": "user", "content": OBSERVATION})
        messages.append({"role": "assistant", "content": "click[b0test1234]"})
    return [*messages, {"role": "user", "content": OBSERVATION}]


def run(args: argparse.Namespace) -> None:
    server_url = args.database_url or get_settings().resolved_database_url()
    with scratch_database(server_url, "wsrl_bench") as url:
        migrate.upgrade(url)
        engine = make_engine(Settings(_env_file=None, database_url=url))
        rollouts = max(args.read_rollouts, args.calls // args.calls_per_rollout)
        attempts = _seed_rollouts(engine, rollouts)
        rng = np.random.default_rng(0)
        steps = [
            {
                "attempt_id": attempts[i % rollouts][1],
                "index": i // rollouts,
                "action": "click[b0test1234]",
                "observation": OBSERVATION,
                "reward": 0.0,
                "done": False,
                "valid": True,
                "latency_ms": 12.5,
                "info": {"page": "results"},
            }
            for i in range(args.steps)
        ]
        conversations = [_conversation(turns) for turns in range(args.calls_per_rollout)]
        calls = [
            {
                "attempt_id": attempts[i % rollouts][1],
                "index": i // rollouts,
                "policy_version": 0,
                "request_messages": conversations[(i // rollouts) % args.calls_per_rollout],
                "response_text": "click[b0test1234]",
                "prompt_token_ids": rng.integers(0, 151_000, args.prompt_tokens, dtype=np.int32),
                "response_token_ids": rng.integers(0, 151_000, args.tokens, dtype=np.int32),
                "response_logprobs": -rng.exponential(1.0, args.tokens).astype(np.float32),
                "finish_reason": "stop",
                "latency_ms": 80.0,
            }
            for i in range(args.calls)
        ]
        step_s = _write(engine, Step, steps, args.batch)
        call_s = _write(engine, LlmCall, calls, args.batch)
        with engine.connect() as conn:
            sizes = {
                table: conn.execute(select(func.pg_total_relation_size(table))).scalar_one()
                for table in ("steps", "llm_calls")
            }
        read_ids = [rollout_id for rollout_id, _ in attempts[: args.read_rollouts]]
        _read_trajectories(engine, read_ids)  # warm the cache: the trainer reads hot rows
        read_s, tokens = min(
            (_read_trajectories(engine, read_ids) for _ in range(args.repeats)),
            key=lambda r: r[0],
        )
        engine.dispose()

    print(f"steps:     {args.steps:>7} rows in {step_s:6.2f} s = {args.steps / step_s:9.0f} rows/s")
    print(
        f"llm_calls: {args.calls:>7} rows in {call_s:6.2f} s = {args.calls / call_s:9.0f} rows/s "
        f"({args.tokens} response + {args.prompt_tokens} prompt tokens, logprobs)"
    )
    for table, size in sizes.items():
        print(f"on disk:   {table:<10} {size / 1e6:8.1f} MB (pg_total_relation_size)")
    print(
        f"read:      {args.read_rollouts} trajectories ({tokens} response tokens) "
        f"in {read_s * 1000:.0f} ms (best of {args.repeats})"
    )
    print(
        f"targets:   steps/s >= 5000: {'ok' if args.steps / step_s >= 5000 else 'MISSED'}; "
        f"read < 1 s: {'ok' if read_s < 1 else 'MISSED'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None, help="server to use; default: settings")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--tokens", type=int, default=512, help="response tokens per call")
    parser.add_argument("--prompt-tokens", type=int, default=1_024, help="prompt ids per call")
    parser.add_argument("--calls-per-rollout", type=int, default=5)
    parser.add_argument("--read-rollouts", type=int, default=256)
    parser.add_argument("--batch", type=int, default=500, help="rows per insert transaction")
    parser.add_argument("--repeats", type=int, default=3)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
