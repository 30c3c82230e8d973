"""policy_versions.base_model: the base weights a LoRA version's adapter runs on.

A run with ``--lora-rank`` publishes each version as an adapter (its checkpoint folder
holds the adapter alone) over base weights that never change; this names them. NULL: the
version is whole weights.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("policy_versions", sa.Column("base_model", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("policy_versions", "base_model")
