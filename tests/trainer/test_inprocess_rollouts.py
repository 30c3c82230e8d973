"""In-process GRPO: episodes recorded token for token, then one update on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.webshop.env import WebShopEnv
from trainer.backends.local import LocalBackend
from trainer.config import TrainerConfig
from trainer.inprocess_rollouts import grpo_step, play_groups

FIXTURE_CATALOG = Path(__file__).resolve().parents[1] / "webshop" / "fixtures" / "catalog"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    return WebShopEnv.load(data_dir=FIXTURE_CATALOG, cache_dir=tmp_path_factory.mktemp("c"))


def test_play_groups_records_the_generated_tokens_per_call(
    env: WebShopEnv, tiny_checkpoint: Path
) -> None:
    backend = LocalBackend(tiny_checkpoint, TrainerConfig(group_size=2))
    goals = env.goal_ids("test")[:2]
    records = play_groups(
        backend.model, backend.tokenizer, env, goals, 2, version=4, max_steps=1, max_tokens=5
    )
    assert len(records) == 4 and len({r.group_id for r in records}) == 2
    for record in records:
        [call] = record.calls
        assert 1 <= len(call.response_token_ids) <= 5
        assert len(call.response_logprobs) == len(call.response_token_ids)
        assert all(lp <= 0 for lp in call.response_logprobs)
        assert call.policy_version == 4 and call.prompt_token_ids


def test_grpo_step_updates_the_backend(env: WebShopEnv, tiny_checkpoint: Path) -> None:
    backend = LocalBackend(tiny_checkpoint, TrainerConfig(group_size=2, sample_mode="transition"))
    metrics = grpo_step(backend, env, env.goal_ids("test")[:2], max_steps=1, max_tokens=4, seed=0)
    assert metrics["samples/samples"] == 4.0 and backend.version == 1
    assert 0.0 <= metrics["reward/success"] <= 1.0
    # Rewards may all be equal (advantage 0); the update still ran (optimizer state exists).
    assert backend.optimizer.state and "losses/total" in metrics
