"""Tiny-policy bootstrap: size, build time, and success of the warm-started policy.

Builds the tiny policy with :func:`trainer.bootstrap.build.bootstrap` (fair demonstrations on
train goals -> supervised learning) into a temporary folder and evaluates it in-process on
the first test goals, greedy and sampled (temperature 1). Prints:

- parameters: distinct model parameters (tied embeddings once);
- bootstrap s: wall and CPU time of demonstrations + tokenizer + model + supervised
  learning (the machine may be shared: CPU seconds are the steadier figure);
- prompt tokens: mean length of a demonstration (prompt + action);
- success greedy / sampled: share of test goals bought with reward 1.0;
- mean reward, invalid steps: the env's reward and replies without a valid action;
- eval s: wall time of each evaluation;
- success random: the same goals played with uniformly random valid actions;
- action accuracy by kind: the greedy reply's action equals the demonstrator's, per decision
  (search, item, option, buy), on the demonstrators' steps of the test goals: where a
  policy fails, before whole episodes hide it.

    .venv/bin/python benchmarks/tiny_policy.py                      # the defaults of the CLI
    .venv/bin/python benchmarks/tiny_policy.py --episodes 40 --epochs 1 --goals 10   # quick
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.config import get_settings
from app.core.agent import AgentProtocol
from app.environments.webshop.agent import parse_action
from app.webshop.env import WebShopEnv
from trainer.bootstrap import demonstrations
from trainer.bootstrap.build import BootstrapConfig, bootstrap
from trainer.bootstrap.copy_pretraining import CopyTask
from trainer.bootstrap.inprocess_eval import evaluate
from trainer.bootstrap.tiny_policy import TinySize
from trainer.checkpoint_protocol import policy_protocol
from trainer.generation import GenerationRequest, generate_batch


def random_baseline(env: WebShopEnv, goals: list[int], seed: int) -> tuple[float, float]:
    """Success and mean reward of uniformly random valid actions (search: 5 instruction
    words), the floor the bootstrap policy must clearly beat."""
    rng = random.Random(seed)
    rewards = []
    for goal in goals:
        session, reward = env.new_session(goal), 0.0
        for _ in range(15):
            available = session.available_actions()
            actions = [f"click[{c}]" for c in available.get("clickables", []) if c != "search"]
            if available.get("has_search_bar"):
                words = session.instruction_text.split()
                actions.append(f"search[{' '.join(rng.sample(words, min(5, len(words))))}]")
            result = session.step(rng.choice(actions))
            if result.done:
                reward = result.reward
                break
        rewards.append(reward)
    return sum(r == 1.0 for r in rewards) / len(rewards), sum(rewards) / len(rewards)


def action_accuracy(
    model, tokenizer, env: WebShopEnv, goals: list[int], protocol: AgentProtocol
) -> str:
    """Greedy replies equal to the demonstrator's action, per kind of decision."""
    demos = demonstrations.collect(env, goals, protocol)
    hits: dict[str, list[bool]] = {}
    for start in range(0, len(demos), 25):
        chunk = demos[start : start + 25]
        requests = [
            GenerationRequest(
                tokenizer.apply_chat_template(
                    d.messages, add_generation_prompt=True, return_dict=True
                )["input_ids"],
                32,
                0.0,
            )
            for d in chunk
        ]
        for demo, out in zip(chunk, generate_batch(model, tokenizer, requests), strict=True):
            hits.setdefault(demonstrations.action_kind(demo.action), []).append(
                parse_action(out.text) == demo.action
            )
    return ", ".join(f"{kind} {sum(h)}/{len(h)}" for kind, h in sorted(hits.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=BootstrapConfig.episodes)
    parser.add_argument("--epochs", type=int, default=BootstrapConfig.epochs)
    parser.add_argument("--batch-size", type=int, default=BootstrapConfig.batch_size)
    parser.add_argument("--lr", type=float, default=BootstrapConfig.lr)
    parser.add_argument("--context-weight", type=float, default=BootstrapConfig.context_weight)
    parser.add_argument("--history", type=int, default=BootstrapConfig.history_steps)
    parser.add_argument("--search-goals", type=int, default=BootstrapConfig.search_goals)
    parser.add_argument("--result-goals", type=int, default=BootstrapConfig.result_goals)
    parser.add_argument("--option-goals", type=int, default=BootstrapConfig.option_goals)
    parser.add_argument("--copy-steps", type=int, default=CopyTask.steps)
    parser.add_argument("--hidden", type=int, default=TinySize.hidden_size)
    parser.add_argument("--layers", type=int, default=TinySize.layers)
    parser.add_argument("--vocab", type=int, default=TinySize.vocab_size)
    parser.add_argument("--goals", type=int, default=50, help="test goals to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="keep the checkpoint here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = TinySize(
        vocab_size=args.vocab,
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
        history_steps=args.history,
        search_goals=args.search_goals,
        result_goals=args.result_goals,
        option_goals=args.option_goals,
        copy=CopyTask(steps=args.copy_steps),
        size=size,
    )
    env = WebShopEnv.load(cache_dir=Path(".wsrl/catalog"))
    out = args.out or Path(tempfile.mkdtemp(prefix="tiny-policy-"))
    manifest = bootstrap(env, out, config, force=args.out is None)
    print(f"parameters: {manifest['parameters']:,}")
    steps, tokens = manifest["demonstrations"], manifest["demo_tokens"]
    print(f"demonstration steps: {steps} ({tokens:,} tokens)")
    print(f"prompt tokens: {tokens / steps:.0f} per step (history {args.history})")
    print(
        f"bootstrap s: {manifest['seconds']:.1f} wall, {manifest['cpu_seconds']:.1f} CPU "
        f"(copy accuracy {manifest['copy_accuracy']:.3f}, final SFT loss "
        f"{manifest['final_loss']:.3f})"
    )
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    goals = env.goal_ids("test")[: args.goals]
    protocol = policy_protocol(get_settings(), out)  # as its bootstrap recorded it
    print(f"action accuracy by kind: {action_accuracy(model, tokenizer, env, goals, protocol)}")
    success, reward = random_baseline(env, goals, args.seed)
    print(f"success random: {success:.1%} on {len(goals)} test goals, mean reward {reward:.3f}")
    for name, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        started = time.perf_counter()
        result = evaluate(
            model,
            tokenizer,
            env,
            goals,
            protocol=protocol,
            temperature=temperature,
            seed=args.seed,
        )
        print(
            f"success {name}: {result.success_rate:.1%} on {len(goals)} test goals, "
            f"mean reward {result.mean_reward:.3f}, invalid steps "
            f"{result.invalid_steps}/{result.steps}, eval s {time.perf_counter() - started:.1f}"
        )


if __name__ == "__main__":
    main()
