"""Reward and success by policy version and by evaluation round, read from Postgres.

Shared by ``wsrl report`` (the plot), ``wsrl dev`` (a line per finished held-out round),
the trainer's metrics and the dashboard.
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


def evaluation_rounds(
    conn: Any, *, latest: int | None = None, unplayed: bool = False
) -> list[dict[str, Any]]:
    """One row per evaluation round, oldest first; every reader of rounds (``wsrl report``,
    ``wsrl dev``, the trainer's metrics, the dashboard) reads them here.

    A row: when the round was queued (``created_at``), the versions its finished episodes
    played on (``policy_version`` .. ``last_version``), ``episodes`` (finished), their
    ``mean_reward`` and its standard deviation ``reward_std`` (0 below two episodes),
    ``successes`` and ``success_rate``, and how many of its rollouts are still queued or
    running (``unfinished``). ``latest``: only the last ``latest`` rounds, found by a loose
    scan of ``ix_rollouts_eval_created_at`` (one index probe per round, so the dashboard
    stays fast at a million rollouts); ``unplayed``: rounds without a finished episode too
    (``episodes`` 0, the other figures None). ``conn``: a session or a connection.
    """
    params: dict[str, Any] = {}
    since = ""
    if latest is not None:
        found = conn.execute(
            text(
                "WITH RECURSIVE t(at) AS ("
                "  SELECT max(created_at) FROM rollouts WHERE mode = 'eval' "
                "  UNION ALL SELECT (SELECT max(created_at) FROM rollouts "
                "                    WHERE mode = 'eval' AND created_at < t.at) "
                "  FROM t WHERE t.at IS NOT NULL) "
                "SELECT at FROM t WHERE at IS NOT NULL LIMIT :limit"
            ),
            {"limit": latest},
        ).scalars()
        params["since"] = min(found, default=None)
        if params["since"] is None:
            return []
        since = "AND created_at >= :since "
    played = "" if unplayed else "HAVING count(*) FILTER (WHERE done) > 0 "
    result = conn.execute(
        text(
            "SELECT created_at, "
            "min(policy_version_min) FILTER (WHERE done) AS policy_version, "
            "max(policy_version_max) FILTER (WHERE done) AS last_version, "
            "count(*) FILTER (WHERE done) AS episodes, "
            "avg(reward) FILTER (WHERE done) AS mean_reward, "
            "coalesce(stddev_samp(reward) FILTER (WHERE done), 0) AS reward_std, "
            "count(*) FILTER (WHERE done AND success) AS successes, "
            "avg(CASE WHEN success THEN 1.0 ELSE 0.0 END) FILTER (WHERE done) AS success_rate, "
            "count(*) FILTER (WHERE status IN ('queued', 'running')) AS unfinished "
            "FROM (SELECT created_at, status, reward, success, policy_version_min, "
            "             policy_version_max, "
            "             status = 'succeeded' AND policy_version_min IS NOT NULL AS done "
            f"      FROM rollouts WHERE mode = 'eval' {since}) AS eval_rollouts "
            f"GROUP BY created_at {played}ORDER BY created_at"
        ),
        params,
    )
    return [dict(row._mapping) for row in result]


def version_span(row: dict[str, Any]) -> str:
    """``v3``, or ``v3-5`` for a row (an evaluation round) that played on several versions."""
    first, last = row["policy_version"], row.get("last_version", row["policy_version"])
    return f"v{first}" if last == first else f"v{first}-{last}"
