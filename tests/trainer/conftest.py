"""A tiny Qwen2 checkpoint built in seconds (no download), shared by the trainer tests."""

from pathlib import Path

import pytest

from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer

TEXTS = [
    "i need a red cotton shirt for men, and price lower than 30.00 dollars",
    "search[red cotton shirt] click[b00abc123] click[buy now] click[< prev]",
    "Instruction: buy a blue ceramic mug under 20 dollars. Current observation: results",
    "You are a shopping agent. Answer with one action: search[...] or click[...].",
] * 30
TINY = TinySize(
    vocab_size=400, hidden_size=32, layers=2, heads=2, intermediate_size=64, max_positions=512
)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-policy")
    tokenizer = train_tokenizer(TEXTS, TINY.vocab_size)
    model = build_model(tokenizer, TINY, seed=0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
