"""Fixtures of the environments' tests: a database session maker, tiny random weights whose
tokenizer knows the words of BabyAI's prompts, and two steps of the tiny pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.processes import celery_worker

from app.config import Settings
from app.core.endpoint import read_endpoint
from app.db.session import make_engine, make_sessionmaker
from trainer.backends.local.run import start_local_run
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer
from trainer.config import RunConfig, Sampling, Schedule, TrainerConfig
from trainer.loop import LoopOptions

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


@pytest.fixture
def train_two_steps() -> Callable[[Settings, Path, Path, str], list[int]]:
    return _train_two_steps


def _train_two_steps(
    settings: Settings, checkpoint: Path, tmp_path: Path, environment: str
) -> list[int]:
    """Two steps of two groups of four on ``environment``'s train goals: a Celery worker
    process plays them against the local trainer's policy server; returns the versions
    the steps published."""
    worker = celery_worker(tmp_path, settings, concurrency=8, name=environment).start()
    trainer = None
    try:
        config = TrainerConfig(
            group_size=4, batch_groups=2, max_staleness=1, lr=1e-3, skip_zero_variance=False
        )
        run = RunConfig(
            algorithm=config,
            sampling=Sampling(temperature=1.0, max_tokens=12),
            schedule=Schedule(environment=environment, split="train"),
        )
        options = LoopOptions(checkpoint_dir=tmp_path / "ckpt", poll_s=0.2)
        trainer = start_local_run(settings, run, checkpoint, options)
        results = trainer.loop.run(steps=2, wait_timeout_s=240)
        versions = [r.version for r in results]
        assert versions == [1, 2], worker.tail()
        assert read_endpoint(trainer.redis).version == 2  # type: ignore[union-attr]
        return versions
    finally:
        if trainer is not None:
            trainer.close()
        worker.stop()
