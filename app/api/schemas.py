"""Request and response bodies of the control-plane API (the OpenAPI schema at /docs)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from app.core.llm import SamplingOverrides
from app.db.lifecycle import (
    AttemptStatus,
    PolicyVersionStatus,
    RolloutMode,
    RolloutStart,
    RolloutStatus,
)


class ErrorOut(BaseModel):
    """Every error answer. ``detail`` says what is wrong: a message, or FastAPI's list of
    the invalid fields for a request that fails validation."""

    detail: str | list[dict[str, Any]]


def error_responses(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route or router: each status code with its meaning, answered
    with an :class:`ErrorOut` body (documented in the OpenAPI schema)."""
    return {code: {"model": ErrorOut, "description": text} for code, text in described.items()}


UNAUTHORIZED = {401: "Missing or wrong bearer token (WSRL_API_TOKEN)."}
UNPARSABLE = {400: "The body cannot be parsed (not UTF-8)."}
MAX_ROLLOUTS_PER_REQUEST = 50_000
"""Goals x group_size of one enqueue: its rows are written in one transaction and its ids
come back in one answer, so a client that times out on a larger one cannot tell whether
it landed (send more requests, each with its own Idempotency-Key)."""


class RolloutCreate(BaseModel):
    """Either ``goal_ids`` or ``split`` + ``count``; each goal gets ``group_size`` samples."""

    model_config = ConfigDict(extra="forbid")

    goal_ids: list[int] | None = Field(None, min_length=1, max_length=10_000)
    split: str | None = Field(None, description="Goal split to sample from, with count.")
    count: int | None = Field(None, ge=1, le=10_000, description="Goals drawn from split.")
    group_size: int = Field(1, ge=1, le=256, description="Samples per goal (GRPO group).")
    mode: RolloutMode = RolloutMode.TRAIN
    start: RolloutStart = Field(
        RolloutStart.SEARCH,
        description="Where the policy starts playing: search (the original task), or the "
        "results / item page reached by scripted opening steps (built-in agent only).",
    )
    agent_url: HttpUrl | None = Field(None, description="External agent playing the episodes.")
    sampling: SamplingOverrides | None = Field(
        None, description="LLM sampling parameters over the workers' defaults (bounded)."
    )

    @model_validator(mode="after")
    def _one_source_of_goals(self) -> RolloutCreate:
        if self.goal_ids is not None and (self.split is not None or self.count is not None):
            raise ValueError("give either goal_ids or split + count, not both")
        if self.goal_ids is None and (self.split is None or self.count is None):
            raise ValueError("give goal_ids, or split and count")
        goals = len(self.goal_ids) if self.goal_ids is not None else self.count or 0
        if goals * self.group_size > MAX_ROLLOUTS_PER_REQUEST:
            raise ValueError(
                f"{goals} goals x group_size {self.group_size} = {goals * self.group_size:,} "
                f"rollouts; at most {MAX_ROLLOUTS_PER_REQUEST:,} per request: split it into "
                "several requests"
            )
        return self


class RolloutsCreated(BaseModel):
    ids: list[uuid.UUID]
    count: int


class RolloutCancel(BaseModel):
    """The rollouts to cancel: these ``ids``, every one of ``mode``, or those of both."""

    model_config = ConfigDict(extra="forbid")

    ids: list[uuid.UUID] | None = Field(None, min_length=1, max_length=10_000)
    mode: RolloutMode | None = Field(None, description="Every unfinished rollout of this mode.")

    @model_validator(mode="after")
    def _something_chosen(self) -> RolloutCancel:
        if self.ids is None and self.mode is None:
            raise ValueError("give ids, a mode, or both")
        return self


class RolloutsCancelled(BaseModel):
    """The rollouts this request cancelled (finished ones are left as they are)."""

    ids: list[uuid.UUID]
    count: int


class AttemptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    status: AttemptStatus
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    error: str | None
    reward: float | None


class RolloutOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    goal_id: int
    group_id: uuid.UUID
    sample_index: int
    mode: RolloutMode
    start: RolloutStart
    status: RolloutStatus
    attempts: int
    max_attempts: int
    reward: float | None
    success: bool | None
    num_steps: int | None
    policy_version_min: int | None
    policy_version_max: int | None
    reward_parts: dict[str, Any] | None
    agent_url: str | None
    sampling: dict[str, Any] | None
    worker: str | None
    last_error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RolloutDetail(RolloutOut):
    attempt_history: list[AttemptOut] = Field(description="Every attempt, oldest first.")


class RolloutPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[RolloutOut]


class StepOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    action: str
    observation: str | None
    reward: float
    done: bool
    valid: bool
    latency_ms: float | None
    info: dict[str, Any] | None


class LlmCallOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    policy_version: int | None
    model: str | None
    request_messages: Any
    response_text: str | None
    finish_reason: str | None
    latency_ms: float | None
    trainable: bool
    num_prompt_tokens: int | None = None
    num_response_tokens: int | None = None
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None


class Trajectory(BaseModel):
    rollout_id: uuid.UUID
    goal_id: int
    instruction: str
    mode: RolloutMode
    rollout_status: RolloutStatus
    attempt: AttemptOut
    reward: float | None
    reward_parts: dict[str, Any] | None
    steps: list[StepOut]
    llm_calls: list[LlmCallOut]


EndpointStatus = Literal["serving", "paused"]


class AgentProtocolIn(BaseModel):
    """How workers play a policy: what its trainer would publish with it. Every field is
    required, so that a worker never fills a gap with its own setting."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["text", "tools"]
    history_steps: int = Field(ge=0, le=1000, strict=True, description="Previous steps shown.")
    constrain_actions: bool = Field(
        strict=True, description="Replies limited to the page's valid actions (text mode only)."
    )
    max_steps: int = Field(ge=1, le=1000, strict=True, description="Steps before reward 0.")
    result_refs: Literal["ids", "numbers"] = Field(
        "ids", description="How prompts name results: ids (the original's pages) or numbers."
    )


class PolicyEndpointIn(BaseModel):
    """The endpoint workers and the gateway call; ``paused`` while weights sync."""

    model_config = ConfigDict(extra="forbid")

    base_url: HttpUrl
    model: str = Field(min_length=1)
    version: int = Field(ge=0, le=2**31 - 1, strict=True, description="A JSON integer.")
    status: EndpointStatus = "serving"
    checkpoint: str | None = Field(None, description="Recorded on the policy_versions row.")
    protocol: AgentProtocolIn | None = Field(
        None,
        description="The agent protocol the policy expects, recorded on its policy_versions "
        "row; workers play it. Null: workers play their own settings.",
    )
    base_model: str | None = Field(
        None,
        description="The base weights under the LoRA adapter that `model` names; null: the "
        "version is whole weights.",
    )


class PolicyEndpointOut(BaseModel):
    base_url: str | None
    model: str | None
    version: int | None
    status: str
    source: Literal["redis", "settings"] = Field(
        description="Where it came from: published in Redis, or the settings' fallback."
    )
    protocol: dict[str, Any] | None = Field(
        None,
        description="The agent protocol the policy expects (mode, history_steps, "
        "constrain_actions, max_steps), as its trainer published it; workers play it.",
    )
    base_model: str | None = Field(
        None, description="The base weights under the LoRA adapter; null: whole weights."
    )


class PolicyVersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    version: int
    base_url: str | None
    model: str | None
    checkpoint: str | None
    base_model: str | None = Field(
        None, description="The base weights under the LoRA adapter (checkpoint); null: whole."
    )
    protocol: dict[str, Any] | None = Field(
        None, description="The agent protocol it was published with; null: none named."
    )
    status: PolicyVersionStatus
    created_at: datetime


class VersionStats(BaseModel):
    policy_version: int | None
    rollouts: int
    mean_reward: float | None
    success_rate: float | None


class Stats(BaseModel):
    queue_depth: dict[str, int]
    in_flight: int
    by_status: dict[str, int]
    failed_infrastructure: int = Field(
        description="Failed rollouts whose last error names a part of the deployment (env, "
        "LLM, endpoint, database, Redis, a lost worker): outages, not scores of the policy."
    )
    completed_per_minute: float
    window_minutes: int
    by_policy_version: list[VersionStats]


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    db: str
    redis: str
