"""Our samples as verl's ``DataProto``, laid out exactly as verl's agent loop lays out its own.

verl's trainer consumes what ``AgentLoopWorker._agent_loop_postprocess`` + ``_postprocess``
produce: prompts left-padded to ``prompt_length``, responses right-padded to
``response_length``, ``input_ids = prompts ++ responses``, an attention mask that is 0 on
padding, positions counted over attended tokens only, ``response_mask`` = 1 on generated
tokens (0 on observation tokens and padding), the server's logprobs as
``rollout_log_probs`` and the outcome reward on the last response token (``rm_scores``,
which verl's ``extract_reward`` turns into ``token_level_scores``). The contract tests run
verl's own post-processing on the same token sequences and compare key for key.

A sample's prompt is its tokens up to the first generated one; everything after, including
later turns' observation tokens (mask 0), is its response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from trainer.advantages import RolloutAdvantages
from trainer.samples import Sample


@dataclass(frozen=True)
class SplitSample:
    """One sample cut at its first generated token."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]


def split_sample(sample: Sample) -> SplitSample:
    """Prompt = tokens before the first generated one; a sample with none is an error."""
    try:
        start = sample.loss_mask.index(1)
    except ValueError:
        raise ValueError(
            f"rollout {sample.rollout_id}: sample has no generated token (loss_mask all 0); "
            "samples without generated tokens cannot be trained."
        ) from None
    if start == 0:
        raise ValueError(
            f"rollout {sample.rollout_id}: sample starts with a generated token; every sample "
            "needs at least one prompt token."
        )
    return SplitSample(
        prompt_ids=list(sample.input_ids[:start]),
        response_ids=list(sample.input_ids[start:]),
        response_mask=list(sample.loss_mask[start:]),
        response_logprobs=[float(x) for x in sample.rollout_logprobs[start:]],
    )


def _width(name: str, needed: int, limit: int | None) -> int:
    if limit is None:
        return needed
    if needed > limit:
        raise ValueError(
            f"a sample's {name} has {needed} tokens but {name}_length={limit}; raise "
            f"actor_rollout_ref.rollout.{name}_length or lower max_sample_tokens."
        )
    return limit


def build_dataproto(
    samples: Sequence[Sample],
    rewards: Mapping[str, float],
    pad_token_id: int,
    prompt_length: int | None = None,
    response_length: int | None = None,
) -> DataProto:
    """A verl batch of ``samples``; ``rewards`` maps rollout id -> the episode's reward.

    Widths default to the longest prompt / response of the batch; fixed widths (verl's
    ``rollout.prompt_length`` / ``response_length``) raise when a sample does not fit,
    since truncating would train on tokens the policy did not see in that order.
    ``uid`` is the GRPO group id, so verl's group estimators compare within a group.
    """
    if not samples:
        raise ValueError("build_dataproto needs at least one sample.")
    missing = sorted({s.rollout_id for s in samples} - set(rewards))
    if missing:
        raise ValueError(f"no reward for rollout(s) {', '.join(missing[:5])}.")
    parts = [split_sample(s) for s in samples]
    p_width = _width("prompt", max(len(p.prompt_ids) for p in parts), prompt_length)
    r_width = _width("response", max(len(p.response_ids) for p in parts), response_length)
    b = len(parts)
    prompts = torch.full((b, p_width), pad_token_id, dtype=torch.long)  # (B, P) left-padded
    responses = torch.full((b, r_width), pad_token_id, dtype=torch.long)  # (B, R) right-padded
    prompt_attn = torch.zeros((b, p_width), dtype=torch.long)
    response_attn = torch.zeros((b, r_width), dtype=torch.long)
    response_mask = torch.zeros((b, r_width), dtype=torch.long)
    logprobs = torch.zeros((b, r_width), dtype=torch.float32)
    scores = torch.zeros((b, r_width), dtype=torch.float32)
    for i, (part, sample) in enumerate(zip(parts, samples, strict=True)):
        n_p, n_r = len(part.prompt_ids), len(part.response_ids)
        prompts[i, p_width - n_p :] = torch.tensor(part.prompt_ids)
        prompt_attn[i, p_width - n_p :] = 1
        responses[i, :n_r] = torch.tensor(part.response_ids)
        response_attn[i, :n_r] = 1
        response_mask[i, :n_r] = torch.tensor(part.response_mask)
        logprobs[i, :n_r] = torch.tensor(part.response_logprobs, dtype=torch.float32)
        scores[i, n_r - 1] = float(rewards[sample.rollout_id])
    attention_mask = torch.cat([prompt_attn, response_attn], dim=1)  # (B, P+R)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),  # (B, P+R)
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),  # (B, P+R)
            "rollout_log_probs": logprobs,
            "rm_scores": scores,
            "token_level_scores": scores.clone(),
        },
        batch_size=b,
    )
    non_tensor = {
        "uid": np.array([s.group_id for s in samples], dtype=object),
        "rollout_id": np.array([s.rollout_id for s in samples], dtype=object),
        "policy_version_min": np.array([s.policy_version_min for s in samples], dtype=np.int64),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info={})


