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
