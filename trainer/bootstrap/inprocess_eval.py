"""Play a policy on WebShop goals in this process: many episodes stepped in lock-step.

Every active episode is a :class:`trainer.bootstrap.play.LocalEpisode` (the agent protocol, as in
the Celery worker); all are sampled in one batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.agent import DEFAULT_PROTOCOL, AgentProtocol
from app.core.intervals import mean_half_width, rate_half_width
from app.db.lifecycle import RolloutStart
from app.webshop.env import WebShopEnv
from app.webshop.success import success_rate
from trainer.bootstrap.play import LocalEpisode
from trainer.config import Sampling
from trainer.generation import GenerationRequest, generate_batch


@dataclass
class EvalResult:
    """Outcome of evaluating a policy on some goals."""

    rewards: list[float]
    invalid_steps: int
    steps: int

    @property
    def success_rate(self) -> float:
        return success_rate(self.rewards)

    @property
    def mean_reward(self) -> float:
        return statistics.fmean(self.rewards) if self.rewards else 0.0

    @property
    def success_ci(self) -> float:
        """Half-width of the normal 95 % interval of the success rate."""
        return rate_half_width(self.success_rate, len(self.rewards))

    @property
    def reward_ci(self) -> float:
        """Half-width of the normal 95 % interval of the mean reward."""
        n = len(self.rewards)
        return mean_half_width(statistics.stdev(self.rewards), n) if n > 1 else 0.0


def evaluate(
    model: Any,
    tokenizer: Any,
    env: WebShopEnv,
    goal_ids: Sequence[int],
    *,
    protocol: AgentProtocol = DEFAULT_PROTOCOL,
    temperature: float = 0.0,
    max_tokens: int = Sampling().max_tokens,
    batch_size: int = 25,
    seed: int = 0,
    start: RolloutStart | str = RolloutStart.SEARCH,
    progress: Callable[[int, int, str], None] | None = None,
) -> EvalResult:
    """Rewards of ``model`` on ``goal_ids`` (greedy at temperature 0, else sampled), played
    with ``protocol`` as a worker plays it (its constrained replies limited to the page's
    valid actions by this process's decoder). The policy plays from ``start``
    (:mod:`app.environments.webshop.opening`); a held-out measure of the task starts at ``search``.

    ``progress(steps, at_most, detail)`` is called after every batch: the episode steps
    played so far and at most how many there will be in all (every unfinished episode
    playing to ``max_steps``; it shrinks as episodes end). Episodes advance together, so
    steps, not finished episodes, are what grows at a steady pace. A reply is cut at
    ``max_tokens``, by default the cap the run configuration samples train and held-out
    rollouts with (:class:`trainer.config.Sampling`), so a policy is scored as it played."""
    max_steps = protocol.max_steps
    episodes = [LocalEpisode(env, g, protocol, start=start) for g in goal_ids]
    steps = 0
    if progress is not None:
        progress(
            0, len(episodes) * max_steps, f"step 1/{max_steps}, 0/{len(episodes)} episodes over"
        )
    for number in range(1, max_steps + 1):
        active = [e for e in episodes if not e.done]
        for start in range(0, len(active), batch_size):
            chunk = active[start : start + batch_size]
            requests = [
                GenerationRequest(
                    e.prompt_ids(tokenizer),
                    max_tokens,
                    temperature,
                    seed=seed * 100_003 + number * 1009 + i,
                    structured_outputs=e.structured_outputs(),
                )
                for i, e in enumerate(chunk, start)
            ]
            for episode, out in zip(chunk, generate_batch(model, tokenizer, requests), strict=True):
                episode.reply(out.text)
            steps += len(chunk)
            if progress is not None:
                played = active[: start + len(chunk)]
                waiting = len(active) - len(played)  # yet to play step ``number``
                alive = sum(not e.done for e in played)
                at_most = steps + (alive + waiting) * (max_steps - number) + waiting
                finished = sum(e.done for e in episodes)
                detail = f"step {number}/{max_steps}, {finished}/{len(episodes)} episodes over"
                progress(steps, at_most, detail)
    return EvalResult([e.reward for e in episodes], sum(e.invalid for e in episodes), steps)
