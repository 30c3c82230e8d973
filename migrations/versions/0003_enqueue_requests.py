"""``enqueue_requests``: what an enqueue with an ``Idempotency-Key`` created.

A client whose enqueue timed out after the commit retries with the same key and gets the
same rollouts back instead of a second batch.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 11:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "enqueue_requests",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("request_hash", sa.Text(), nullable=False),
        sa.Column("rollout_ids", postgresql.ARRAY(postgresql.UUID(as_uuid=True)), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_enqueue_requests")),
    )


def downgrade() -> None:
    op.drop_table("enqueue_requests")
