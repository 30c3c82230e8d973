"""Play a policy on WebShop goals in this process: many episodes stepped in lock-step.

Every active episode's prompt is built with :func:`workers.agent.build_messages`, all are
sampled in one batch, replies are parsed with :func:`workers.agent.parse_action`; a reply
without an action is an invalid step (no env call), as in the Celery agent.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.webshop.env import WebShopEnv
from trainer.generation import GenerationRequest, generate_batch
from workers.agent import (
    DEFAULT_HISTORY_STEPS,
    INVALID_REPLY_OBSERVATION,
    NO_ACTION,
    HistoryStep,
    build_messages,
    parse_action,
)


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


def _prompt(episode: _Episode, tokenizer: Any, history_steps: int) -> list[int]:
    s = episode.session
    messages = build_messages(
        s.instruction_text,
        s.observation(),
        s.available_actions(),
        episode.history,
        history_steps=history_steps,
    )
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return list(encoded["input_ids"])


def _advance(episode: _Episode, reply: str, number: int) -> None:
    action = parse_action(reply)
    if action is None:
        episode.invalid += 1
        episode.history.append(HistoryStep(number, NO_ACTION, INVALID_REPLY_OBSERVATION))
        return
    result = episode.session.step(action)
    valid = result.info.get("valid", True)
    episode.invalid += not valid
    seen = result.observation if valid else (result.info.get("error") or "")
    episode.history.append(HistoryStep(number, action, seen))
    episode.done, episode.reward = result.done, result.reward if result.done else 0.0


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
                    _prompt(e, tokenizer, history_steps),
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
