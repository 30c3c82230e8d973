"""The episode recorder: row mapping, batching threshold and the episode budget."""

from __future__ import annotations

import uuid

import pytest
import redis
from helpers.factories import make_llm_call

from app.config import Settings
from app.core.agent import NO_ACTION, StepRecord
from app.core.llm import LLMCall, call_row
from workers.recording import AttemptRecorder, EpisodeBudgetExceeded, LogPublisher, step_row


def _step(action: str | None = "search[lamp]") -> StepRecord:
    return StepRecord(
        index=0,
        action=action,
        reply="I will search[lamp]",
        observation="results",
        reward=0.0,
        done=False,
        valid=action is not None,
        info={"valid": action is not None, "available_actions": {"clickables": ["x"] * 50}},
        error=None if action else "no action",
        llm_latency_ms=100.0,
        env_latency_ms=5.0,
        policy_version=3,
    )


def _call() -> LLMCall:
    return make_llm_call(
        messages=[{"role": "user", "content": "hi"}],
        prompt_token_ids=[1, 2],
        response_token_ids=[3],
        response_logprobs=[-0.5],
        latency_ms=100.0,
        policy_version=3,
    )


def test_step_row_keeps_reply_and_latencies_drops_available_actions() -> None:
    row = step_row(_step())
    assert row["latency_ms"] == 105.0
    assert row["info"]["reply"] == "I will search[lamp]"
    assert row["info"]["env_latency_ms"] == 5.0
    assert "available_actions" not in row["info"]
    assert step_row(_step(None))["action"] == NO_ACTION


def test_call_row_keeps_server_token_ids() -> None:
    row = call_row(4, _call())
    assert (row["index"], row["policy_version"]) == (4, 3)
    assert row["prompt_token_ids"] == [1, 2] and row["response_logprobs"] == [-0.5]


def test_recorder_stops_an_episode_past_its_budget(test_settings: Settings) -> None:
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    publisher = LogPublisher(
        client, "wsrl:logs:test", rollout_id=uuid.uuid4(), attempt=1, worker="w"
    )
    recorder = AttemptRecorder(None, 1, publisher, flush_every=100, budget_s=-1)  # type: ignore[arg-type]
    with pytest.raises(EpisodeBudgetExceeded, match="budget"):
        recorder.on_llm_call(_call())
    assert len(recorder.take_pending()) == 1
    client.close()
