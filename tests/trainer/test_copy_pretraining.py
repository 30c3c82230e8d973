"""Copy pretraining forms the copying a policy needs, fast, on a from-scratch model."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.bootstrap.copy_pretraining import CopyTask, copy_batch, copy_pretrain


def _model(vocab: int) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def test_copy_batch_repeats_the_span_after_the_filler() -> None:
    task = CopyTask(batch_size=3, span=5, filler=4)
    ids, span = copy_batch((10, 20), task, torch.Generator().manual_seed(1))
    assert ids.shape == (3, 14) and span.shape == (3, 5)
    assert torch.equal(ids[:, :5], span) and torch.equal(ids[:, -5:], span)
    assert int(ids.min()) >= 10 and int(ids.max()) < 20


def test_copy_pretraining_teaches_a_random_model_to_repeat() -> None:
    vocab = 200
    task = CopyTask(steps=150, batch_size=16, span=12, filler=6, lr=3e-3)
    accuracy = copy_pretrain(_model(vocab), (2, vocab), task, seed=0)
    # Chance is 1/198; an n-gram model cannot do it either (the spans are random).
    assert accuracy > 0.8
