"""WebShop's goals in Postgres: loaded from its env server's ``GET /goals``.

A WebShop goal's id is the env's goal index; its own fields (the target's asin, the
attributes, options and price limit the reward checks, the product's name and query) are
its ``spec``, validated here (:class:`WebShopGoalSpec`). The view ``webshop_goals`` gives
them as columns.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.enqueue import EnqueueError, insert_goals
from app.db.lifecycle import GoalSource
from app.db.models import Goal
from app.environments.spec import validated_spec
from app.environments.webshop.client import EnvClient

logger = logging.getLogger(__name__)

GOALS_PAGE = 1000


class WebShopGoalSpec(BaseModel):
    """A WebShop goal's own fields, as ``goals.spec`` holds them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    asin: str
    attributes: list[str] = []
    goal_options: dict[str, str] | list[str] = {}
    """Option name -> value for a synthetic goal; the values alone for a human one."""
    price_upper: float | None = None
    name: str | None = None
    product_category: str | None = None
    query: str | None = None


def webshop_spec(data: dict[str, Any]) -> dict[str, Any]:
    """``data``'s WebShop fields as a validated spec (other keys ignored); raises
    :class:`ValueError` naming what is wrong."""
    fields = {k: data[k] for k in WebShopGoalSpec.model_fields if data.get(k) is not None}
    return validated_spec(WebShopGoalSpec, fields, f"goal {data.get('id')!r}: not a WebShop goal")


def _goal_row(data: dict[str, Any]) -> dict[str, Any]:
    spec = webshop_spec(data)
    return {
        "id": int(data["id"]),
        "environment": "webshop",
        "spec": spec,
        "split": str(data["split"]),
        "instruction": str(data["instruction"]),
        "category": data.get("category"),
        "weight": float(data.get("weight", 1.0)),
        "source": (
            GoalSource.HUMAN if isinstance(spec["goal_options"], list) else GoalSource.SYNTHETIC
        ),
    }


def sync_goals(session: Session, env_client: EnvClient, *, split: str | None = None) -> int:
    """Load the env server's goals (``GET /goals``) that the ``goals`` table lacks.

    Existing rows are kept as they are (goal ids are stable per catalog). Returns how many
    goals were added. Raises :class:`~app.core.env_client.EnvError` when the env server
    cannot be read.
    """
    known = set(session.scalars(select(Goal.id)))
    added = 0
    offset = 0
    while True:
        page = env_client.goals(split=split, offset=offset, limit=GOALS_PAGE)
        added += insert_goals(
            session, [_goal_row(g) for g in page["goals"] if int(g["id"]) not in known]
        )
        offset += len(page["goals"])
        if not page["goals"] or offset >= int(page["total"]):
            break
    logger.info("synced goals from %s: %d added, %d known", env_client.base_url, added, len(known))
    return added


def ensure_goals(session: Session, settings: Settings, split: str | None = None) -> int:
    """Make sure Postgres has WebShop's goals (of ``split``, or any), loading the env
    server's when it has none; returns how many were loaded (0 when there were some
    already).

    Every command that needs goals calls this first (both trainers, ``wsrl
    export goals``), so a freshly migrated database is filled from the env server instead
    of failing minutes later. Raises :class:`EnqueueError` when the env server has none
    either, :class:`~app.core.env_client.EnvError` when it cannot be read.
    """
    query = select(Goal.id).where(Goal.environment == "webshop").limit(1)
    if split is not None:
        query = query.where(Goal.split == split)
    if session.scalar(query) is not None:
        return 0
    with EnvClient.from_settings(settings) as env:
        added = sync_goals(session, env)
    if session.scalar(query) is None:
        what = f"no {split!r} goals" if split is not None else "no goals"
        raise EnqueueError(f"the env server at {settings.env_url} has {what}")
    return added