# --- what verl's update needs besides the layout ---------------------------------------------


def fitting_samples(
    samples: Sequence[Sample], prompt_length: int, response_length: int
) -> tuple[list[Sample], int]:
    """The samples whose prompt and response fit verl's fixed widths, and how many did not.

    An over-long sample is dropped on its own (and counted) instead of failing the whole
    batch; truncating it would train on tokens the policy did not see in that order.
    """
    kept = []
    for sample in samples:
        part = split_sample(sample)
        if len(part.prompt_ids) <= prompt_length and len(part.response_ids) <= response_length:
            kept.append(sample)
    return kept, len(samples) - len(kept)


PAD_ID = "__pad__"
"""``rollout_id`` and ``uid`` of the rows :func:`pad_to_multiple` adds."""


def pad_to_multiple(data: DataProto, multiple: int) -> tuple[DataProto, int]:
    """``data`` with rows added until its size is a multiple of ``multiple``; returns the
    batch and the number of rows added.

    verl's actor update splits the batch into mini-batches of ``ppo_mini_batch_size x n``
    rows and asserts that they divide it, but one sample per agent turn makes the batch
    size whatever the episodes' turns add up to. The added rows copy the first row's tokens
    (so every row is a valid sequence for verl's no-padding conversion) with
    ``response_mask``, scores and logprobs zero: they carry no token into the loss.
    """
    size = len(data)
    missing = (-size) % multiple
    if missing == 0:
        return data, 0
    zeroed = {"response_mask", "rm_scores", "token_level_scores", "rollout_log_probs"}
    tensors = {}
    for key, value in data.batch.items():
        extra = value[:1].repeat(missing, *([1] * (value.dim() - 1)))
        if key in zeroed:
            extra = torch.zeros_like(extra)
        tensors[key] = torch.cat([value, extra])
    non_tensor = {}
    for key, array in data.non_tensor_batch.items():
        fill = PAD_ID if array.dtype == object else array[0]
        non_tensor[key] = np.concatenate([array, np.full(missing, fill, dtype=array.dtype)])
    batch = TensorDict(tensors, batch_size=size + missing)
    padded = DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))
    return padded, missing


def with_rollout_advantages(
    data: DataProto, rollouts: Sequence[str], computed: RolloutAdvantages
) -> DataProto:
    """``data`` with each turn-sample carrying its rollout's advantage and return
    (:func:`trainer.advantages.rollout_advantages`, computed over ``rollouts`` in that
    order) on its generated tokens; padding rows, and rows of a rollout not in
    ``rollouts``, get 0."""
    position = {rollout: k for k, rollout in enumerate(rollouts)}
    rows = [position.get(r) for r in data.non_tensor_batch["rollout_id"]]
    advantages, returns = computed
    per_row_adv = torch.tensor([0.0 if k is None else advantages[k] for k in rows])
    per_row_ret = torch.tensor([0.0 if k is None else returns[k] for k in rows])
    mask = data.batch["response_mask"].to(torch.float32)
    data.batch["advantages"] = per_row_adv[:, None] * mask
    data.batch["returns"] = per_row_ret[:, None] * mask
    return data


def served_vs_trainer(batch: DataProto) -> dict[str, float]:
    """How far the served logprobs (the workers' ``rollout_log_probs``, from vLLM) are from
    the trainer's ``old_log_probs`` of the same tokens: verl's own
    ``training/rollout_probs_diff_{max,mean,std}`` (absolute differences of the tokens'
    probabilities over the response mask) and their Pearson correlation."""
    from verl.utils.debug.metrics import calculate_debug_metrics

    if not {"rollout_log_probs", "old_log_probs"} <= set(batch.batch.keys()):
        return {}  # (a TensorDict answers no `in`)
    return {k: float(v) for k, v in calculate_debug_metrics(batch).items()}
