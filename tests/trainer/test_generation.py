"""Batched KV-cache sampling: left padding and shared prompts do not change the logprobs."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.generation import GenerationRequest, generate_batch, left_pad, sample_token
from trainer.tensors import token_logprobs


def test_left_pad_puts_tokens_last() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1]))
    gen = torch.Generator().manual_seed(0)
    assert {sample_token(logits, 1.0, 0.5, gen) for _ in range(50)} == {0}
    assert sample_token(logits, 0.0, 1.0, gen) == 0


@pytest.mark.parametrize(
    "prompts",
    [
        [[1, 30, 40, 50, 60, 70, 80, 90], [1, 33], [1, 44, 55, 66]],
        [[1, 44, 55, 66], [1, 30, 40, 50, 60, 70, 80, 90], [1, 44, 55, 66], [1, 44, 55, 66]],
    ],
    ids=["distinct", "shared"],  # shared: a group's prompt is prefilled once
)
def test_batched_logprobs_equal_unpadded_forward(tiny_checkpoint, prompts) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    requests = [GenerationRequest(p, max_tokens=10, seed=i) for i, p in enumerate(prompts)]
    outs = generate_batch(model, tokenizer, requests)
    for prompt, out in zip(prompts, outs, strict=True):
        ids = torch.tensor([prompt + out.token_ids])  # (1, T)
        with torch.no_grad():
            expected = token_logprobs(model(input_ids=ids).logits, ids)[0, len(prompt) - 1 :]
        assert torch.allclose(expected, torch.tensor(out.logprobs), atol=1e-4)
        assert out.finish_reason in ("stop", "length")
