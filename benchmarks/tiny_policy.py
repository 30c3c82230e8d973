"""Tiny-policy bootstrap: size, build time, and success of the warm-started policy.

Builds the tiny policy with :func:`trainer.bootstrap.bootstrap` (oracle demonstrations on
train goals -> supervised learning) into a temporary folder and evaluates it in-process on
the first test goals, greedy and sampled (temperature 1). Prints:

- parameters: distinct model parameters (tied embeddings once);
- bootstrap s: wall time of demonstrations + tokenizer + model + supervised learning;
- success greedy / sampled: share of test goals bought with reward 1.0;
- mean reward, invalid steps: the env's reward and replies without a valid action;
- eval s: wall time of each evaluation.

    .venv/bin/python benchmarks/tiny_policy.py                      # the defaults of the CLI
    .venv/bin/python benchmarks/tiny_policy.py --episodes 20 --epochs 1 --goals 10   # quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.webshop.env import WebShopEnv
from trainer.bootstrap import BootstrapConfig, bootstrap
from trainer.inprocess_eval import evaluate
from trainer.tiny_policy import TinySize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=BootstrapConfig.episodes)
    parser.add_argument("--epochs", type=int, default=BootstrapConfig.epochs)
    parser.add_argument("--batch-size", type=int, default=BootstrapConfig.batch_size)
    parser.add_argument("--lr", type=float, default=BootstrapConfig.lr)
    parser.add_argument("--context-weight", type=float, default=BootstrapConfig.context_weight)
    parser.add_argument("--hidden", type=int, default=TinySize.hidden_size)
    parser.add_argument("--layers", type=int, default=TinySize.layers)
    parser.add_argument("--goals", type=int, default=50, help="test goals to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="keep the checkpoint here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = TinySize(
        hidden_size=args.hidden,
        layers=args.layers,
        heads=max(2, args.hidden // 32),
        intermediate_size=args.hidden * 8 // 3,
    )
    config = BootstrapConfig(
        seed=args.seed,
        episodes=args.episodes,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        context_weight=args.context_weight,
        size=size,
    )
    env = WebShopEnv.load(cache_dir=Path(".wsrl/catalog"))
    out = args.out or Path(tempfile.mkdtemp(prefix="tiny-policy-"))
    manifest = bootstrap(env, out, config, force=args.out is None)
    print(f"parameters: {manifest['parameters']:,}")
    print(f"demonstration steps: {manifest['demonstrations']} ({manifest['demo_tokens']:,} tokens)")
    print(f"bootstrap s: {manifest['seconds']:.1f} (final SFT loss {manifest['final_loss']:.3f})")
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    goals = env.goal_ids("test")[: args.goals]
    for name, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        started = time.perf_counter()
        result = evaluate(model, tokenizer, env, goals, temperature=temperature, seed=args.seed)
        print(
            f"success {name}: {result.success_rate:.1%} on {len(goals)} test goals, "
            f"mean reward {result.mean_reward:.3f}, invalid steps "
            f"{result.invalid_steps}/{result.steps}, eval s {time.perf_counter() - started:.1f}"
        )


if __name__ == "__main__":
    main()
