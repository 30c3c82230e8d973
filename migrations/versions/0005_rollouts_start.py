"""rollouts.start: where the policy's part of an episode begins.

``search`` (every existing row, and the default) is the original WebShop task; ``results``
and ``item`` are reached by scripted opening steps (:mod:`app.core.opening`). A short
string with a CHECK constraint, like ``mode`` and ``status``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 14:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "rollouts",
        sa.Column("start", sa.String(length=16), server_default="search", nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_rollouts_start"), "rollouts", "start IN ('search', 'results', 'item')"
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_rollouts_start"), "rollouts", type_="check")
    op.drop_column("rollouts", "start")
