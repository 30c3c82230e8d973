"""policy_versions.protocol: the agent protocol a policy version was trained for.

Its trainer publishes it with the version (``{mode, history_steps, constrain_actions,
max_steps}``, :class:`app.core.agent.AgentProtocol`), so that workers play what the policy
expects and a Redis record restored from Postgres still carries it. NULL: the publisher
did not say (versions published before this revision, ``PUT /v1/policy``), and workers play
their own settings.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("policy_versions", sa.Column("protocol", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("policy_versions", "protocol")
