"""Losses come from verl's registries and agree with verl called directly."""

import pytest
import torch

from trainer.backends.local import algorithms
from trainer.config import TrainerConfig


@pytest.mark.parametrize("preset", ["grpo", "gspo", "dr_grpo"])
def test_policy_loss_runs_and_has_gradient(preset: str) -> None:
    config = TrainerConfig.preset(preset, max_sample_tokens=8)
    actor = algorithms.actor_config(config)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])  # (B, T)
    algorithms.set_global_batch(actor, [mask])
    old = torch.log(torch.full((2, 3), 0.5))
    logp = old.clone().requires_grad_(True)
    adv = torch.tensor([[1.0], [-1.0]]).expand(2, 3) * mask
    loss, metrics = algorithms.policy_loss(old, logp, adv, mask, actor)
    loss.backward()
    assert "actor/pg_clipfrac" in metrics
    assert logp.grad is not None and logp.grad.abs().sum() > 0
    # ratio 1: the loss is minus the aggregated advantage, which is 0 here by symmetry
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


def test_vanilla_token_mean_loss_is_minus_mean_advantage_at_ratio_one() -> None:
    actor = algorithms.actor_config(TrainerConfig())
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    algorithms.set_global_batch(actor, [mask])
    adv = torch.tensor([[2.0], [1.0]]).expand(2, 3) * mask
    lp = torch.zeros(2, 3)
    loss, _ = algorithms.policy_loss(lp, lp, adv, mask, actor)
    assert loss.item() == pytest.approx(-(2.0 * 3 + 1.0) / 4)


def test_global_batch_normalisation_sums_micro_batches_to_full_batch() -> None:
    actor = algorithms.actor_config(TrainerConfig())
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    algorithms.set_global_batch(actor, [mask[:2], mask[2:]])
    split = algorithms.aggregate(values[:2], mask[:2], actor) + algorithms.aggregate(
        values[2:], mask[2:], actor
    )
    assert split.item() == pytest.approx((values * mask).sum().item() / mask.sum().item())


def test_kl_to_reference_zero_when_equal() -> None:
    lp = torch.randn(2, 4)
    kl = algorithms.kl_to_reference(lp, lp.clone(), TrainerConfig(kl_coef=0.1))
    assert torch.allclose(kl, torch.zeros_like(kl))


def test_the_return_is_discounted_per_policy_step_after_the_first() -> None:
    from trainer.loop import discounted_return

    config = TrainerConfig(step_discount=0.9)
    assert discounted_return(1.0, 1, config) == 1.0
    assert discounted_return(0.5, 3, config) == pytest.approx(0.5 * 0.81)
    assert discounted_return(0.0, 15, config) == 0.0
    assert discounted_return(0.7, 9, TrainerConfig(step_discount=1.0)) == 0.7
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="step_discount"):
            TrainerConfig(step_discount=bad)


def test_of_two_rollouts_that_buy_the_same_the_shorter_gets_the_higher_advantage() -> None:
    """A detour (a sub-page, leaving and coming back) scores below going straight, which
    the reward alone does not tell (the local backend's prepare, as the loop calls it)."""
    from trainer.backends.local.run import LocalBackend
    from trainer.loop import episode_returns
    from trainer.samples import CallRecord, RolloutRecord

    def record(rid: str, reward: float, steps: int) -> RolloutRecord:
        calls = [CallRecord([1, 2], [3], [-0.1], 0) for _ in range(steps)]
        return RolloutRecord(rid, "g", reward, calls)

    records = [record("straight", 1.0, 3), record("detour", 1.0, 5), record("none", 0.0, 15)]
    advantage = {}
    for discount in (0.95, 1.0):
        config = TrainerConfig(step_discount=discount)
        run = LocalBackend(None, None, config, None)  # type: ignore[arg-type]
        samples, _ = run.prepare(records, episode_returns(records, config))
        advantage[discount] = {s.rollout_id: s.advantage for s in samples}
    assert advantage[0.95]["straight"] > advantage[0.95]["detour"] > 0 > advantage[0.95]["none"]
    assert advantage[1.0]["straight"] == advantage[1.0]["detour"]
