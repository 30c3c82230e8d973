"""A GRPO run small enough for CI: item-page episodes, replies limited to valid actions.

The pieces are the pipeline's own: :class:`trainer.play.LocalEpisode` (the agent protocol
and the page's ``structured_outputs``), :func:`trainer.generation.generate_batch` (the
policy server's decoder, masks included), :func:`trainer.samples.build_samples`,
:func:`trainer.algorithms.rollout_advantages` and :class:`trainer.backends.local.LocalBackend`
(masked logprobs, PPO-clip update). What it leaves out is the transport: Celery, Postgres
and HTTP (their tests are elsewhere).

The sub-task: each episode starts on its target's item page (as if search and result
click had gone right) with a few steps to act; buying ends it with the env's reward, not
buying within the limit scores 0. A randomly initialised policy buys rarely and at random;
what GRPO must learn from reward differences is to choose ``click[buy now]`` among the
page's valid actions, on goals it never saw.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from app.webshop.env import WebShopEnv
from app.webshop.pages import Page
from trainer.algorithms import rollout_advantages
from trainer.backends.local import LocalBackend
from trainer.config import TrainerConfig
from trainer.generation import GenerationRequest, generate_batch
from trainer.play import LocalEpisode
from trainer.samples import CallRecord, RolloutRecord, Sample, build_samples
from trainer.tiny_policy import TinySize, build_model, train_tokenizer

SIZE = TinySize(
    vocab_size=1000, hidden_size=64, layers=2, heads=2, intermediate_size=128, max_positions=2048
)


@dataclass(frozen=True)
class Run:
    steps: int = 8
    goals_per_step: int = 8
    group_size: int = 4
    eval_goals: int = 64
    max_steps: int = 4
    max_tokens: int = 24
    lr: float = 3e-3
    seed: int = 0


def build_checkpoint(env: WebShopEnv, out: Path, seed: int = 0) -> Path:
    """A random Qwen2 policy with a tokenizer trained on the catalog (seconds, no download)."""
    names = [env.product(i).name for i in range(env.num_products)]
    asins = [env.product(i).asin for i in range(env.num_products)]
    ids = [*(a.lower() for a in asins), *(a.upper() for a in asins)]
    tokenizer = train_tokenizer(names, SIZE.vocab_size, words=ids)
    build_model(tokenizer, SIZE, seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def item_page_episode(env: WebShopEnv, goal_id: int) -> LocalEpisode:
    """An episode on ``goal_id`` already on its target's item page."""
    episode = LocalEpisode(env, goal_id, history_steps=1, constrain_actions=True)
    session = episode.session
    session.keywords, session.results, session.page = "target", [session.target_index], Page.RESULTS
    target = env.product(session.target_index).asin.lower()
    assert episode.act(f"click[{target}]"), "the target's result link must open it"
    return episode


def play(
    backend: LocalBackend, env: WebShopEnv, goal_ids: Sequence[int], run: Run, temperature: float,
    seed: int,
) -> tuple[list[float], list[list[CallRecord]]]:  # fmt: skip
    """Rewards and recorded calls of one episode per entry of ``goal_ids``."""
    model, tokenizer = backend.model.eval(), backend.tokenizer
    episodes = [item_page_episode(env, g) for g in goal_ids]
    calls: list[list[CallRecord]] = [[] for _ in episodes]
    for number in range(run.max_steps):
        active = [i for i, e in enumerate(episodes) if not e.done]
        if not active:
            break
        requests = [
            GenerationRequest(
                episodes[i].prompt_ids(tokenizer),
                run.max_tokens,
                temperature,
                seed=seed * 100_003 + number * 1009 + i,
                structured_outputs=episodes[i].structured_outputs(),
            )
            for i in active
        ]
        for i, request, out in zip(
            active, requests, generate_batch(model, tokenizer, requests), strict=True
        ):
            calls[i].append(
                CallRecord(
                    request.prompt_ids,
                    out.token_ids,
                    out.logprobs,
                    backend.version,
                    request.structured_outputs,
                )
            )
            episodes[i].reply(out.text)
    return [e.reward for e in episodes], calls


Sabotage = Callable[[list[float], list[Sample]], None]


def train(
    backend: LocalBackend, env: WebShopEnv, run: Run, sabotage: str | None = None
) -> list[dict[str, float]]:
    """``run.steps`` GRPO steps on train goals; ``sabotage`` (tests only): ``sign`` flips
    the advantages, ``shift`` moves each sample's loss mask one token later."""
    rng = random.Random(run.seed)
    train_goals = env.goal_ids("train")
    metrics = []
    for step in range(run.steps):
        goals = rng.sample(train_goals, run.goals_per_step)
        batch = [g for g in goals for _ in range(run.group_size)]
        rewards, calls = play(backend, env, batch, run, 1.0, run.seed * 7919 + step)
        ids = [f"r{i}" for i in range(len(batch))]
        groups = [f"g{i // run.group_size}" for i in range(len(batch))]
        advantages = rollout_advantages(rewards, groups, backend.config)
        if sabotage == "sign":
            advantages = [-a for a in advantages]
        records = [
            RolloutRecord(r, g, reward, c)
            for r, g, reward, c in zip(ids, groups, rewards, calls, strict=True)
        ]
        samples, _ = build_samples(
            records, dict(zip(ids, advantages, strict=True)), "trajectory", 2048, "rollout"
        )
        if sabotage == "shift":
            for s in samples:
                s.loss_mask = [0, *s.loss_mask[:-1]]
                s.rollout_logprobs = [0.0, *s.rollout_logprobs[:-1]]
        samples = [s for s in samples if s.advantage != 0.0]
        if samples:
            metrics.append({**backend.update(samples), "train/reward": statistics.fmean(rewards)})
    return metrics


def held_out(backend: LocalBackend, env: WebShopEnv, run: Run) -> tuple[float, float]:
    """(mean reward, success rate) greedy on the first ``eval_goals`` test goals."""
    rewards, _ = play(backend, env, env.goal_ids("test")[: run.eval_goals], run, 0.0, 0)
    return statistics.fmean(rewards), sum(r == 1.0 for r in rewards) / len(rewards)


def learning_run(
    env: WebShopEnv, checkpoint: Path, run: Run, sabotage: str | None = None
) -> tuple[tuple[float, float], tuple[float, float], list[dict[str, float]]]:
    """(held-out before, held-out after, per-step metrics)."""
    torch.manual_seed(run.seed)
    config = TrainerConfig(lr=run.lr, micro_batch_size=16, group_size=run.group_size, seed=run.seed)
    backend = LocalBackend(checkpoint, config)
    before = held_out(backend, env, run)
    metrics = train(backend, env, run, sabotage)
    return before, held_out(backend, env, run), metrics


if __name__ == "__main__":  # calibration: python tests/trainer/learning.py [sabotage]
    import sys
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as tmp:
        env = WebShopEnv.load(None, cache_dir=Path(tmp) / "catalog", noun_tagger="rules")
        started = time.perf_counter()
        checkpoint = build_checkpoint(env, Path(tmp) / "policy")
        print(f"checkpoint {time.perf_counter() - started:.1f} s")
        run = Run(steps=int(sys.argv[2]) if len(sys.argv) > 2 else Run.steps)
        before, after, metrics = learning_run(
            env, checkpoint, run, sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
        )
        for m in metrics:
            print({k: round(v, 4) for k, v in m.items() if k.split("/")[0] in ("train", "actor")})
        print(f"before {before}, after {after}, {time.perf_counter() - started:.0f} s")
