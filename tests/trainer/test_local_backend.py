"""The local backend: logprobs, one update with accumulation and KL, checkpoints."""

import pytest
import torch
from helpers.learner_samples import SAMPLES, sample
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.backends.local.learner import Learner
from trainer.backends.local.shared_prompts import shared_prompt_token_stats
from trainer.config import TrainerConfig
from trainer.samples import Sample
from trainer.tensors import (
    collate,
    generated_token_stats,
    head_only_matches,
    token_entropy,
    token_logprobs,
)


def response_logprob(backend: Learner, s: Sample) -> float:
    lp = backend.logprobs(collate([s], backend.pad_id))  # (1, T-1)
    return float((lp * torch.tensor(s.loss_mask[1:])).sum())


def test_logprobs_shape_and_values_are_log_probabilities(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig())
    batch = collate(SAMPLES, backend.pad_id)
    lp = backend.logprobs(batch)
    assert lp.shape == (3, batch.input_ids.shape[1] - 1)
    assert (lp <= 0).all()


def test_update_moves_probability_towards_positive_advantage(tiny_checkpoint) -> None:
    config = TrainerConfig(lr=3e-3, micro_batch_size=2, grad_clip=1.0)
    backend = Learner(tiny_checkpoint, config)
    good, bad = response_logprob(backend, SAMPLES[0]), response_logprob(backend, SAMPLES[1])
    for _ in range(5):
        metrics = backend.update(SAMPLES)
    assert response_logprob(backend, SAMPLES[0]) > good
    assert response_logprob(backend, SAMPLES[1]) < bad
    assert backend.version == 5
    for key in ("losses/policy", "losses/entropy", "actor/grad_norm", "actor/pg_clipfrac"):
        assert key in metrics
    assert metrics["perf/generated_tokens"] == 9.0


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_checkpoint) -> None:
    grads = []
    for micro in (1, 3):
        backend = Learner(tiny_checkpoint, TrainerConfig(micro_batch_size=micro, lr=1e-9))
        backend.update(SAMPLES)
        grads.append(torch.cat([p.grad.flatten() for p in backend.model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_rollout_logprobs_used_when_not_recomputed(tiny_checkpoint) -> None:
    config = TrainerConfig(recompute_old_logprobs=False, lr=1e-4)
    metrics = Learner(tiny_checkpoint, config).update(SAMPLES)
    # rollout logprobs (-1.0) differ from the model's: the ratio is far from 1, so clipping
    assert metrics["actor/pg_clipfrac"] > 0
    assert "actor/rollout_vs_old_logprob_abs_diff" not in metrics


def test_kl_to_reference_reported_and_zero_before_any_step(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig(kl_coef=0.1, lr=1e-3))
    assert backend.reference is not None
    first = backend.update(SAMPLES)
    second = backend.update(SAMPLES)
    assert first["losses/kl"] == pytest.approx(0.0, abs=1e-6)
    assert second["losses/kl"] > 0


def test_empty_update_rejected(tiny_checkpoint) -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        Learner(tiny_checkpoint, TrainerConfig()).update([])


def test_save_writes_a_loadable_checkpoint(tiny_checkpoint, tmp_path) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig(lr=1e-2))
    backend.update(SAMPLES)
    out = backend.save(tmp_path / "step-1")
    model = AutoModelForCausalLM.from_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(out))
    batch = collate(SAMPLES, backend.pad_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    assert torch.allclose(
        logits,
        backend.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
        atol=1e-5,
    )


def test_head_only_stats_equal_full_logits_on_generated_tokens(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig())
    assert backend._head_only  # a Qwen2 checkpoint: logits are lm_head(hidden)
    batch = collate(SAMPLES, backend.pad_id)
    model = backend.model
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        logp, entropy = generated_token_stats(
            model, batch.input_ids, batch.attention_mask, batch.loss_mask
        )
    mask = batch.loss_mask.bool()
    assert torch.allclose(logp[mask], token_logprobs(logits, batch.input_ids)[mask], atol=1e-5)
    assert torch.allclose(entropy[mask], token_entropy(logits)[mask], atol=1e-5)
    assert (logp[~mask] == 0).all() and (entropy[~mask] == 0).all()


def test_logit_post_processing_falls_back_to_full_logits(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig())
    original = backend.model.forward

    def soft_capped(*args, **kwargs):  # logits changed after the head, as Gemma 2 does
        out = original(*args, **kwargs)
        out.logits = 5.0 * torch.tanh(out.logits / 5.0)
        return out

    backend.model.forward = soft_capped
    assert not head_only_matches(backend.model, len(backend.tokenizer))


def test_a_model_without_a_separate_decoder_uses_full_logits(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig())

    def no_decoder():
        raise NotImplementedError("this architecture exposes no decoder")

    backend.model.get_decoder = no_decoder
    assert not head_only_matches(backend.model, len(backend.tokenizer))


SHARED = [  # a group's replies to one prompt, and another prompt's reply
    sample("a", [1, 30, 40, 50, 60], [70, 80, 2], 1.0),
    sample("b", [1, 31], [50, 2], -1.0),
    sample("c", [1, 30, 40, 50, 60], [90, 2], -1.0),
    sample("d", [1, 30, 40, 50, 60], [70, 91, 92, 93, 2], 1.0),
]


def test_replies_to_a_shared_prompt_get_the_full_forward_logprobs_and_gradients(
    tiny_checkpoint,
) -> None:
    model = Learner(tiny_checkpoint, TrainerConfig()).model
    batch = collate(SHARED, pad_id=0)
    mask = batch.loss_mask.bool()
    grads = []
    for shared in (True, False):
        model.zero_grad()
        if shared:
            logp, _ = shared_prompt_token_stats(
                model, batch.input_ids, batch.attention_mask, batch.loss_mask
            )
        else:
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            logp = token_logprobs(logits, batch.input_ids) * batch.loss_mask
        (logp[mask] * torch.arange(1.0, mask.sum().item() + 1)).sum().backward()
        grads.append((logp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-5)


def test_micro_batches_keep_a_shared_prompt_together(tiny_checkpoint) -> None:
    backend = Learner(tiny_checkpoint, TrainerConfig(micro_batch_size=3))
    batches = backend._micro_batches(SHARED)
    assert [len(b) for b in batches] == [3, 1] or [len(b) for b in batches] == [1, 3]
    group = next(b for b in batches if len(b) == 3)
    assert (group.input_ids[:, :5] == torch.tensor([1, 30, 40, 50, 60])).all()
