"""Batched sampling from a causal LM with a KV cache, recording token ids and logprobs.

Prompts are left-padded so that every row's next token sits in the last column. The
recorded logprob of a sampled token is the raw model's (temperature 1, no top-p), like
vLLM's default ``raw_logprobs``: it is what the trainer's forward pass computes, so the
rollout's logprobs and the trainer's agree up to float error.

A request with ``structured_outputs`` is decoded under that constraint
(:mod:`trainer.constrained`): at each step the tokens that cannot continue a match get
``-inf``, and the recorded logprob is the log-softmax over the allowed tokens only, which
is what the trainer computes when it replays the same mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.constrained import (
    TokenConstraint,
    compile_pattern,
    masked_log_softmax,
    regex_of,
    token_index,
    vocab_mask,
)


@dataclass(frozen=True)
class GenerationRequest:
    """One sequence to sample."""

    prompt_ids: Sequence[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    structured_outputs: dict | None = None
    """vLLM's ``structured_outputs`` (``regex`` or ``choice``): the reply must match it."""


@dataclass
class Generation:
    """What was sampled for one request."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as (B, L) ids and attention mask, padding on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
) -> int:
    """One token from logits (V,): greedy at temperature 0, else nucleus sampling."""
    if temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (V,)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the first over top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


class _Row:
    """Decoding state of one request."""

    def __init__(
        self, request: GenerationRequest, fallback_seed: int, index_of=lambda: None
    ) -> None:
        self.request = request
        self.out = Generation()
        self.constraint: TokenConstraint | None = None
        if request.structured_outputs is not None:
            pattern = compile_pattern(regex_of(request.structured_outputs))
            self.constraint = TokenConstraint(pattern, index_of())
        self.generator = torch.Generator().manual_seed(
            request.seed if request.seed is not None else fallback_seed
        )

    @property
    def done(self) -> bool:
        return self.out.finish_reason is not None

    def push(self, token: int, logp: torch.Tensor, tokenizer, stop_ids: set[int], k: int) -> None:
        """Record ``token`` (logp: (V,) log-probs, renormalised under a constraint) and
        decide whether the row finished."""
        self.out.token_ids.append(token)
        self.out.logprobs.append(float(logp[token]))
        if self.constraint is not None:
            self.constraint.advance(token)
        if k > 0:
            values, indices = logp.topk(min(k, logp.shape[-1]))
            top = zip(indices.tolist(), values.tolist(), strict=True)
            self.out.top_logprobs.append([(t, v) for t, v in top if v != float("-inf")])
        text = tokenizer.decode(self.out.token_ids, skip_special_tokens=True)
        hit = [text.index(s) for s in self.request.stop if s and s in text]
        self.out.text = text[: min(hit)] if hit else text
        if token in stop_ids or hit:
            self.out.finish_reason = "stop"
        elif len(self.out.token_ids) >= self.request.max_tokens:
            self.out.finish_reason = "length"


def stop_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The ids that end a reply (also the end of a constrained reply, server and trainer)."""
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    return {i for i in [tokenizer.eos_token_id, *ids] if i is not None}


def _prefill(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache]:
    """The prompts' last logits (B, V), attention mask and positions (B, L) and their KV
    cache. Equal prompts (a GRPO group's first turn) are computed once and their cache
    rows repeated (8 replies to one 400-token prompt of SmolLM2-135M: 3-8 s instead of 19-26
    s); only the last position's logits are computed (a 49k-token head over every prompt
    position was a quarter of its prefill)."""
    device = next(model.parameters()).device
    unique = list(dict.fromkeys(tuple(p) for p in prompts))
    row = {p: i for i, p in enumerate(unique)}
    where = torch.tensor([row[tuple(p)] for p in prompts], device=device)  # (B,)
    ids, mask = (t.to(device) for t in left_pad(unique, pad_id))  # (U, L) each
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, L)
    cache = DynamicCache()
    logits = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        logits_to_keep=1,
    ).logits[:, -1]  # (U, V)
    if len(unique) < len(prompts):
        cache.reorder_cache(where)
    return logits[where], mask[where], positions[where], cache


@torch.no_grad()
def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[GenerationRequest],
    fallback_seed: int = 0,
    top_logprobs: int = 0,
) -> list[Generation]:
    """Sample all ``requests`` together; a row stops at EOS, a stop string or max_tokens."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    stop_ids = stop_token_ids(model, tokenizer)
    rows = [
        _Row(r, fallback_seed + i, lambda: token_index(tokenizer, sorted(stop_ids)))
        for i, r in enumerate(requests)
    ]
    device = next(model.parameters()).device
    logits, mask, positions, cache = _prefill(model, [r.prompt_ids for r in requests], pad_id)
    while True:
        logits = logits.float().cpu()  # (B, V)
        next_ids = torch.full((len(rows),), pad_id, dtype=torch.long, device=device)  # (B,)
        for i, row in enumerate(rows):
            if row.done:
                continue
            row_logits = logits[i]  # (V,)
            if row.constraint is not None:
                allowed = vocab_mask(row.constraint.allowed(), row_logits.shape[-1])
                row_logits = row_logits.masked_fill(~allowed, float("-inf"))
            logp = masked_log_softmax(row_logits, None)  # (V,)
            token = sample_token(
                row_logits, row.request.temperature, row.request.top_p, row.generator
            )
            row.push(token, logp, tokenizer, stop_ids, top_logprobs)
            next_ids[i] = token
        if all(row.done for row in rows):
            return [row.out for row in rows]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)  # (B, L+1)
        positions = positions[:, -1:] + 1  # (B, 1)
        logits = model(
            input_ids=next_ids[:, None],
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
        ).logits[:, -1]  # (B, V)
