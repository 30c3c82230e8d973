"""Losses of the local backend, chosen by name from verl's registries (``core_algos``).

The trainer never reimplements a loss: it adapts its data to verl's calling conventions
(``(batch, length)`` tensors, verl config objects) so that names like ``vanilla`` and
``gspo`` mean exactly what they mean in verl. Advantages are the shared
:mod:`trainer.advantages`, the same for both backends.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from verl.trainer.ppo import core_algos
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from trainer.config import TrainerConfig


def actor_config(config: TrainerConfig, rollout_n: int | None = None) -> ActorConfig:
    """verl's actor config carrying the fields its policy losses read."""
    return ActorConfig(
        strategy="fsdp",
        rollout_n=rollout_n or config.group_size,
        ppo_micro_batch_size_per_gpu=config.micro_batch_size,
        clip_ratio=config.clip_ratio_low,
        clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high,
        clip_ratio_c=config.clip_ratio_c,
        loss_agg_mode=config.loss_agg_mode,
        loss_scale_factor=config.max_sample_tokens,
        policy_loss=PolicyLossConfig(loss_mode=config.loss_mode),
    )


def set_global_batch(actor: ActorConfig, loss_masks: Sequence[torch.Tensor]) -> None:
    """Normalise micro-batch losses by the whole batch, so accumulated gradients equal one
    full-batch step (verl's ``global_batch_info``). ``loss_masks``: (B_i, T_i) each."""
    actor.global_batch_info.clear()
    actor.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=int(sum(m.sum().item() for m in loss_masks)),
        global_batch_size=int(sum((m.sum(-1) > 0).sum().item() for m in loss_masks)),
        loss_scale_factor=actor.loss_scale_factor,
    )


def policy_loss(
    old_logprobs: torch.Tensor,
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    actor: ActorConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's policy loss named by ``actor.policy_loss.loss_mode``; all inputs (B, T)."""
    fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    return fn(
        old_log_prob=old_logprobs,
        log_prob=logprobs,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
    )


def aggregate(values: torch.Tensor, mask: torch.Tensor, actor: ActorConfig) -> torch.Tensor:
    """verl's ``agg_loss`` with the batch-wide normalisation of ``actor``; (B, T) -> ()."""
    return core_algos.agg_loss(
        loss_mat=values,
        loss_mask=mask,
        loss_agg_mode=actor.loss_agg_mode,
        **actor.global_batch_info,
    )


def kl_to_reference(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, config: TrainerConfig
) -> torch.Tensor:
    """Per-token KL estimate to the reference (verl's ``kl_penalty``); (B, T) -> (B, T)."""
    return core_algos.kl_penalty(logprobs, ref_logprobs, config.kl_penalty)
