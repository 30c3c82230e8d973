"""A tiny Qwen2 checkpoint built in seconds (no download), shared by the trainer tests."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.config import Settings
from app.core.endpoint import withdraw_endpoint
from app.db import migrate
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


@pytest.fixture
def fresh_settings(
    make_database: Callable[[], str], test_settings: Settings, tmp_path: Path
) -> Iterator[Settings]:
    """Settings on a freshly migrated database of this test alone (a trainer trains every
    group it finds), ``data_dir`` in the test's tmp dir.

    Redis is the session's: what a trainer publishes there is withdrawn afterwards, or the
    workers of later tests would call the endpoint it left (the record wins over
    ``WSRL_LLM_BASE_URL``)."""
    url = make_database()
    migrate.upgrade(url)
    yield test_settings.model_copy(update={"database_url": url, "data_dir": tmp_path})
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    try:
        withdraw_endpoint(client)
    finally:
        client.close()
