"""The database schema: the source of truth for what ran, what it produced and what was trained.

Alembic (``migrations/``) is the only way this schema reaches a database; a test checks
that autogenerate finds no difference between these models and the migrations.

Status columns hold the values of the ``StrEnum``s in :mod:`app.db.lifecycle` (stored
as short strings with a CHECK constraint, so adding a state is a migration of one
constraint, not of a Postgres enum type). Change them through
:func:`app.db.lifecycle.check_transition`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from app.db.lifecycle import (
    AttemptStatus,
    GoalSource,
    PolicyVersionStatus,
    RolloutMode,
    RolloutStart,
    RolloutStatus,
)
from app.db.types import JsonOrNull, Logprobs, TokenIds

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _state(enum_cls: type[StrEnum], name: str) -> Enum:
    """A VARCHAR + CHECK column whose Python values are members of ``enum_cls``."""
    return Enum(
        enum_cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda cls: [member.value for member in cls],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _now() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Goal(Base):
    """One task of an environment. What every environment's goal has is a column; its own
    fields are its ``spec``, written and validated by its environment
    (:data:`app.environments.ENVIRONMENTS`; WebShop's id is the env's goal index, its spec
    the product's asin, attributes, options and price limit). The view ``webshop_goals``
    gives WebShop's spec as columns."""

    __tablename__ = "goals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    environment: Mapped[str] = mapped_column(Text, index=True, server_default="webshop")
    spec: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)
    split: Mapped[str] = mapped_column(Text, index=True)
    instruction: Mapped[str] = mapped_column(Text)
    category: Mapped[str | None] = mapped_column(Text)
    weight: Mapped[float] = mapped_column(Float, server_default="1")
    source: Mapped[GoalSource] = mapped_column(
        _state(GoalSource, "source"), server_default=GoalSource.SYNTHETIC.value
    )


class PolicyVersion(Base):
    """A published policy: where it is served and from which checkpoint."""

    __tablename__ = "policy_versions"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    base_url: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    checkpoint: Mapped[str | None] = mapped_column(Text)
    # The base weights a LoRA version's adapter (``checkpoint``) runs on; NULL: the version
    # is whole weights.
    base_model: Mapped[str | None] = mapped_column(Text)
    # The agent protocol it was trained for (app.core.agent.AgentProtocol.to_dict); NULL:
    # its publisher did not say.
    protocol: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)
    status: Mapped[PolicyVersionStatus] = mapped_column(
        _state(PolicyVersionStatus, "status"), server_default=PolicyVersionStatus.SYNCING.value
    )
    created_at: Mapped[datetime] = _now()


class EnqueueRequest(Base):
    """An enqueue made with an ``Idempotency-Key``: a retry with the key gets the same
    rollouts instead of new ones (:func:`app.core.enqueue.enqueue_rollouts`)."""

    __tablename__ = "enqueue_requests"

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    request_hash: Mapped[str] = mapped_column(Text)
    rollout_ids: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)))
    created_at: Mapped[datetime] = _now()


class TrainStep(Base):
    """One policy update; rollouts it consumed point here (``rollouts.train_step``)."""

    __tablename__ = "train_steps"

    step: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    policy_version: Mapped[int | None] = mapped_column(Integer, index=True)
    rollouts_used: Mapped[int] = mapped_column(Integer, server_default="0")
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = _now()


