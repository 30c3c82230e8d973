"""Time per phase of a train step of the local trainer, and update throughput.

Creates a scratch database on the server of ``--database-url`` (dropped at the end),
inserts ``--steps x --groups`` complete GRPO groups of multi-turn rollouts (synthetic
token ids, ``--calls`` LLM calls per rollout, each prompt extending the previous one), then
runs the real loop (:func:`trainer.backends.local.run.start_local_run`, no enqueueing) and
prints the mean seconds of each phase (wait, batch, update, checkpoint, commit, sync,
publish) and the update's tokens/s (generated tokens, and all tokens forwarded).

    .venv/bin/python benchmarks/train_step.py --model .wsrl/policy/tiny-0 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres \
        --redis-url redis://127.0.0.1:6379/0

``--redis-url`` gets the policy endpoint key written: use a Redis db nobody else uses.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import uuid
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from app.config import Settings
from app.db import migrate
from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.backends.local.run import start_local_run
from trainer.config import LocalSection, RunConfig, TrainerConfig
from trainer.loop import LoopOptions

PHASES = ("wait", "batch", "update", "checkpoint", "commit", "sync", "publish", "step")


def insert_groups(sessions, args: argparse.Namespace, vocab: int) -> None:
    """Complete groups at version 0; rewards vary within a group so advantages are not 0."""
    with session_scope(sessions) as session:
        session.add(Goal(id=1, split="train", instruction="bench", spec={"asin": "B0"}))
        session.flush()
        for g in range(args.steps * args.groups):
            group = uuid.uuid4()
            for i in range(args.group_size):
                rollout = Rollout(
                    goal_id=1,
                    group_id=group,
                    sample_index=i,
                    mode=RolloutMode.TRAIN,
                    status=RolloutStatus.SUCCEEDED,
                    reward=float(i % 2),
                    policy_version_min=0,
                    policy_version_max=0,
                )
                session.add(rollout)
                session.flush()
                attempt = Attempt(rollout_id=rollout.id, number=1, status=AttemptStatus.SUCCEEDED)
                session.add(attempt)
                session.flush()
                prompt = [(g * 31 + t) % (vocab - 10) + 5 for t in range(args.prompt_tokens)]
                for c in range(args.calls):
                    response = [(c * 7 + t + i) % (vocab - 10) + 5 for t in range(args.response)]
                    session.add(
                        LlmCall(
                            attempt_id=attempt.id,
                            index=c,
                            policy_version=0,
                            request_messages=[],
                            prompt_token_ids=prompt,
                            response_token_ids=response,
                            response_logprobs=[-2.0] * len(response),
                        )
                    )
                    observation = [(c + t) % (vocab - 10) + 5 for t in range(args.observation)]
                    prompt = [*prompt, *response, *observation]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="HF checkpoint folder.")
    parser.add_argument("--database-url", required=True, help="Any database on the server.")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--groups", type=int, default=4, help="Groups per step.")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--calls", type=int, default=4, help="LLM calls per rollout.")
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--response", type=int, default=12, help="Tokens per response.")
    parser.add_argument("--observation", type=int, default=150, help="Tokens between turns.")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--sample-mode", default="trajectory")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    admin = make_url(args.database_url).set(drivername="postgresql")
    name = f"wsrl_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(args.database_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        run(args, url)
    finally:
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(args: argparse.Namespace, url: str) -> None:
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(str(args.model)).vocab_size
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            _env_file=None, database_url=url, redis_url=args.redis_url, data_dir=Path(data_dir)
        )
        engine = make_engine(settings)
        insert_groups(make_sessionmaker(engine), args, vocab)
        engine.dispose()
        config = TrainerConfig(
            group_size=args.group_size,
            batch_groups=args.groups,
            max_staleness=args.steps,
            micro_batch_size=args.micro_batch,
            sample_mode=args.sample_mode,
            max_sample_tokens=1 << 16,
            lr=1e-5,
        )
        options = LoopOptions(checkpoint_dir=Path(data_dir) / "ckpt", poll_s=0.05)
        run = RunConfig(algorithm=config, local=LocalSection(enqueue=False))
        trainer = start_local_run(settings, run, args.model, options)
        try:
            results = trainer.loop.run(steps=args.steps, wait_timeout_s=30)
        finally:
            trainer.close()
    if len(results) != args.steps:
        raise SystemExit(f"only {len(results)} of {args.steps} steps ran")
    print(
        f"model {args.model} ({vocab} vocab), {args.steps} steps x {args.groups} groups x "
        f"{args.group_size} rollouts x {args.calls} calls, sample mode {args.sample_mode}"
    )
    for phase in PHASES:
        values = [r.metrics.get(f"time/{phase}_s", 0.0) for r in results]
        print(f"  {phase:10s} {statistics.fmean(values):8.3f} s  (per step: "
              + ", ".join(f"{v:.3f}" for v in values) + ")")  # fmt: skip
    generated = [r.metrics["perf/generated_tokens"] for r in results]
    update_s = [r.metrics["time/update_s"] for r in results]
    samples = [r.metrics["perf/samples"] for r in results]
    print(f"  samples/step {statistics.fmean(samples):.0f}, generated tokens/step "
          f"{statistics.fmean(generated):.0f}")  # fmt: skip
    print(f"update throughput: {sum(generated) / sum(update_s):.0f} generated tokens/s")


if __name__ == "__main__":
    main()
