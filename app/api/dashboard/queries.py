"""What the dashboard reads, as SQL on a read-only connection (one function per page part).

Every query is bounded so that a page stays fast at a million rollouts: the overview reads
the latest versions, rounds and train steps (chart points bucketed), the rollouts table one
keyset page (``ix_rollouts_created_at_id``), an episode the rows of one rollout.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from app.core.failures import INFRASTRUCTURE_MARKERS
from app.core.intervals import mean_half_width, wilson_interval
from app.db.performance import evaluation_rounds
from app.db.types import unpack_float32, unpack_int32

RECENT_VERSIONS = 20
RECENT_ROUNDS = 20
RECENT_STEPS = 20
CHART_POINTS = 240
CURVE_WINDOW = 8
FAILURE_KINDS = ("infrastructure", "episode")
# The phases of a train step the trainer times (trainer/loop.py), in the order they happen.
STEP_PHASES = ("wait", "batch", "update", "checkpoint", "commit", "sync", "publish")


def _rows(conn: Connection, sql: str, **params: Any) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in conn.execute(text(sql), params)]


# --- overview ------------------------------------------------------------------------------


def rollout_counts(conn: Connection) -> dict[str, int]:
    """Rollouts queued, running and failed (through the status index: never a full scan)."""
    found = dict(
        conn.execute(
            text(
                "SELECT status, count(*) FROM rollouts "
                "WHERE status IN ('queued', 'running', 'failed') GROUP BY status"
            )
        ).all()
    )
    return {state: int(found.get(state, 0)) for state in ("queued", "running", "failed")}


def live_workers(conn: Connection) -> list[dict[str, Any]]:
    """Workers running a rollout whose heartbeat is fresh (its deadline not passed)."""
    return _rows(
        conn,
        "SELECT worker, count(*) AS rollouts FROM rollouts "
        "WHERE status = 'running' AND worker IS NOT NULL AND deadline_at > now() "
        "GROUP BY worker ORDER BY worker",
    )


def recent_versions(conn: Connection, limit: int = RECENT_VERSIONS) -> list[dict[str, Any]]:
    """The latest policy versions with their train and eval episodes, mean reward, success."""
    versions = _rows(
        conn,
        "SELECT version, status, model, created_at FROM policy_versions "
        "ORDER BY version DESC LIMIT :limit",
        limit=limit,
    )
    if not versions:
        return []
    stats = _rows(
        conn,
        "SELECT policy_version_max AS version, mode, count(*) AS episodes, "
        "avg(reward) AS mean_reward, avg(CASE WHEN success THEN 1.0 ELSE 0.0 END) AS success "
        "FROM rollouts WHERE policy_version_max >= :low AND status = 'succeeded' "
        "GROUP BY policy_version_max, mode",
        low=min(v["version"] for v in versions),
    )
    by_key = {(s["version"], s["mode"]): s for s in stats}
    for row in versions:
        for mode in ("train", "eval"):
            row[mode] = by_key.get((row["version"], mode))
    return versions


def train_curve(conn: Connection, points: int = CHART_POINTS) -> list[dict[str, Any]]:
    """Train reward and success by train step (the trainer's own record): at most
    ``points`` points, each the mean of up to :data:`CURVE_WINDOW` consecutive steps at
    the start of its bucket (reading every step's JSON costs ~40 ms at 15,000 steps)."""
    last = conn.execute(text("SELECT max(step) FROM train_steps")).scalar()
    if last is None:
        return []
    width = max(1, math.ceil(last / points))
    return _rows(
        conn,
        "SELECT max(step) AS step, max(policy_version) AS version, max(created_at) AS at, "
        "avg((metrics->'reward/mean')::float) AS reward, "
        "avg((metrics->'reward/success')::float) AS success "
        "FROM train_steps WHERE (step - 1) % :width < :window "
        "GROUP BY (step - 1) / :width ORDER BY 1",
        width=width,
        window=CURVE_WINDOW,
    )


def step_times(conn: Connection, limit: int = RECENT_STEPS) -> dict[str, Any]:
    """Mean seconds per phase and the staleness of the trained groups over the last steps."""
    rows = _rows(conn, "SELECT step, metrics FROM train_steps ORDER BY step DESC LIMIT :n", n=limit)
    phases: dict[str, float] = {}
    staleness: dict[int, int] = {}
    for row in rows:
        metrics = row["metrics"] or {}
        for phase in STEP_PHASES:
            value = metrics.get(f"time/{phase}_s")
            if isinstance(value, int | float):
                phases[phase] = phases.get(phase, 0.0) + float(value) / len(rows)
        for key, value in metrics.items():
            if key.startswith("staleness/behind_") and isinstance(value, int | float):
                behind = int(key.removeprefix("staleness/behind_"))
                staleness[behind] = staleness.get(behind, 0) + int(value)
    return {
        "steps": len(rows),
        "last_step": rows[0]["step"] if rows else None,
        "phases": phases,
        "staleness": dict(sorted(staleness.items())),
    }


def last_activity(conn: Connection) -> datetime | None:
    """When the trainer last committed a step."""
    return conn.execute(text("SELECT max(created_at) FROM train_steps")).scalar()


def eval_rounds(conn: Connection, limit: int = RECENT_ROUNDS) -> list[dict[str, Any]]:
    """The latest evaluation rounds (:func:`app.db.performance.evaluation_rounds`, those
    still without a finished episode too), oldest first, with the 95 % Wilson interval of
    their success rate (``success``: ``low``, ``high``) and the normal 95 % interval of
    their mean reward (``reward_low``, ``reward_high``)."""
    rows = evaluation_rounds(conn, latest=limit, unplayed=True)
    for row in rows:
        episodes = int(row["episodes"])
        row["success"] = row["successes"] / episodes if episodes else None
        row["low"], row["high"] = wilson_interval(row["successes"], episodes)
        mean = float(row["mean_reward"]) if row["mean_reward"] is not None else None
        half = mean_half_width(float(row["reward_std"]), episodes)
        row["reward_low"] = None if mean is None else max(0.0, mean - half)
        row["reward_high"] = None if mean is None else min(1.0, mean + half)
    return rows


# --- rollouts table --------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutFilters:
    """The rollouts table's filters; ``None`` means no filter."""

    version: int | None = None
    split: str | None = None
    mode: str | None = None
    status: str | None = None
    success: bool | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    failure: str | None = None
    goal: int | None = None
    text: str | None = None


@dataclass(frozen=True)
class Cursor:
    """The last row of a page: the next page starts after it (newest first)."""

    created_at: datetime
    id: uuid.UUID

    def encode(self) -> str:
        return f"{self.created_at.isoformat()}~{self.id}"

    @classmethod
    def decode(cls, value: str) -> Cursor:
        """Raises ``ValueError`` for anything :meth:`encode` did not make."""
        stamp, sep, ident = value.partition("~")
        if not sep:
            raise ValueError("expected <time>~<rollout id>")
        created_at = datetime.fromisoformat(stamp)
        if created_at.tzinfo is None:
            raise ValueError("the time has no UTC offset")
        return cls(created_at, uuid.UUID(ident))


def _infrastructure_sql() -> str:
    escaped = (
        m.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        for m in INFRASTRUCTURE_MARKERS
    )
    return "(" + " OR ".join(f"r.last_error LIKE '%{m}%'" for m in escaped) + ")"


# The filters that are one comparison with their value, bound under the filter's name.
FILTER_CLAUSES = (
    ("version", "r.policy_version_max = :version"),
    ("split", "g.split = :split"),
    ("mode", "r.mode = :mode"),
    ("status", "r.status = :status"),
    ("success", "r.success = :success"),
    ("reward_min", "r.reward >= :reward_min"),
    ("reward_max", "r.reward <= :reward_max"),
    ("goal", "r.goal_id = :goal"),
)


def rollout_page(
    conn: Connection, filters: RolloutFilters, limit: int, after: Cursor | None
) -> tuple[list[dict[str, Any]], Cursor | None]:
    """One page of rollouts, newest first, and the cursor of the next page (None: last)."""
    where = ["TRUE"]
    params: dict[str, Any] = {"limit": limit + 1}
    for name, clause in FILTER_CLAUSES:
        value = getattr(filters, name)
        if value is not None:
            where.append(clause)
            params[name] = value
    if filters.failure == "infrastructure":
        where.append(f"r.status = 'failed' AND {_infrastructure_sql()}")
    elif filters.failure == "episode":
        where.append(f"r.status = 'failed' AND NOT coalesce({_infrastructure_sql()}, false)")
    if filters.text is not None:
        where.append("g.instruction ILIKE :text ESCAPE '\\'")
        escaped = filters.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params["text"] = f"%{escaped}%"
    if after is not None:
        where.append("(r.created_at, r.id) < (:after_at, :after_id)")
        params["after_at"], params["after_id"] = after.created_at, after.id
    rows = _rows(
        conn,
        "SELECT r.id, r.created_at, r.mode, r.status, r.start, r.goal_id, g.split, "
        "g.instruction, r.reward, r.success, r.num_steps, r.attempts, r.policy_version_min, "
        "r.policy_version_max, r.last_error, r.finished_at "
        "FROM rollouts r JOIN goals g ON g.id = r.goal_id "
        f"WHERE {' AND '.join(where)} "
        "ORDER BY r.created_at DESC, r.id DESC LIMIT :limit",
        **params,
    )
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, Cursor(rows[-1]["created_at"], rows[-1]["id"])


# --- one episode -----------------------------------------------------------------------------


def rollout(conn: Connection, rollout_id: uuid.UUID) -> dict[str, Any] | None:
    found = _rows(
        conn,
        "SELECT r.*, g.split, g.instruction, w.asin, w.name AS goal_name, g.category, "
        "w.product_category, w.query, w.attributes, w.goal_options, w.price_upper, g.source, "
        "g.environment, g.spec FROM rollouts r JOIN goals g ON g.id = r.goal_id "
        "LEFT JOIN webshop_goals w ON w.id = g.id WHERE r.id = :id",
        id=rollout_id,
    )
    return found[0] if found else None


def attempts(conn: Connection, rollout_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every attempt of a rollout with its steps and LLM calls, each step paired with the
    call whose reply it played (opening steps have none)."""
    tries = _rows(
        conn,
        "SELECT id, number, worker, status, started_at, finished_at, error, reward, "
        "reward_parts FROM attempts WHERE rollout_id = :id ORDER BY number",
        id=rollout_id,
    )
    if not tries:
        return []
    ids = [a["id"] for a in tries]
    steps = _rows(
        conn,
        "SELECT attempt_id, index, action, observation, reward, done, valid, latency_ms, info "
        "FROM steps WHERE attempt_id = ANY(:ids) ORDER BY attempt_id, index",
        ids=ids,
    )
    # Token ids and logprobs are packed bytea (app.db.types); unpacked in Python below.
    calls = _rows(
        conn,
        "SELECT attempt_id, index, policy_version, model, request_messages, response_text, "
        "response_token_ids, response_logprobs, finish_reason, latency_ms, trainable "
        "FROM llm_calls WHERE attempt_id = ANY(:ids) ORDER BY attempt_id, index",
        ids=ids,
    )
    for call in calls:
        call["request_messages"] = _messages(call["request_messages"])
        ids_raw, logprobs_raw = call.pop("response_token_ids"), call.pop("response_logprobs")
        token_ids = unpack_int32(ids_raw) if ids_raw is not None else []
        logprobs = unpack_float32(logprobs_raw) if logprobs_raw is not None else []
        call["tokens"] = list(zip(token_ids, logprobs, strict=False))
        call["logprobs_recorded"] = logprobs_raw is not None
    for attempt in tries:
        own_calls = iter([c for c in calls if c["attempt_id"] == attempt["id"]])
        attempt["steps"] = []
        for step in (s for s in steps if s["attempt_id"] == attempt["id"]):
            info = step["info"] or {}
            step["opening"] = bool(info.get("opening"))
            step["call"] = None if step["opening"] else next(own_calls, None)
            attempt["steps"].append(step)
        attempt["unplayed_calls"] = list(own_calls)
    return tries


def _messages(recorded: Any) -> list[dict[str, Any]]:
    """A call's request as a list of {role, content, tool_calls}, whatever its JSON shape
    (an external agent's request may be anything)."""
    items = recorded if isinstance(recorded, list) else [recorded]
    return [
        {
            "role": str(m.get("role", "?")),
            "content": m.get("content"),
            "tool_calls": m.get("tool_calls"),
        }
        if isinstance(m, dict) and ("role" in m or "content" in m)
        else {"role": "?", "content": m, "tool_calls": None}
        for m in items
        if m is not None
    ]


def goal_versions(conn: Connection, goal_id: int) -> list[int]:
    """Policy versions that finished an episode of this goal."""
    return [
        row[0]
        for row in conn.execute(
            text(
                "SELECT DISTINCT policy_version_max FROM rollouts WHERE goal_id = :goal "
                "AND status = 'succeeded' AND policy_version_max IS NOT NULL ORDER BY 1"
            ),
            {"goal": goal_id},
        )
    ]


def latest_episode(conn: Connection, goal_id: int, version: int) -> uuid.UUID | None:
    """The newest finished rollout of ``goal_id`` played by ``version``."""
    return conn.execute(
        text(
            "SELECT id FROM rollouts WHERE goal_id = :goal AND policy_version_max = :version "
            "AND status = 'succeeded' ORDER BY created_at DESC, id DESC LIMIT 1"
        ),
        {"goal": goal_id, "version": version},
    ).scalar()
