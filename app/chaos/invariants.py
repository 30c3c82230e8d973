"""What must hold after any mix of faults, read from Postgres and Redis.

Each check is a function of the database (and Redis) returning its violations, one line
each, at most :data:`SHOWN` of them; :data:`CHECKS` names them. They look at the rollouts
enqueued before ``until`` (the run's faults had stopped by then and everything enqueued
before had time to end), so the rollouts of a trainer still running are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from redis import Redis
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.core.endpoint import read_endpoint

SHOWN = 10


@dataclass(frozen=True)
class Window:
    """The rollouts a check reads (enqueued before ``until``) and the run's staleness
    bound (``max_staleness`` of its trainer)."""

    until: datetime
    max_staleness: int


def _lines(session: Session, sql: str, window: Window, **params: object) -> list[str]:
    rows = session.execute(
        text(sql), {"until": window.until, "staleness": window.max_staleness, **params}
    ).all()
    return [" ".join(str(value) for value in row) for row in rows[:SHOWN]]


def rollouts_end_once(session: Session, redis: Redis, window: Window) -> list[str]:
    """Every rollout is final: succeeded with exactly one succeeded attempt whose reward it
    carries, or failed or cancelled with a reason; no attempt is left running."""
    return _lines(
        session,
        """
        SELECT r.id, r.status, count(a.id) FILTER (WHERE a.status = 'succeeded') AS won,
               count(a.id) FILTER (WHERE a.status = 'running') AS running
        FROM rollouts r LEFT JOIN attempts a ON a.rollout_id = r.id
        WHERE r.created_at < :until
        GROUP BY r.id
        HAVING r.status NOT IN ('succeeded', 'failed', 'cancelled')
            OR (r.status = 'succeeded') <> (count(a.id) FILTER (WHERE a.status = 'succeeded') = 1)
            OR (r.status = 'succeeded' AND r.reward IS DISTINCT FROM
                max(a.reward) FILTER (WHERE a.status = 'succeeded'))
            OR (r.status = 'failed' AND r.last_error IS NULL)
            OR count(a.id) FILTER (WHERE a.status = 'running') > 0
        """,
        window,
    )


def no_rollout_failed(session: Session, redis: Redis, window: Window) -> list[str]:
    """Outages use up no attempts: no rollout failed (the scripted faults are all outages)."""
    return _lines(
        session,
        "SELECT id, last_error FROM rollouts WHERE created_at < :until AND status = 'failed'",
        window,
    )


def winning_attempt_whole(session: Session, redis: Redis, window: Window) -> list[str]:
    """A succeeded rollout's attempt holds steps 0..num_steps-1 and calls 0..n-1, each once,
    every call with its token ids (an opening's steps have no call)."""
    return _lines(
        session,
        """
        SELECT r.id, r.num_steps,
               (SELECT array_agg(s.index ORDER BY s.index) FROM steps s
                WHERE s.attempt_id = a.id) AS steps,
               (SELECT array_agg(c.index ORDER BY c.index) FROM llm_calls c
                WHERE c.attempt_id = a.id) AS calls
        FROM rollouts r JOIN attempts a ON a.rollout_id = r.id AND a.status = 'succeeded'
        WHERE r.created_at < :until AND r.status = 'succeeded' AND (
            (SELECT count(*) FROM steps s WHERE s.attempt_id = a.id) <> r.num_steps
            OR (SELECT count(DISTINCT s.index) FROM steps s WHERE s.attempt_id = a.id)
               <> r.num_steps
            OR (SELECT coalesce(max(s.index), -1) FROM steps s WHERE s.attempt_id = a.id)
               <> r.num_steps - 1
            OR (SELECT count(*) - count(DISTINCT c.index) + coalesce(max(c.index), -1) + 1
                - count(*) FROM llm_calls c WHERE c.attempt_id = a.id) <> 0
            OR EXISTS (SELECT 1 FROM llm_calls c WHERE c.attempt_id = a.id
                       AND (c.prompt_token_ids IS NULL OR c.response_token_ids IS NULL))
        )
        """,
        window,
    )


def groups_trained_whole_once(session: Session, redis: Redis, window: Window) -> list[str]:
    """A group's rollouts all carry the same train step, or none does; a rollout carries
    a train step only when final, and only a step that exists."""
    return _lines(
        session,
        """
        SELECT r.group_id, count(*) AS rollouts, count(r.train_step) AS marked,
               array_agg(DISTINCT r.train_step) AS steps
        FROM rollouts r LEFT JOIN train_steps t ON t.step = r.train_step
        WHERE r.mode = 'train'
        GROUP BY r.group_id
        HAVING min(r.created_at) < :until AND (
            count(DISTINCT r.train_step) > 1
            OR (count(r.train_step) > 0 AND count(r.train_step) <> count(*))
            OR count(r.train_step) <> count(t.step)
            OR bool_or(r.train_step IS NOT NULL
                       AND r.status NOT IN ('succeeded', 'failed', 'cancelled')))
        """,
        window,
    )


def steps_and_versions_contiguous(session: Session, redis: Redis, window: Window) -> list[str]:
    """Train steps 1..N and policy versions from the first on, without gaps (primary keys:
    no repeats); each step names a version that was published."""
    gaps = _lines(
        session,
        """
        SELECT 'train step gap after', step FROM (
            SELECT step, lead(step) OVER (ORDER BY step) AS next FROM train_steps) s
        WHERE next <> step + 1
        UNION ALL
        SELECT 'first train step', min(step) FROM train_steps HAVING min(step) <> 1
        UNION ALL
        SELECT 'policy version gap after', version FROM (
            SELECT version, lead(version) OVER (ORDER BY version) AS next
            FROM policy_versions) v
        WHERE next <> version + 1
        """,
        window,
    )
    unpublished = _lines(
        session,
        """
        SELECT 'train step', t.step, 'names unpublished version', t.policy_version
        FROM train_steps t LEFT JOIN policy_versions v ON v.version = t.policy_version
        WHERE t.policy_version IS NOT NULL AND v.version IS NULL
        """,
        window,
    )
    return gaps + unpublished


def calls_under_a_serving_version(session: Session, redis: Redis, window: Window) -> list[str]:
    """Every recorded LLM call names a published version, published before its attempt
    ended, and at most ``max_staleness`` behind the newest one when the attempt began."""
    return _lines(
        session,
        """
        SELECT a.rollout_id, a.number, c.index, c.policy_version, newest.version AS at_start
        FROM llm_calls c
        JOIN attempts a ON a.id = c.attempt_id
        JOIN rollouts r ON r.id = a.rollout_id
        LEFT JOIN policy_versions v ON v.version = c.policy_version
        LEFT JOIN LATERAL (
            SELECT max(p.version) AS version FROM policy_versions p
            WHERE p.created_at <= a.started_at) newest ON true
        WHERE r.created_at < :until AND a.status = 'succeeded' AND (
            c.policy_version IS NULL OR v.version IS NULL
            OR v.created_at > a.finished_at
            OR c.policy_version < newest.version - :staleness)
        """,
        window,
    )


def endpoint_is_newest_serving(session: Session, redis: Redis, window: Window) -> list[str]:
    """The endpoint record in Redis names the newest active version in Postgres."""
    newest = session.execute(
        text("SELECT max(version) FROM policy_versions WHERE status = 'active'")
    ).scalar()
    endpoint = read_endpoint(redis)
    published = endpoint.version if endpoint is not None else None
    if published != newest or endpoint is None or not endpoint.serving:
        return [f"Redis endpoint {endpoint!r}, newest active version in Postgres {newest}"]
    return []


Check = Callable[[Session, Redis, Window], list[str]]
CHECKS: Mapping[str, Check] = {
    check.__name__: check
    for check in (
        rollouts_end_once,
        no_rollout_failed,
        winning_attempt_whole,
        groups_trained_whole_once,
        steps_and_versions_contiguous,
        calls_under_a_serving_version,
        endpoint_is_newest_serving,
    )
}


def check_all(session: Session, redis: Redis, window: Window) -> dict[str, list[str]]:
    """Every check's violations by name (an empty list: it holds)."""
    return {name: check(session, redis, window) for name, check in CHECKS.items()}
