"""Advantages of rollouts (both backends') come from verl's estimators and agree with verl
called directly."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from trainer.advantages import rollout_advantages
from trainer.config import TrainerConfig

REWARDS = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.2, 0.9]
GROUPS = ["a", "a", "a", "a", "b", "b", "b", "b"]


def verl_reference(name: str, **kwargs) -> list[float]:
    """verl on (n, 6) token rewards with the outcome on the last token, as verl's trainer does."""
    scores = torch.zeros(len(REWARDS), 6)
    scores[:, -1] = torch.tensor(REWARDS)
    mask = torch.ones_like(scores)
    fn = core_algos.get_adv_estimator_fn(name)
    adv, _ = fn(token_level_rewards=scores, response_mask=mask, index=np.array(GROUPS), **kwargs)
    return adv[:, 0].tolist()


def ours(config: TrainerConfig) -> list[float]:
    return rollout_advantages(
        REWARDS, GROUPS, config.adv_estimator, config.norm_adv_by_std
    ).advantages


def test_grpo_advantages_equal_verl() -> None:
    advantages = ours(TrainerConfig())
    assert advantages == pytest.approx(verl_reference("grpo"), abs=1e-6)
    group_a = np.array(REWARDS[:4])
    expected = (group_a - group_a.mean()) / (group_a.std(ddof=1) + 1e-6)
    assert advantages[:4] == pytest.approx(expected.tolist(), abs=1e-5)


def test_dr_grpo_advantages_are_not_std_normalised() -> None:
    advantages = ours(TrainerConfig.preset("dr_grpo"))
    reference = verl_reference("grpo", norm_adv_by_std_in_grpo=False)
    assert advantages == pytest.approx(reference, abs=1e-6)
    assert advantages[0] == pytest.approx(1.0 - np.mean(REWARDS[:4]))


def test_rloo_advantages_equal_verl() -> None:
    advantages = ours(TrainerConfig.preset("rloo"))
    assert advantages == pytest.approx(verl_reference("rloo", config=None), abs=1e-6)
    assert advantages[0] == pytest.approx(1.0 - np.mean(REWARDS[1:4]))


def test_returns_come_with_the_advantages_in_the_rewards_order() -> None:
    """GRPO's return is its advantage (verl returns the same tensor twice)."""
    computed = rollout_advantages(REWARDS, GROUPS, "grpo")
    assert computed.returns == computed.advantages and len(computed.advantages) == 8
    assert rollout_advantages([], [], "grpo") == ([], [])


def test_mismatched_lengths_rejected() -> None:
    with pytest.raises(ValueError, match="2 rewards for 1 group ids"):
        rollout_advantages([1.0, 0.0], ["a"], "grpo")
