"""Fixtures of the environments' tests: a database session maker, and tiny random weights
whose tokenizer knows the words of BabyAI's prompts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings
from app.db.session import make_engine, make_sessionmaker
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer

# Words of BabyAI's prompts, for a tokenizer of random tiny weights.
TEXTS = [
    "You see: red ball 1, 2 steps ahead and 1 step to your left; grey key 1, 3 steps "
    "ahead. Ahead of you: 4 steps free, then a wall. You are carrying nothing.",
    "Available actions: turn left turn right move forward go to red ball 1 pickup blue "
    "box 2 toggle drop go through open door check available actions",
    "Instruction: go to the purple key. Previous steps: none, this is the first step.",
] * 40


@pytest.fixture
def sessions(fresh_settings: Settings) -> Iterator:
    engine = make_engine(fresh_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture(scope="module")
def babyai_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-babyai")
    tokenizer = train_tokenizer(TEXTS, 400)
    size = TinySize(400, 32, 2, 2, 64, max_positions=4096)
    build_model(tokenizer, size, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
