"""A ``jsonb`` value written as ``None`` is SQL NULL, not the JSON value ``null``.

The models' nullable ``jsonb`` columns now write Python ``None`` as NULL
(:class:`app.db.types.JsonOrNull`); rows written before hold the JSON value ``null``
where they had none (every unconstrained LLM call's ``structured_outputs``, every
rollout queued without sampling overrides), which ``IS NULL`` does not find. This
revision turns those into NULL. It reads each of the six columns once; on a large
``llm_calls`` table the update of ``structured_outputs`` rewrites most rows and takes a
while. The application reads both as ``None``, so going back changes nothing.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 03:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("policy_versions", "protocol"),
    ("rollouts", "reward_parts"),
    ("rollouts", "sampling"),
    ("attempts", "reward_parts"),
    ("steps", "info"),
    ("llm_calls", "structured_outputs"),
)


def upgrade() -> None:
    for table, column in COLUMNS:
        op.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} = 'null'::jsonb")


def downgrade() -> None:
    """Nothing to undo: revision 0007's code reads SQL NULL as ``None``, as it read the
    JSON value ``null``, and its own writes of ``None`` keep writing JSON ``null``."""
