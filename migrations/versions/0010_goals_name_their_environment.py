"""goals.environment and goals.spec: a goal names its environment and holds its own fields.

Until now every goal was WebShop's. A goal of another environment (``babyai``) names it
in ``environment`` and keeps what that environment needs to start its episode in
``spec`` (BabyAI: the level, the seed and AgentGym's ``data_idx``); ``asin`` becomes
optional, as only WebShop's goals have one. Every existing row is WebShop's and keeps its
columns, so the views and the dashboard read them as before.

Downgrade refuses while goals of another environment exist: they cannot be WebShop's.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 00:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "goals",
        sa.Column("environment", sa.Text(), server_default="webshop", nullable=False),
    )
    op.add_column("goals", sa.Column("spec", postgresql.JSONB(), nullable=True))
    op.create_index("ix_goals_environment", "goals", ["environment"])
    op.alter_column("goals", "asin", existing_type=sa.Text(), nullable=True)


def downgrade() -> None:
    others = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM goals WHERE environment <> 'webshop'")
    )
    if others:
        raise RuntimeError(
            f"{others} goals belong to another environment than webshop; delete them "
            "(and their rollouts) before downgrading below 0010"
        )
    op.alter_column("goals", "asin", existing_type=sa.Text(), nullable=False)
    op.drop_index("ix_goals_environment", table_name="goals")
    op.drop_column("goals", "spec")
    op.drop_column("goals", "environment")
