"""Samples to padded tensors, and per-token logprobs from a causal LM.

Token ``t`` is predicted from positions ``< t``, so every per-token tensor here has
length ``T - 1`` and index ``t`` refers to token ``input_ids[:, t + 1]``.

Agent samples are mostly prompt: a turn of the WebShop agent is a few hundred prompt
tokens and a dozen generated ones. :func:`generated_token_stats` therefore runs the
vocabulary projection only where a token was generated; on the tiny policy that made a
train step's update several times faster than full logits (README, Training).

A reply decoded under a constraint (``Sample.constraints``) was sampled from the logits
renormalised over the tokens its pattern allowed; :func:`allowed_matrix` replays those
masks and the logprobs here are renormalised the same way, so the rollout's logprobs and
the trainer's agree and the importance ratio is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainer.constrained import TokenIndex, allowed_rows
from trainer.samples import Sample


@dataclass
class TrainBatch:
    """Right-padded tensors of some samples."""

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long, 0 on padding
    loss_mask: torch.Tensor  # (B, T-1) float, 1 where token t+1 was generated
    rollout_logprobs: torch.Tensor  # (B, T-1) float, the server's logprob of token t+1
    advantages: torch.Tensor  # (B, T-1) float, the rollout's advantage x sample weight
    allowed: torch.Tensor | None = None  # (N, V) bool per generated token (row-major), or None

    def to(self, device: str | torch.device) -> TrainBatch:
        return TrainBatch(
            **{k: None if v is None else v.to(device) for k, v in self.__dict__.items()}
        )

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate(
    samples: Sequence[Sample], pad_id: int, index: TokenIndex | None = None, vocab: int = 0
) -> TrainBatch:
    """Right-pad ``samples`` to the longest one; with ``index`` (and the logits' width
    ``vocab``), constrained replies get their masks in ``allowed``."""
    if not samples:
        raise ValueError("collate needs at least one sample.")
    width = max(len(s) for s in samples)
    b = len(samples)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    logprobs = torch.zeros((b, width), dtype=torch.float32)
    for i, s in enumerate(samples):
        n = len(s)
        input_ids[i, :n] = torch.tensor(s.input_ids)
        attention[i, :n] = 1
        mask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
        logprobs[i, :n] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
    # A positive weight on the advantage scales the token's PPO-clip loss exactly (the clip
    # acts on the ratio), so it is how samples.build_samples' weighting reaches the loss.
    advantages = torch.tensor([s.advantage * s.weight for s in samples]).unsqueeze(-1)  # (B, 1)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=mask[:, 1:],
        rollout_logprobs=logprobs[:, 1:],
        advantages=advantages.expand(b, width - 1) * mask[:, 1:],
        allowed=allowed_matrix(samples, index, vocab) if index is not None else None,
    )


def allowed_matrix(samples: Sequence[Sample], index: TokenIndex, vocab: int) -> torch.Tensor | None:
    """(N, V) bool: the tokens allowed at each generated position of ``samples``, in the
    row-major order of their loss masks (all True where a reply was unconstrained); None
    when no reply was constrained."""
    if not any(s.constraints for s in samples):
        return None
    rows: list[torch.Tensor] = []
    for s in samples:
        starts = {start: value for start, value in s.constraints}
        generated = [t for t in range(1, len(s)) if s.loss_mask[t]]
        replay: dict[int, list[int]] = {}
        for start, value in starts.items():
            end = start
            while end < len(s) and s.loss_mask[end]:
                end += 1
            for k, allowed in enumerate(allowed_rows(value, s.input_ids[start:end], index)):
                replay[start + k] = allowed
        for t in generated:
            row = torch.ones(vocab, dtype=torch.bool)
            if t in replay:
                row = torch.zeros(vocab, dtype=torch.bool)
                row[torch.tensor(replay[t], dtype=torch.long)] = True
            rows.append(row)
    return torch.stack(rows)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token. logits (B, T, V), input_ids (B, T) -> (B, T-1)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each next-token distribution. logits (B, T, V) -> (B, T-1)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    return -(logp.exp() * logp).sum(-1)  # (B, T-1)


def generated_token_stats(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob and entropy of each generated token, computing logits only there.

    input_ids, attention_mask: (B, T); loss_mask: (B, T-1). Returns two (B, T-1) tensors,
    zero where ``loss_mask`` is 0; the logprobs carry gradient, the entropies do too (an
    entropy bonus needs it). Equal to :func:`token_logprobs` / :func:`token_entropy` on
    the full logits for models whose logits are ``lm_head(last hidden state)``; see
    :func:`head_only_matches`. ``allowed`` (N, V): renormalise over those tokens only.
    """
    hidden = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask
    ).last_hidden_state  # (B, T, H)
    where = loss_mask.bool()  # (B, T-1)
    logits = model.get_output_embeddings()(hidden[:, :-1][where]).float()  # (N, V)
    return scatter_stats(logits, input_ids, where, allowed)


def scatter_stats(
    logits: torch.Tensor, input_ids: torch.Tensor, where: torch.Tensor, allowed: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob and entropy of the generated tokens from their logits (N, V), masked to
    ``allowed`` (N, V) when given, scattered back to (B, T-1) at ``where``.

    Raises ValueError when a token lies outside its allowed set: the loss mask and the
    replayed masks disagree (a misaligned mask, another tokenizer than the server's), and
    its logprob would be ``-inf``."""
    tokens = input_ids[:, 1:][where].unsqueeze(-1)  # (N, 1)
    if allowed is not None:
        if allowed.shape[0] != tokens.shape[0] or not bool(allowed.gather(-1, tokens).all()):
            raise ValueError(
                "a trained token lies outside the mask its reply was decoded under: the loss "
                "mask and the replayed structured_outputs masks disagree"
            )
        logits = logits.masked_fill(~allowed, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)  # (N, V)
    chosen = logp.gather(-1, tokens).squeeze(-1)  # (N,)
    p_logp = torch.where(logp.isfinite(), logp.exp() * logp, torch.zeros_like(logp))
    entropy = -p_logp.sum(-1)  # (N,)
    zeros = torch.zeros(where.shape, dtype=logp.dtype, device=logp.device)  # (B, T-1)
    return zeros.masked_scatter(where, chosen), zeros.masked_scatter(where, entropy)


@torch.no_grad()
def head_only_matches(model: Any, vocab_size: int, atol: float = 1e-4) -> bool:
    """Whether :func:`generated_token_stats` reproduces the model's own forward pass.

    Some architectures post-process logits (soft-capping, scaling) after the output
    embedding; for those the backend falls back to full logits.
    """
    generator = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    ids = torch.randint(0, vocab_size, (2, 12), generator=generator).to(device)  # (2, 12)
    attention = torch.ones_like(ids)
    mask = torch.ones((2, 11), device=device)
    expected = token_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids)
    try:
        got, _ = generated_token_stats(model, ids, attention, mask)
    except (AttributeError, NotImplementedError, TypeError):
        return False  # no decoder / output embedding to call separately
    return bool(torch.allclose(got, expected, atol=atol))
