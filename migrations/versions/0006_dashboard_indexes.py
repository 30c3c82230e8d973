"""Indexes of the web dashboard: rollouts newest first, eval rounds by queue time.

``ix_rollouts_created_at_id`` serves the rollouts table's keyset pagination
(``ORDER BY created_at DESC, id DESC``); ``ix_rollouts_eval_created_at`` (partial, eval
rollouts only) finds the latest evaluation rounds without reading the train rollouts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_rollouts_created_at_id", "rollouts", ["created_at", "id"])
    op.create_index(
        "ix_rollouts_eval_created_at",
        "rollouts",
        ["created_at"],
        postgresql_where=sa.text("mode = 'eval'"),
    )


def downgrade() -> None:
    op.drop_index("ix_rollouts_eval_created_at", table_name="rollouts")
    op.drop_index("ix_rollouts_created_at_id", table_name="rollouts")
