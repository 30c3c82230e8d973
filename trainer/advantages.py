"""Advantages of rollouts, the one rule both backends train on.

Each rollout gets one advantage (and return) from its episode return
(:func:`trainer.loop.episode_returns`), computed within its GRPO group by verl's estimator
of that name (``core_algos``), so ``grpo``, ``rloo``, ... mean exactly what they mean in
verl. The statistics are taken over rollouts, never over agent turns: with one row per turn
a 10-turn failure would count ten times against a 2-turn success. The local backend gives
each sample its rollout's advantage (:mod:`trainer.samples`); the verl backend puts it on
the generated tokens of every turn-sample of the rollout
(:func:`trainer.backends.verl.dataproto.with_rollout_advantages`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import torch
from verl.trainer.config.algorithm import AlgoConfig
from verl.trainer.ppo import core_algos


class RolloutAdvantages(NamedTuple):
    """One advantage and one return per rollout, in the order of the rewards given."""

    advantages: list[float]
    returns: list[float]


@lru_cache(maxsize=8)
def _algo_config(adv_estimator: str, norm_adv_by_std: bool) -> AlgoConfig:
    return AlgoConfig(adv_estimator=adv_estimator, norm_adv_by_std_in_grpo=norm_adv_by_std)


def rollout_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[str],
    adv_estimator: str,
    norm_adv_by_std: bool = True,
    algorithm: Any | None = None,
) -> RolloutAdvantages:
    """Each rollout's advantage and return from its scalar reward, within its group.

    Each rollout is a length-1 "response" carrying its outcome reward, which is how verl's
    outcome estimators see a sequence-level score. ``algorithm`` is the config the
    estimator reads besides its arguments (verl's ``algorithm`` section on the verl
    backend); None: one with ``adv_estimator`` and ``norm_adv_by_std`` only.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards for {len(group_ids)} group ids.")
    if not rewards:
        return RolloutAdvantages([], [])
    fn = core_algos.get_adv_estimator_fn(adv_estimator)
    if algorithm is None:
        algorithm = _algo_config(adv_estimator, norm_adv_by_std)
    token_rewards = torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1)  # (n, 1)
    kwargs: dict[str, Any] = {
        "token_level_rewards": token_rewards,
        "response_mask": torch.ones_like(token_rewards),  # (n, 1)
        "index": np.array([str(g) for g in group_ids], dtype=object),
        "config": algorithm,
    }
    if "norm_adv_by_std_in_grpo" in inspect.signature(fn).parameters:
        kwargs["norm_adv_by_std_in_grpo"] = norm_adv_by_std
    advantages, returns = fn(**kwargs)  # (n, 1) each
    return RolloutAdvantages(advantages[:, 0].tolist(), returns[:, 0].tolist())
