"""The local backend's learner: a transformers causal LM updated in this process (CPU or one
GPU).

One :meth:`Learner.update` is one optimizer step per epoch over the whole batch:
micro-batches accumulate gradients and verl's batch-wide normalisation makes the sum equal
to the full-batch loss.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from trainer.backends.local import algorithms
from trainer.backends.local.shared_prompts import shared_prompt_token_stats
from trainer.config import Lora, TrainerConfig
from trainer.constrained import TokenIndex, token_index
from trainer.generation import stop_token_ids
from trainer.lora import load_policy
from trainer.samples import Sample
from trainer.tensors import TrainBatch, collate, head_only_matches, scatter_stats

logger = logging.getLogger(__name__)


class Learner:
    """Owns the policy (and optional frozen reference), its optimizer and its version.

    With ``lora`` enabled the policy is a peft model: only its adapter trains, the
    reference is the same model with the adapter switched off, and :meth:`save` writes the
    adapter alone."""

    def __init__(
        self,
        model_path: str | Path,
        config: TrainerConfig,
        version: int = 0,
        lora: Lora | None = None,
    ) -> None:
        torch.manual_seed(config.seed)
        self.config = config
        self.lora = lora or Lora()
        self.version = version
        self.device = torch.device(config.device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.model = load_policy(model_path, self.lora, self.device)
        self.reference: PreTrainedModel | None = None
        if config.kl_coef > 0 and not self.lora.enabled:
            self.reference = _load_model(model_path, self.device).eval()
            self.reference.requires_grad_(False)
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
        self.actor = algorithms.actor_config(config)
        self._rng = random.Random(config.seed)
        self._head_only = head_only_matches(self.model, len(self.tokenizer))
        if not self._head_only:
            logger.info("%s: logits post-processed after the head; using full logits", model_path)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    def logprobs(self, batch: TrainBatch, model: PreTrainedModel | None = None) -> torch.Tensor:
        """Logprobs of the generated tokens of ``batch`` under ``model`` (default: the
        policy); (B, T-1), 0 where ``loss_mask`` is 0."""
        batch = batch.to(self.device)
        with torch.no_grad():
            return self._token_stats(model or self.model, batch)[0]

    def _token_stats(
        self, model: PreTrainedModel, batch: TrainBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logprobs, entropies) of the next tokens, (B, T-1) each."""
        if self._head_only:
            return shared_prompt_token_stats(
                model, batch.input_ids, batch.attention_mask, batch.loss_mask, batch.allowed
            )
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        where = batch.loss_mask.bool()  # (B, T-1)
        return scatter_stats(logits[:, :-1][where].float(), batch.input_ids, where, batch.allowed)

    @property
    def token_index(self) -> TokenIndex:
        """The vocabulary trie constrained replies are replayed on (the server's, same eos)."""
        return token_index(self.tokenizer, sorted(stop_token_ids(self.model, self.tokenizer)))

    def collate(self, samples: Sequence[Sample]) -> TrainBatch:
        """``samples`` as a batch on the device, constrained replies with their masks."""
        vocab = self.model.get_output_embeddings().weight.shape[0]
        constrained = any(s.constraints for s in samples)
        index = self.token_index if constrained else None
        return collate(samples, self.pad_id, index, vocab).to(self.device)

    def _micro_batches(self, samples: Sequence[Sample]) -> list[TrainBatch]:
        """``samples`` shuffled into micro-batches, those with the same prompt side by side:
        a micro-batch runs a prompt its samples share once
        (:func:`~trainer.backends.local.shared_prompts.generated_hidden`). One optimizer
        step sums them all, so the order changes no gradient."""
        order = list(samples)
        self._rng.shuffle(order)
        first: dict[tuple[int, ...], int] = {}
        for i, s in enumerate(order):
            first.setdefault(_prompt(s), i)
        order.sort(key=lambda s: first[_prompt(s)])
        size = self.config.micro_batch_size
        chunks = [order[i : i + size] for i in range(0, len(order), size)]
        return [self.collate(chunk) for chunk in chunks]

    def _old_and_ref(self, batches: list[TrainBatch]) -> tuple[list, list]:
        """Old logprobs (recomputed or the rollout's) and reference logprobs per micro-batch."""
        self.model.eval()
        old = [
            self.logprobs(b) if self.config.recompute_old_logprobs else b.rollout_logprobs
            for b in batches
        ]
        return old, [self._reference_logprobs(b) for b in batches]

    def _reference_logprobs(self, batch: TrainBatch) -> torch.Tensor | None:
        """The frozen reference's logprobs (None without a KL penalty); with LoRA, the
        base weights under the adapter."""
        if self.config.kl_coef <= 0:
            return None
        if self.reference is not None:
            return self.logprobs(batch, self.reference)
        with self.model.disable_adapter():
            return self.logprobs(batch)

    def _micro_step(
        self, batch: TrainBatch, old: torch.Tensor, ref: torch.Tensor | None
    ) -> dict[str, float]:
        """Forward + backward of one micro-batch; returns its share of the metrics."""
        logp, entropy = self._token_stats(self.model, batch)  # (B, T-1) each
        mask = batch.loss_mask  # (B, T-1)
        pg_loss, pg_metrics = algorithms.policy_loss(old, logp, batch.advantages, mask, self.actor)
        entropy_term = algorithms.aggregate(entropy, mask, self.actor)
        loss = pg_loss
        metrics = {"losses/policy": pg_loss.item(), "losses/entropy": entropy_term.item()}
        if self.config.entropy_coef > 0:
            loss = loss - self.config.entropy_coef * entropy_term
        if ref is not None:
            kl = algorithms.aggregate(
                algorithms.kl_to_reference(logp, ref, self.config), mask, self.actor
            )
            loss = loss + self.config.kl_coef * kl
            metrics["losses/kl"] = kl.item()
        loss.backward()
        metrics["losses/total"] = loss.item()
        weight = mask.sum().item()
        return {**metrics, **{k: v * weight for k, v in pg_metrics.items()}, "_tokens": weight}

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One policy update on ``samples``; returns metrics (losses summed over micro-batches
        are batch-normalised values; ``actor/*`` are token-weighted means)."""
        if not samples:
            raise ValueError("update needs at least one sample.")
        started = time.perf_counter()
        batches = self._micro_batches(samples)
        algorithms.set_global_batch(self.actor, [b.loss_mask for b in batches])
        old, ref = self._old_and_ref(batches)
        totals: dict[str, float] = defaultdict(float)
        self.model.train()
        for _ in range(self.config.update_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for batch, old_lp, ref_lp in zip(batches, old, ref, strict=True):
                for key, value in self._micro_step(batch, old_lp, ref_lp).items():
                    totals[key] += value
            totals["actor/grad_norm"] += self._clip_and_step()
        self.model.eval()
        self.version += 1
        return self._metrics(totals, batches, old, started)

    def _clip_and_step(self) -> float:
        clip = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        return float(norm)

    def _metrics(
        self, totals: dict[str, float], batches: list[TrainBatch], old: list, started: float
    ) -> dict[str, float]:
        epochs = self.config.update_epochs
        tokens = totals.pop("_tokens")
        metrics = {}
        for key, value in totals.items():
            metrics[key] = value / tokens if key.startswith("actor/") else value / epochs
        metrics["actor/grad_norm"] = totals["actor/grad_norm"] / epochs
        if self.config.recompute_old_logprobs:
            diffs = [
                (o - b.rollout_logprobs).abs() * b.loss_mask
                for o, b in zip(old, batches, strict=True)
            ]
            gen = sum(b.loss_mask.sum().item() for b in batches)
            metrics["actor/rollout_vs_old_logprob_abs_diff"] = sum(
                d.sum().item() for d in diffs
            ) / max(gen, 1.0)
        metrics["perf/samples"] = float(sum(len(b) for b in batches))
        metrics["perf/generated_tokens"] = tokens / epochs
        metrics["perf/update_s"] = time.perf_counter() - started
        metrics["policy/version"] = float(self.version)
        return metrics

    def save(self, path: str | Path) -> Path:
        """Writes a Hugging Face checkpoint folder (model + tokenizer; with LoRA, the
        adapter + tokenizer) and returns it."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        return out


def _prompt(sample: Sample) -> tuple[int, ...]:
    """The tokens before the sample's first generated one."""
    first = next((i for i, m in enumerate(sample.loss_mask) if m), len(sample))
    return tuple(sample.input_ids[:first])


def _load_model(model_path: str | Path, device: torch.device) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    return model.to(device).eval()
