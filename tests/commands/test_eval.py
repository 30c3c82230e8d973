"""``wsrl eval``'s answer: completed and failed episodes apart, a non-zero exit when an
outage failed them (a real deployment: workers, env server, scripted LLM), and a wait that
outlives a database restart (a real embedded PostgreSQL, stopped and started again)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from helpers.factories import make_goal, make_rollout
from helpers.processes import REPO, WSRL, babyai_server, child_env, set_llm_fault
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from app.babyai.game import goals
from app.config import Settings
from app.core.evaluation import EvalStopped, EvalTimeout, Outcome, score_of, wait_for_rollouts
from app.db import migrate
from app.db.lifecycle import RolloutStatus
from app.db.models import Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.embedded.ports import free_port
from app.environments import BABYAI_GOAL_IDS


def test_failed_rollouts_are_counted_apart_not_as_reward_0() -> None:
    result = score_of(
        [
            Outcome("succeeded", 1.0, None, True),
            Outcome("succeeded", 0.0, None, False),
            Outcome("succeeded", 0.5, None, False),
            Outcome("failed", None, "failed after 3 attempts: env error: env server down", None),
            Outcome("failed", None, "failed after 3 attempts: LLMRequestRejected: too long", None),
        ]
    )
    assert result.line() == "score=50.0 success=33.3% episodes=3 failed=2"
    assert result.infrastructure == 1
    assert result.reasons == {"env error": 1, "LLMRequestRejected": 1}


@pytest.mark.parametrize(
    ("reason", "infrastructure"),
    [
        ("failed after 3 attempts: env error: env server ... unreachable", True),
        ("failed after 2 attempts: LLMUnavailable: HTTP 503", True),
        ("failed after 1 attempts: attempt 1 lost: no worker heartbeat", True),
        ("failed after 3 attempts: LLMUnavailable: no policy endpoint: none published", True),
        ("failed after 3 attempts: unexpected OperationalError: connection refused", True),
        ("failed (not retryable) in attempt 1: LLMRequestRejected: HTTP 400", False),
    ],
)
def test_infrastructure_reasons(reason: str, infrastructure: bool) -> None:
    assert score_of([Outcome("failed", None, reason, None)]).infrastructure == int(infrastructure)


def test_no_completed_episode_scores_0_and_says_so() -> None:
    result = score_of([Outcome("failed", None, "failed after 3 attempts: env error: x", None)])
    assert result.line() == "score=0.0 success=0.0% episodes=0 failed=1"


def test_the_wait_gives_up_at_its_timeout_naming_what_is_left(db_engine: Engine) -> None:
    """Rollouts that never finish (here: never queued) end the wait with an error that
    says how many are left and where to look, not a hang."""
    ids = [uuid.uuid4(), uuid.uuid4()]
    with pytest.raises(EvalTimeout, match=r"2 of 2 eval rollouts unfinished after 0s .*'eval'"):
        wait_for_rollouts(make_sessionmaker(db_engine), ids, 0, lambda _: None)


def test_the_wait_stops_between_polls_when_asked(db_engine: Engine) -> None:
    stop = threading.Event()
    stop.set()
    ids = [uuid.uuid4(), uuid.uuid4()]
    with pytest.raises(EvalStopped, match=r"^2 of 2 eval rollouts unfinished$"):
        wait_for_rollouts(make_sessionmaker(db_engine), ids, 60, lambda _: None, stop=stop)


@pytest.mark.slow
def test_eval_of_rollouts_failed_by_an_outage_exits_1_and_says_so(
    make_database: Callable[[], str], redis_url: str, tmp_path: Path
) -> None:
    """The LLM server answers 503 past every budget: no episode completes, so the last
    line has no score to give and says ``failed=3``, and the exit status is 1. The
    rollouts were queued greedy, as the trainer's held-out rounds, whatever the workers'
    ``WSRL_LLM_TEMPERATURE`` (1.0 by default)."""
    settings = isolated_settings(
        make_database,
        redis_url,
        tmp_path,
        max_attempts=1,
        outage_budget_s=0.0,
        llm_retry_budget_s=1.0,
        llm_backoff_initial_s=0.1,
        llm_backoff_max_s=0.2,
    )
    with RolloutStack.start(tmp_path, settings, workers=1, concurrency=3) as stack:
        set_llm_fault(stack.llm, "error_5xx")
        done = subprocess.run(
            [*WSRL, "eval", "--split", "test", "--limit", "3", "--timeout", "120"],
            env=child_env(stack.settings),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.stdout.strip().splitlines()[-1] == "score=0.0 success=0.0% episodes=0 failed=3"
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())  # the console wraps long lines
    assert "3 of 3 rollouts did not complete (not in the score), 3 for an infrastructure" in said
    assert "3 x LLMUnavailable" in said
    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            sampled = session.scalars(select(Rollout.sampling)).all()
    finally:
        engine.dispose()
    assert sampled == [{"temperature": 0.0}] * 3


@contextlib.contextmanager
def _continued(pid: int) -> Iterator[None]:
    """Whatever happens inside, the process is not left stopped (SIGCONT is harmless)."""
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _wait_until(condition: Callable[[], bool], command: subprocess.Popen, said: Path) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert command.poll() is None and time.monotonic() < deadline, said.read_text()
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["interrupted", "interrupted while queueing", "timeout"])
def test_an_eval_that_stops_early_cancels_what_it_queued(
    make_database: Callable[[], str], redis_url: str, tmp_path: Path, how: str
) -> None:
    """Ctrl-C (exit 130) or ``--timeout`` (exit 1): the episodes not played yet are
    cancelled, not left for the workers to play for nobody (one thread, slow calls: most of
    the 4 are still queued when it stops). A Ctrl-C while the command is still queueing
    (here: loading the split's goals from an env server held with SIGSTOP) lets the
    queueing finish, then cancels all it queued."""
    settings = isolated_settings(make_database, redis_url, tmp_path)
    args = ["--timeout", "2"] if how == "timeout" else []
    stack_of_one = {"workers": 1, "concurrency": 1, "llm_latency_ms": 500.0}
    with RolloutStack.start(tmp_path, settings, **stack_of_one) as stack:
        stderr = tmp_path / "eval.err"
        env_port = int(stack.env.url.rsplit(":", 1)[1])
        if how == "interrupted while queueing":
            os.kill(stack.env.pid, signal.SIGSTOP)
        with stderr.open("w") as err, _continued(stack.env.pid):
            command = subprocess.Popen(
                [*WSRL, "eval", "--split", "test", "--limit", "4", *args],
                env=child_env(stack.settings),
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )
            if how == "interrupted while queueing":

                def asks_the_env() -> bool:
                    connections = psutil.Process(command.pid).net_connections(kind="tcp")
                    return any(c.raddr and c.raddr.port == env_port for c in connections)

                _wait_until(asks_the_env, command, stderr)
                command.send_signal(signal.SIGINT)
                _wait_until(lambda: "stopping:" in stderr.read_text(), command, stderr)
                os.kill(stack.env.pid, signal.SIGCONT)
            else:
                queued = "queued 4 eval rollouts on split 'test'"
                _wait_until(lambda: queued in stderr.read_text(), command, stderr)
            if how == "interrupted":
                time.sleep(1.0)
                command.send_signal(signal.SIGINT)
            command.wait(timeout=60)
        said = " ".join(stderr.read_text().split())
        assert command.returncode == (1 if how == "timeout" else 130), said
        with session_scope(stack.sessions) as session:
            eval_rows = select(Rollout.status).where(Rollout.mode == "eval")
            statuses = Counter(str(s) for s in session.scalars(eval_rows))
    why = "gave up after --timeout 2" if how == "timeout" else "was interrupted"
    cancelled = statuses["cancelled"]
    assert f"`wsrl eval` {why}: cancelled the {cancelled} eval rollouts not finished" in said
    assert cancelled == 4 if how == "interrupted while queueing" else cancelled >= 2, statuses
    assert statuses["queued"] == statuses["running"] == 0, statuses
    assert sum(statuses.values()) == 4


@pytest.mark.slow
def test_wait_survives_a_postgres_restart(
    services_dir_factory: Callable[[str], Path],
) -> None:
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("eval-pg"))
    port = free_port()
    url = server.start(port)
    try:
        migrate.upgrade(url)
        engine = make_engine(Settings(_env_file=None, database_url=url), pool_size=2)
        sessions = make_sessionmaker(engine)
        with session_scope(sessions) as session:
            make_goal(session, 1)
            ids = [make_rollout(session, 1, status=RolloutStatus.RUNNING).id for _ in range(3)]
        result: list[list[Outcome]] = []
        waiter = threading.Thread(
            target=lambda: result.append(wait_for_rollouts(sessions, ids, 120, lambda _: None))
        )
        waiter.start()
        time.sleep(1.0)
        server.stop()
        time.sleep(5.0)  # the eval polls a database that is down
        assert waiter.is_alive(), "the wait did not crash while the database was down"
        server.start(port)
        with Session(engine) as session, session.begin():
            session.execute(
                update(Rollout)
                .where(Rollout.id.in_(ids))
                .values(status=RolloutStatus.SUCCEEDED, reward=1.0)
            )
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        assert [o.status for o in result[0]] == ["succeeded"] * 3
        engine.dispose()
    finally:
        server.stop()


def test_eval_of_an_unknown_environment_is_a_usage_error() -> None:
    done = subprocess.run(
        [*WSRL, "eval", "--environment", "nope"],
        env=child_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown environment 'nope'; known: babyai, webshop" in done.stderr


@pytest.mark.slow
def test_eval_plays_babyai_goals_over_agentgyms_protocol(
    make_database: Callable[[], str], redis_url: str, tmp_path: Path
) -> None:
    """``wsrl eval --environment babyai`` loads BabyAI's goals, the workers play them against
    ``wsrl env babyai``, and the score is of those episodes. The scripted LLM answers in
    WebShop's grammar, which BabyAI does not list: every step is answered, none wins."""
    port = free_port()
    settings = isolated_settings(
        make_database, redis_url, tmp_path, babyai_url=f"http://127.0.0.1:{port}", max_steps=2
    )
    server = babyai_server(tmp_path, settings, port=port).start()
    try:
        with RolloutStack.start(tmp_path, settings, workers=1, concurrency=3) as stack:
            done = subprocess.run(
                [*WSRL, "eval", "--environment", "babyai", "--limit", "3", "--timeout", "120"],
                env=child_env(stack.settings),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=180,
            )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "score=0.0 success=0.0% episodes=3 failed=0"
    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            played = session.execute(
                select(Rollout.goal_id, Rollout.num_steps).where(Rollout.mode == "eval")
            ).all()
    finally:
        engine.dispose()
    first_test = [g.data_idx for g in goals() if g.split == "test"][:3]
    assert sorted(goal for goal, _ in played) == [BABYAI_GOAL_IDS + i for i in first_test]
    assert {steps for _, steps in played} == {2}
