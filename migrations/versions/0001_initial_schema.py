"""Initial schema: tables, indices, the views for people and the read-only role.

The role ``wsrl_readonly`` (NOLOGIN) is cluster-wide and may already exist because
another database of the cluster created it; creating it tolerates that, and downgrade
never drops it (other databases may use it). ``wsrl sql`` runs queries under it.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 22:43:36.529216
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

READONLY_ROLE = "wsrl_readonly"

TRAJECTORIES_VIEW = """
CREATE VIEW trajectories AS
SELECT r.id, r.goal_id, g.split, g.instruction, g.category, r.mode, r.status,
       r.reward, r.success, r.num_steps, r.policy_version_min, r.policy_version_max,
       r.attempts, r.max_attempts, r.group_id, r.sample_index, r.train_step, r.worker,
       r.created_at, r.started_at, r.finished_at,
       EXTRACT(EPOCH FROM (r.finished_at - r.started_at)) AS duration_s,
       r.last_error
FROM rollouts r JOIN goals g ON g.id = r.goal_id
"""

# Episodes = rollouts that ran to the end (status succeeded), by the newest policy
# version they saw; failed rollouts (no reward) are counted apart.
POLICY_PERFORMANCE_VIEW = """
CREATE VIEW policy_performance AS
SELECT r.policy_version_max AS policy_version, r.mode,
       count(*) FILTER (WHERE r.status = 'succeeded') AS episodes,
       avg(r.reward) FILTER (WHERE r.status = 'succeeded') AS mean_reward,
       avg(CASE WHEN r.success THEN 1.0 ELSE 0.0 END)
           FILTER (WHERE r.status = 'succeeded') AS success_rate,
       avg(r.num_steps) FILTER (WHERE r.status = 'succeeded') AS mean_steps,
       count(*) FILTER (WHERE r.status = 'failed') AS failed_rollouts
FROM rollouts r
WHERE r.status IN ('succeeded', 'failed')
GROUP BY r.policy_version_max, r.mode
"""

# Roles are cluster-wide and concurrent migrations of several databases may race to
# create it: a duplicate is not an error.
CREATE_ROLE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{READONLY_ROLE}') THEN
        CREATE ROLE {READONLY_ROLE} NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
"""

