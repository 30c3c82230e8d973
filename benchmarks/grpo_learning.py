"""Does GRPO raise the tiny policy's success? Held-out success before and after K steps.

Runs the in-process loop (:mod:`trainer.inprocess_rollouts`: the agent's prompts and
parsing, the local backend's update; no queue or database, so the figure is the
algorithm's, not the pipeline's) from a checkpoint and prints success and mean reward on a
fixed set of test goals every ``--eval-every`` steps, with the time per step: greedy, and
sampled at the rollout temperature with fixed seeds (``--eval-samples`` episodes per goal),
which is the distribution GRPO itself optimises.

    .venv/bin/python benchmarks/grpo_learning.py --model .wsrl/policy/tiny-0 --steps 8
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from app.config import Settings
from app.webshop.env import WebShopEnv
from trainer.backends.local import LocalBackend
from trainer.config import TrainerConfig
from trainer.inprocess_eval import EvalResult, evaluate
from trainer.inprocess_rollouts import grpo_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--goals-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--update-epochs", type=int, default=1, help="optimizer steps per batch")
    parser.add_argument("--eval-goals", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-samples", type=int, default=2, help="sampled episodes per goal")
    parser.add_argument("--temperature", type=float, default=1.0, help="rollout temperature")
    parser.add_argument("--history-steps", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="grpo", help="grpo, dr_grpo, rloo or gspo")
    parser.add_argument("--loss-agg-mode", default=None, help="override the preset's")
    parser.add_argument("--weighting", default="rollout", help="rollout or token")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    settings = Settings()
    env = WebShopEnv.load(
        settings.env_data, settings.env_goals, cache_dir=settings.data_dir / "catalog"
    )
    overrides = {"loss_agg_mode": args.loss_agg_mode} if args.loss_agg_mode else {}
    config = TrainerConfig.preset(
        args.preset,
        **overrides,
        group_size=args.group_size,
        sample_mode="transition",
        sample_weighting=args.weighting,
        lr=args.lr,
        update_epochs=args.update_epochs,
        seed=args.seed,
    )
    backend = LocalBackend(args.model, config)
    held_out = env.goal_ids("test")[: args.eval_goals]
    rng = random.Random(args.seed)
    train = env.goal_ids("train")

    def report(step: int, seconds: float | None) -> None:
        def play(goals: list[int], temperature: float) -> EvalResult:
            return evaluate(
                backend.model,
                backend.tokenizer,
                env,
                goals,
                temperature=temperature,
                max_steps=args.max_steps,
                history_steps=args.history_steps,
                seed=args.seed,
            )

        greedy = play(held_out, 0.0)
        sampled = play(held_out * args.eval_samples, args.temperature)
        took = f" step_s={seconds:.1f}" if seconds is not None else ""
        print(
            f"step={step} greedy_success={greedy.success_rate:.3f} "
            f"greedy_reward={greedy.mean_reward:.3f} sampled_success={sampled.success_rate:.3f} "
            f"sampled_reward={sampled.mean_reward:.3f}{took}",
            flush=True,
        )

    report(0, None)
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        metrics = grpo_step(
            backend,
            env,
            rng.sample(train, args.goals_per_step),
            max_steps=args.max_steps,
            max_tokens=32,
            seed=args.seed * 1000 + step,
            temperature=args.temperature,
            history_steps=args.history_steps,
        )
        seconds = time.perf_counter() - started
        print(
            f"  train step {step}: reward={metrics['reward/mean']:.3f} "
            f"success={metrics['reward/success']:.3f} "
            f"entropy={metrics.get('losses/entropy', float('nan')):.3f} "
            f"grad_norm={metrics.get('actor/grad_norm', float('nan')):.3f} "
            f"clipfrac={metrics.get('actor/pg_clipfrac', float('nan')):.3f} "
            f"seconds={seconds:.1f}",
            flush=True,
        )
        if step % args.eval_every == 0 or step == args.steps:
            report(step, seconds)


if __name__ == "__main__":
    main()
