"""llm_calls.structured_outputs: the constraint a reply was decoded under.

A call whose request limited the reply (vLLM's ``structured_outputs``, e.g. the page's
valid actions as a regex) records it here, so the trainer replays the same mask when it
computes log-probabilities. NULL: the reply was unconstrained.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 11:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("llm_calls", sa.Column("structured_outputs", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("llm_calls", "structured_outputs")
