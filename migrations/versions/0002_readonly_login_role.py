"""``wsrl_readonly`` becomes a login role: ``wsrl sql`` connects as it, never as the owner.

Until now ``wsrl sql`` connected as the owner (often a superuser) and ran
``SET LOCAL ROLE wsrl_readonly``; a query could switch back with
``set_config('role', 'none', true)`` and act as the superuser (read server files,
terminate backends). Logged in as ``wsrl_readonly`` there is nothing to switch back to:
the role holds only SELECT grants (0001), no attributes, no memberships. Its sessions
default to read-only transactions and a 30 s statement timeout, also for people who
connect with ``psql`` directly.

Roles are cluster-wide and other databases of the cluster may use this one, so downgrade
leaves it able to log in (it can still only read). Its password, where the server asks
for one, is set by ``wsrl db upgrade`` from ``WSRL_SQL_PASSWORD``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 11:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

READONLY_ROLE = "wsrl_readonly"

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Roles are cluster-wide: several databases of one cluster migrating at once (the test
# suite's processes, two stacks on one server) all update this role's one catalog row.
# PostgreSQL makes the second writer wait for the first's commit and then fails it with
# "tuple concurrently updated" (an internal_error); a retry reads the committed row and
# succeeds. Each try runs in a subtransaction of the migration's transaction.
def _alter_role(statements: Sequence[str]) -> str:
    body = "\n".join(f"            {statement};" for statement in statements)
    return f"""
DO $$
DECLARE
    tries int := 0;
BEGIN
    LOOP
        BEGIN
{body}
            RETURN;
        EXCEPTION WHEN internal_error OR unique_violation THEN
            tries := tries + 1;
            IF tries >= 50 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.02 * tries);
        END;
    END LOOP;
END
$$;
"""


def upgrade() -> None:
    op.execute(
        _alter_role(
            [
                f"ALTER ROLE {READONLY_ROLE} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                "NOREPLICATION NOBYPASSRLS NOINHERIT CONNECTION LIMIT 16",
                f"ALTER ROLE {READONLY_ROLE} SET default_transaction_read_only = on",
                f"ALTER ROLE {READONLY_ROLE} SET statement_timeout = '30s'",
            ]
        )
    )


def downgrade() -> None:
    op.execute(
        _alter_role(
            [
                f"ALTER ROLE {READONLY_ROLE} RESET statement_timeout",
                f"ALTER ROLE {READONLY_ROLE} RESET default_transaction_read_only",
            ]
        )
    )
