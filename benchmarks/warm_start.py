"""A pretrained model's warm start: held-out reward zero-shot and after imitating the
demonstrations, both played with the warm start's protocol (one step of history, results
by number), greedy and unconstrained as verl plays it.

Warm-starts the converted model with :func:`trainer.bootstrap.warm_start.warm_start` on
``--episodes`` whole demonstration episodes (no drills, unless ``--drills``) into
``--out``, then evaluates that folder and the base in-process on the first ``--goals``
test goals. Prints the warm start's size, time and loss, and per policy success, mean
reward (95 % intervals) and invalid steps.

    .venv/bin/python benchmarks/warm_start.py --episodes 40 --epochs 2 --lr 1e-4 --goals 30
    .venv/bin/python benchmarks/warm_start.py --drills --goals 100   # the CLI's defaults (GPU)
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from app.config import get_settings
from app.core.agent import DEFAULT_PROTOCOL, AgentMode
from app.webshop.env import WebShopEnv
from trainer.bootstrap.inprocess_eval import evaluate
from trainer.bootstrap.warm_start import WarmStartConfig, warm_start
from trainer.models import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=WarmStartConfig.episodes)
    parser.add_argument("--drills", action="store_true", help="the CLI's drills too")
    parser.add_argument("--epochs", type=int, default=WarmStartConfig.epochs)
    parser.add_argument("--lr", type=float, default=WarmStartConfig.lr)
    parser.add_argument("--goals", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("/tmp/wsrl-warm-start"))
    args = parser.parse_args()

    settings = get_settings()
    base = resolve_model(settings.data_dir, args.model)
    if base is None:
        raise SystemExit(f"{args.model}: run `wsrl model get {args.model}` first")
    env = WebShopEnv.load(
        settings.env_data,
        settings.env_goals,
        cache_dir=settings.data_dir / "catalog",
        noun_tagger=settings.noun_tagger,
    )
    config = WarmStartConfig(episodes=args.episodes, epochs=args.epochs, lr=args.lr)
    if not args.drills:
        config = replace(config, search_goals=0, result_goals=0, option_goals=0)
    manifest = warm_start(env, base, args.out, config)
    print(
        f"warm start: {manifest['demonstrations']} demonstration steps, "
        f"{manifest['demo_tokens']} tokens, {manifest['seconds']:.0f} s on "
        f"{manifest['device']}, final loss {manifest['final_loss']:.3f}"
    )
    protocol = replace(
        DEFAULT_PROTOCOL,
        mode=AgentMode.TEXT,
        history_steps=config.history_steps,
        result_refs=config.result_refs,
        constrain_actions=False,
    )
    goals = env.goal_ids("test")[: args.goals]
    for name, folder in (("warm start", args.out), ("zero-shot", base)):
        started = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        result = evaluate(model, tokenizer, env, goals, protocol=protocol)
        print(
            f"{name}: success {result.success_rate:.1%} (+/- {result.success_ci:.1%}), "
            f"mean reward {result.mean_reward:.3f} (+/- {result.reward_ci:.3f}), invalid "
            f"steps {result.invalid_steps}/{result.steps}, {time.perf_counter() - started:.0f} s"
        )


if __name__ == "__main__":
    main()
