"""Reward and success by policy version and by evaluation round, read from Postgres.

Shared by ``wsrl report`` (the plot) and ``wsrl dev`` (a line per finished held-out round).
An evaluation *round* is the eval rollouts queued together (one transaction, so one
``created_at``), e.g. by the trainer's ``--eval-every``; it is placed at the version it
started on, because the trainer moves on while a round plays.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text


def performance_rows(session: Any) -> list[dict[str, Any]]:
    """One row per (policy version, mode) with episodes, mean reward and success rate."""
    result = session.execute(
        text(
            "SELECT policy_version, mode, episodes, mean_reward, success_rate "
            "FROM policy_performance WHERE policy_version IS NOT NULL AND episodes > 0 "
            "ORDER BY mode, policy_version"
        )
    )
    return [dict(row._mapping) for row in result]


def evaluation_rounds(session: Any) -> list[dict[str, Any]]:
    """One row per evaluation round with a finished episode: when it was queued, the
    versions it played on, episodes, mean reward (and its standard deviation), success rate,
    and how many of its
    rollouts are still queued or running (``unfinished``)."""
    result = session.execute(
        text(
            "SELECT created_at, "
            "min(policy_version_min) FILTER (WHERE done) AS policy_version, "
            "max(policy_version_max) FILTER (WHERE done) AS last_version, "
            "count(*) FILTER (WHERE done) AS episodes, "
            "avg(reward) FILTER (WHERE done) AS mean_reward, "
            "coalesce(stddev_samp(reward) FILTER (WHERE done), 0) AS reward_std, "
            "avg(CASE WHEN success THEN 1.0 ELSE 0.0 END) FILTER (WHERE done) AS success_rate, "
            "count(*) FILTER (WHERE status IN ('queued', 'running')) AS unfinished "
            "FROM (SELECT *, status = 'succeeded' AND policy_version_min IS NOT NULL AS done "
            "      FROM rollouts WHERE mode = 'eval') AS eval_rollouts "
            "GROUP BY created_at HAVING count(*) FILTER (WHERE done) > 0 ORDER BY created_at"
        )
    )
    return [dict(row._mapping) for row in result]


def version_span(row: dict[str, Any]) -> str:
    """``v3``, or ``v3-5`` for a row (an evaluation round) that played on several versions."""
    first, last = row["policy_version"], row.get("last_version", row["policy_version"])
    return f"v{first}" if last == first else f"v{first}-{last}"
