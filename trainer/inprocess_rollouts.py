"""GRPO without the queue: episodes played in this process, recorded token for token.

The same agent prompt and action parsing as the Celery workers (:mod:`workers.agent`),
the same samples, advantages and backend update as :mod:`trainer.loop`; only the
transport differs (no Celery, no Postgres, no HTTP). It exists so that learning itself can
be tested in CI within minutes, and so the update can be benchmarked without workers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.webshop.env import WebShopEnv
from trainer.algorithms import rollout_advantages
from trainer.generation import GenerationRequest, generate_batch
from trainer.inprocess_agent import apply_reply, prompt_ids
from trainer.samples import CallRecord, RolloutRecord, build_samples
from workers.agent import DEFAULT_HISTORY_STEPS, HistoryStep


@dataclass
class _Episode:
    group_id: str
    session: Any
    history: list[HistoryStep] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False


def play_groups(
    model: Any,
    tokenizer: Any,
    env: WebShopEnv,
    goal_ids: Sequence[int],
    group_size: int,
    *,
    version: int = 0,
    max_steps: int = 15,
    max_tokens: int = 32,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 32,
    prepare: Callable[[Any], list[HistoryStep]] | None = None,
    history_steps: int = DEFAULT_HISTORY_STEPS,
) -> list[RolloutRecord]:
    """``group_size`` sampled episodes per goal, one group per goal, with their LLM calls.

    ``prepare`` may advance each new session (e.g. replay some oracle steps) and returns
    the history the agent's prompt shows for those steps.
    """
    episodes = []
    for goal in goal_ids:
        for _ in range(group_size):
            session = env.new_session(goal)
            history = prepare(session) if prepare is not None else []
            episodes.append(_Episode(f"g{seed}-{goal}", session, history))
    rng = random.Random(seed)
    for number in range(1, max_steps + 1):
        active = [e for e in episodes if not e.done]
        for start in range(0, len(active), batch_size):
            chunk = active[start : start + batch_size]
            prompts = [prompt_ids(e.session, e.history, tokenizer, history_steps) for e in chunk]
            requests = [
                GenerationRequest(p, max_tokens, temperature, seed=rng.randrange(2**31))
                for p in prompts
            ]
            outs = generate_batch(model, tokenizer, requests)
            for episode, prompt, out in zip(chunk, prompts, outs, strict=True):
                episode.calls.append(CallRecord(prompt, out.token_ids, out.logprobs, version))
                _, episode.done, episode.reward = apply_reply(
                    episode.session, episode.history, out.text, number
                )
    return [
        RolloutRecord(f"{e.group_id}-{i}", e.group_id, e.reward, e.calls)
        for i, e in enumerate(episodes)
    ]


def grpo_step(
    backend: Any,
    env: WebShopEnv,
    goal_ids: Sequence[int],
    *,
    max_steps: int,
    max_tokens: int,
    seed: int,
    temperature: float = 1.0,
    prepare: Callable[[Any], list[HistoryStep]] | None = None,
    history_steps: int = DEFAULT_HISTORY_STEPS,
) -> dict[str, float]:
    """Play one batch of groups with the backend's current weights and update on it."""
    config = backend.config
    backend.model.eval()
    records = play_groups(
        backend.model,
        backend.tokenizer,
        env,
        goal_ids,
        config.group_size,
        version=backend.version,
        max_steps=max_steps,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        prepare=prepare,
        history_steps=history_steps,
    )
    advantages = rollout_advantages(
        [r.reward for r in records], [r.group_id for r in records], config
    )
    samples, stats = build_samples(
        records,
        {r.rollout_id: a for r, a in zip(records, advantages, strict=True)},
        config.sample_mode,
        config.max_sample_tokens,
        config.sample_weighting,
    )
    rewards = [r.reward for r in records]
    metrics = {
        "reward/mean": sum(rewards) / len(rewards),
        "reward/success": sum(r == 1.0 for r in rewards) / len(rewards),
        **stats.as_metrics(),
    }
    if samples:
        metrics.update(backend.update(samples))
    return metrics
