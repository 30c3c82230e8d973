"""Play a policy on WebShop goals in this process: many episodes stepped in lock-step.

Every active episode's prompt is built and its reply applied by :mod:`trainer.inprocess_agent`
(as in the Celery agent); all are sampled in one batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.webshop.env import WebShopEnv
from trainer.generation import GenerationRequest, generate_batch
from trainer.inprocess_agent import apply_reply, prompt_ids
from workers.agent import DEFAULT_HISTORY_STEPS, HistoryStep


@dataclass
class _Episode:
    session: Any
    history: list[HistoryStep] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    invalid: int = 0


@dataclass
class EvalResult:
    """Outcome of evaluating a policy on some goals."""

    rewards: list[float]
    invalid_steps: int
    steps: int

    @property
    def success_rate(self) -> float:
        return sum(r == 1.0 for r in self.rewards) / max(len(self.rewards), 1)

    @property
    def mean_reward(self) -> float:
        return statistics.fmean(self.rewards) if self.rewards else 0.0


def _advance(episode: _Episode, reply: str, number: int) -> None:
    valid, episode.done, episode.reward = apply_reply(
        episode.session, episode.history, reply, number
    )
    episode.invalid += not valid


def evaluate(
    model: Any,
    tokenizer: Any,
    env: WebShopEnv,
    goal_ids: Sequence[int],
    *,
    temperature: float = 0.0,
    max_steps: int = 15,
    max_tokens: int = 32,
    batch_size: int = 25,
    seed: int = 0,
    history_steps: int = DEFAULT_HISTORY_STEPS,
) -> EvalResult:
    """Rewards of ``model`` on ``goal_ids`` (greedy at temperature 0, else sampled), with
    prompts showing the last ``history_steps`` steps."""
    episodes = [_Episode(env.new_session(g)) for g in goal_ids]
    steps = 0
    for number in range(1, max_steps + 1):
        active = [e for e in episodes if not e.done]
        for start in range(0, len(active), batch_size):
            chunk = active[start : start + batch_size]
            requests = [
                GenerationRequest(
                    prompt_ids(e.session, e.history, tokenizer, history_steps),
                    max_tokens,
                    temperature,
                    seed=seed * 100_003 + number * 1009 + i,
                )
                for i, e in enumerate(chunk, start)
            ]
            for episode, out in zip(chunk, generate_batch(model, tokenizer, requests), strict=True):
                _advance(episode, out.text, number)
            steps += len(chunk)
    return EvalResult([e.reward for e in episodes], sum(e.invalid for e in episodes), steps)