# The migrating user must be able to SET ROLE to it (PostgreSQL 16+ does not grant that
# to the creator by default); a superuser can anyway, and re-granting is harmless.
GRANT_ROLE_TO_SELF = f"""
DO $$
BEGIN
    IF NOT pg_has_role(current_user, '{READONLY_ROLE}', 'MEMBER') THEN
        EXECUTE format('GRANT {READONLY_ROLE} TO %I', current_user);
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
"""

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "goals",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("split", sa.Text(), nullable=False),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("asin", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("category", sa.Text(), nullable=True),
        sa.Column("product_category", sa.Text(), nullable=True),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("attributes", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column(
            "goal_options",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default="{}",
            nullable=False,
        ),
        sa.Column("price_upper", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), server_default="1", nullable=False),
        sa.Column("source", sa.String(length=16), server_default="synthetic", nullable=False),
        sa.CheckConstraint("source IN ('synthetic', 'human')", name=op.f("ck_goals_source")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_goals")),
    )
    op.create_index(op.f("ix_goals_asin"), "goals", ["asin"], unique=False)
    op.create_index(op.f("ix_goals_split"), "goals", ["split"], unique=False)
    op.create_table(
        "policy_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="syncing", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('syncing', 'active', 'retired')", name=op.f("ck_policy_versions_status")
        ),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_policy_versions")),
    )
    op.create_table(
        "train_steps",
        sa.Column("step", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("rollouts_used", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "metrics", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("step", name=op.f("pk_train_steps")),
    )
    op.create_index(
        op.f("ix_train_steps_policy_version"), "train_steps", ["policy_version"], unique=False
    )
    op.create_table(
        "rollouts",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("goal_id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.UUID(), nullable=False),
        sa.Column("sample_index", sa.Integer(), server_default="0", nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="queued", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="3", nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column("num_steps", sa.Integer(), nullable=True),
        sa.Column("policy_version_min", sa.Integer(), nullable=True),
        sa.Column("policy_version_max", sa.Integer(), nullable=True),
        sa.Column("reward_parts", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("agent_url", sa.Text(), nullable=True),
        sa.Column("sampling", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("worker", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("train_step", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["goal_id"], ["goals.id"], name=op.f("fk_rollouts_goal_id_goals")),
        sa.ForeignKeyConstraint(
            ["train_step"], ["train_steps.step"], name=op.f("fk_rollouts_train_step_train_steps")
        ),
        sa.CheckConstraint("mode IN ('train', 'eval')", name=op.f("ck_rollouts_mode")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_rollouts_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollouts")),
    )
    op.create_index(op.f("ix_rollouts_goal_id"), "rollouts", ["goal_id"], unique=False)
    op.create_index(op.f("ix_rollouts_group_id"), "rollouts", ["group_id"], unique=False)
    op.create_index(
        op.f("ix_rollouts_policy_version_max"), "rollouts", ["policy_version_max"], unique=False
    )
    op.create_index(op.f("ix_rollouts_reward"), "rollouts", ["reward"], unique=False)
    op.create_index(op.f("ix_rollouts_status"), "rollouts", ["status"], unique=False)
    op.create_index(
        "ix_rollouts_status_deadline_at", "rollouts", ["status", "deadline_at"], unique=False
    )
    op.create_index(op.f("ix_rollouts_train_step"), "rollouts", ["train_step"], unique=False)
    op.create_index(
        "ix_rollouts_trainer",
        "rollouts",
        ["mode", "status", "train_step", "group_id"],
        unique=False,
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("rollout_id", sa.UUID(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("worker", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="running", nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("reward_parts", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_attempts_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'failed', 'lost')", name=op.f("ck_attempts_status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("rollout_id", "number", name=op.f("uq_attempts_rollout_id_number")),
    )
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("attempt_id", sa.BigInteger(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("request_messages", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("response_text", sa.Text(), nullable=True),
        sa.Column("prompt_token_ids", postgresql.BYTEA(), nullable=True),
        sa.Column("response_token_ids", postgresql.BYTEA(), nullable=True),
        sa.Column("response_logprobs", postgresql.BYTEA(), nullable=True),
        sa.Column("finish_reason", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("trainable", sa.Boolean(), server_default="true", nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name=op.f("fk_llm_calls_attempt_id_attempts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_calls")),
        sa.UniqueConstraint("attempt_id", "index", name=op.f("uq_llm_calls_attempt_id_index")),
    )
    op.create_table(
        "steps",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("attempt_id", sa.BigInteger(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("observation", sa.Text(), nullable=True),
        sa.Column("reward", sa.Float(), server_default="0", nullable=False),
        sa.Column("done", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("valid", sa.Boolean(), server_default="true", nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("info", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name=op.f("fk_steps_attempt_id_attempts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steps")),
        sa.UniqueConstraint("attempt_id", "index", name=op.f("uq_steps_attempt_id_index")),
    )
    op.execute(TRAJECTORIES_VIEW)
    op.execute(POLICY_PERFORMANCE_VIEW)
    op.execute(CREATE_ROLE)
    op.execute(GRANT_ROLE_TO_SELF)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {READONLY_ROLE}")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READONLY_ROLE}")
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {READONLY_ROLE}"
    )


def downgrade() -> None:
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {READONLY_ROLE}"
    )
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {READONLY_ROLE}")
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {READONLY_ROLE}")
    op.execute("DROP VIEW IF EXISTS policy_performance")
    op.execute("DROP VIEW IF EXISTS trajectories")
    op.drop_table("steps")
    op.drop_table("llm_calls")
    op.drop_table("attempts")
    op.drop_index("ix_rollouts_trainer", table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_train_step"), table_name="rollouts")
    op.drop_index("ix_rollouts_status_deadline_at", table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_status"), table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_reward"), table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_policy_version_max"), table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_group_id"), table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_goal_id"), table_name="rollouts")
    op.drop_table("rollouts")
    op.drop_index(op.f("ix_train_steps_policy_version"), table_name="train_steps")
    op.drop_table("train_steps")
    op.drop_table("policy_versions")
    op.drop_index(op.f("ix_goals_split"), table_name="goals")
    op.drop_index(op.f("ix_goals_asin"), table_name="goals")
    op.drop_table("goals")
