"""WebShop's goal fields move into goals.spec; the view webshop_goals gives them as columns.

A goal's own fields are its environment's business: WebShop's (asin, name,
product_category, query, attributes, goal_options, price_upper) join BabyAI's in
``spec``, validated by the environment that writes them
(:mod:`app.environments.webshop.goals`). What every environment has stays a column: id,
environment, split, instruction, category (WebShop's category, BabyAI's level), weight and
source.

Every existing row keeps its values: its fields become its spec (a field that was NULL is
left out). The view ``webshop_goals`` has ``goals``' old columns, typed as before, for SQL
and the dashboard; ``trajectories`` keeps its columns (``category`` is still a column of
``goals``) and gains the goal's ``environment``, last.

Downgrade puts the fields back into columns and the spec to NULL (it refuses, as 0010's
does, while another environment's goals exist).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WEBSHOP_GOALS_VIEW = """
CREATE VIEW webshop_goals AS
SELECT g.id, g.split, g.instruction, g.spec ->> 'asin' AS asin, g.spec ->> 'name' AS name,
       g.category, g.spec ->> 'product_category' AS product_category,
       g.spec ->> 'query' AS query,
       ARRAY(SELECT jsonb_array_elements_text(COALESCE(g.spec -> 'attributes', '[]')))
           AS attributes,
       COALESCE(g.spec -> 'goal_options', '{}') AS goal_options,
       (g.spec ->> 'price_upper')::double precision AS price_upper,
       g.weight, g.source
FROM goals g
WHERE g.environment = 'webshop'
"""

TRAJECTORIES_VIEW = """
CREATE OR REPLACE VIEW trajectories AS
SELECT r.id, r.goal_id, g.split, g.instruction, g.category, r.mode, r.status,
       r.reward, r.success, r.num_steps, r.policy_version_min, r.policy_version_max,
       r.attempts, r.max_attempts, r.group_id, r.sample_index, r.train_step, r.worker,
       r.created_at, r.started_at, r.finished_at,
       EXTRACT(EPOCH FROM (r.finished_at - r.started_at)) AS duration_s,
       r.last_error{environment}
FROM rollouts r JOIN goals g ON g.id = r.goal_id
"""

FIELDS = ("asin", "name", "product_category", "query", "attributes", "goal_options", "price_upper")


def upgrade() -> None:
    op.execute(
        """
        UPDATE goals SET spec = jsonb_strip_nulls(jsonb_build_object(
            'asin', asin, 'name', name, 'product_category', product_category,
            'query', query, 'attributes', to_jsonb(attributes),
            'goal_options', goal_options, 'price_upper', price_upper))
        WHERE environment = 'webshop'
        """
    )
    op.drop_index("ix_goals_asin", table_name="goals")
    for field in FIELDS:
        op.drop_column("goals", field)
    op.execute(WEBSHOP_GOALS_VIEW)
    op.execute(TRAJECTORIES_VIEW.format(environment=", g.environment"))


def downgrade() -> None:
    others = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM goals WHERE environment <> 'webshop'")
    )
    if others:
        raise RuntimeError(
            f"{others} goals belong to another environment than webshop; delete them "
            "(and their rollouts) before downgrading below 0011"
        )
    op.execute("DROP VIEW webshop_goals")
    op.execute("DROP VIEW trajectories")  # a view's columns cannot be dropped in place
    op.execute(TRAJECTORIES_VIEW.format(environment=""))
    op.add_column("goals", sa.Column("asin", sa.Text(), nullable=True))
    op.add_column("goals", sa.Column("name", sa.Text(), nullable=True))
    op.add_column("goals", sa.Column("product_category", sa.Text(), nullable=True))
    op.add_column("goals", sa.Column("query", sa.Text(), nullable=True))
    op.add_column(
        "goals",
        sa.Column("attributes", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
    )
    op.add_column(
        "goals",
        sa.Column("goal_options", postgresql.JSONB(), server_default="{}", nullable=False),
    )
    op.add_column("goals", sa.Column("price_upper", sa.Float(), nullable=True))
    op.execute(
        """
        UPDATE goals SET
            asin = spec ->> 'asin', name = spec ->> 'name',
            product_category = spec ->> 'product_category', query = spec ->> 'query',
            attributes = ARRAY(SELECT jsonb_array_elements_text(
                COALESCE(spec -> 'attributes', '[]'))),
            goal_options = COALESCE(spec -> 'goal_options', '{}'),
            price_upper = (spec ->> 'price_upper')::double precision,
            spec = NULL
        """
    )
    op.create_index("ix_goals_asin", "goals", ["asin"], unique=False)