class Rollout(Base):
    """One episode to run; ``group_id`` joins the GRPO samples of one goal.

    ``train_step`` is set, in the same transaction that records the train step, for
    every rollout the trainer consumed: a group with it set is never trained again.
    """

    __tablename__ = "rollouts"
    __table_args__ = (
        # The trainer's query: complete, untrained train groups (then filtered by version).
        Index("ix_rollouts_trainer", "mode", "status", "train_step", "group_id"),
        Index("ix_rollouts_status_deadline_at", "status", "deadline_at"),
        # The dashboard: rollouts newest first (keyset pagination), eval rounds by queue time.
        Index("ix_rollouts_created_at_id", "created_at", "id"),
        Index("ix_rollouts_eval_created_at", "created_at", postgresql_where="mode = 'eval'"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    goal_id: Mapped[int] = mapped_column(ForeignKey("goals.id"), index=True)
    group_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), index=True)
    sample_index: Mapped[int] = mapped_column(Integer, server_default="0")
    mode: Mapped[RolloutMode] = mapped_column(_state(RolloutMode, "mode"))
    # Where the policy starts playing (app.environments.webshop.opening): search (the
    # original task), or the results / item page reached by scripted opening steps.
    start: Mapped[RolloutStart] = mapped_column(
        _state(RolloutStart, "start"), server_default=RolloutStart.SEARCH.value
    )
    status: Mapped[RolloutStatus] = mapped_column(
        _state(RolloutStatus, "status"), server_default=RolloutStatus.QUEUED.value, index=True
    )
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, server_default="3")
    reward: Mapped[float | None] = mapped_column(Float, index=True)
    success: Mapped[bool | None] = mapped_column(Boolean)
    num_steps: Mapped[int | None] = mapped_column(Integer)
    policy_version_min: Mapped[int | None] = mapped_column(Integer)
    policy_version_max: Mapped[int | None] = mapped_column(Integer, index=True)
    reward_parts: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)
    # An external agent (A2A-style URL) plays the episode instead of the built-in agent.
    agent_url: Mapped[str | None] = mapped_column(Text)
    # Sampling parameters for the LLM (temperature, max_tokens, ...), as enqueued.
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)
    worker: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    train_step: Mapped[int | None] = mapped_column(ForeignKey("train_steps.step"), index=True)

    goal: Mapped[Goal] = relationship(lazy="raise")
    attempt_rows: Mapped[list[Attempt]] = relationship(
        back_populates="rollout", order_by="Attempt.number", lazy="raise"
    )


class Attempt(Base):
    """One try of a rollout; rows of an attempt that is not ``succeeded`` are never trained on."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("rollout_id", "number"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    rollout_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str | None] = mapped_column(Text)
    status: Mapped[AttemptStatus] = mapped_column(
        _state(AttemptStatus, "status"), server_default=AttemptStatus.RUNNING.value
    )
    started_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)
    reward: Mapped[float | None] = mapped_column(Float)
    reward_parts: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)

    rollout: Mapped[Rollout] = relationship(back_populates="attempt_rows", lazy="raise")
    steps: Mapped[list[Step]] = relationship(order_by="Step.index", lazy="raise")
    llm_calls: Mapped[list[LlmCall]] = relationship(order_by="LlmCall.index", lazy="raise")


class Step(Base):
    """One environment step of an attempt; malformed actions are rows with ``valid=false``."""

    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("attempt_id", "index"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(Text)
    observation: Mapped[str | None] = mapped_column(Text)
    reward: Mapped[float] = mapped_column(Float, server_default="0")
    done: Mapped[bool] = mapped_column(Boolean, server_default="false")
    valid: Mapped[bool] = mapped_column(Boolean, server_default="true")
    latency_ms: Mapped[float | None] = mapped_column(Float)
    info: Mapped[dict[str, Any] | None] = mapped_column(JsonOrNull)


class LlmCall(Base):
    """One LLM call with the exact tokens the server generated (see :mod:`app.db.types`)."""

    __tablename__ = "llm_calls"
    __table_args__ = (UniqueConstraint("attempt_id", "index"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    policy_version: Mapped[int | None] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(Text)
    request_messages: Mapped[Any] = mapped_column(JSONB)
    response_text: Mapped[str | None] = mapped_column(Text)
    prompt_token_ids: Mapped[list[int] | None] = mapped_column(TokenIds)
    response_token_ids: Mapped[list[int] | None] = mapped_column(TokenIds)
    response_logprobs: Mapped[list[float] | None] = mapped_column(Logprobs)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    # False when the call is not policy output to learn from (e.g. an external endpoint
    # without token ids, or a call whose tokens were cut).
    trainable: Mapped[bool] = mapped_column(Boolean, server_default="true")
    # The request's structured_outputs (e.g. {"regex": ...} from the page's actions): the
    # mask the server decoded under, which the trainer replays. NULL: unconstrained.
    structured_outputs: Mapped[Any | None] = mapped_column(JsonOrNull)
