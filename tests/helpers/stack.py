"""A whole rollout deployment in subprocesses: env server, scripted LLM, Celery workers.

Used by the worker integration tests and by ``benchmarks/rollout_throughput.py``::

    with RolloutStack.start(tmp_dir, settings, workers=2, concurrency=8) as stack:
        ids = stack.enqueue(goal_ids=stack.goal_ids, group_size=4)
        stack.wait(ids)
        stack.check_training_data(ids)

``settings`` must name a migrated database and a Redis db of the caller's own; the stack
fills in the env and LLM URLs and exports everything to the children as ``WSRL_*``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.celery import create_celery
from app.core.enqueue import enqueue_rollouts
from app.db import migrate
from app.db.lifecycle import FINAL_ROLLOUT_STATUSES, AttemptStatus, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import sync_goals
from helpers.processes import ServiceProcess, celery_worker, env_server, scripted_llm
from workers.reconciler import reconcile_once


def isolated_settings(
    make_database: Callable[[], str], redis_url: str, root: Path, **overrides: Any
) -> Settings:
    """Settings on a database of their own, migrated to head, with ``data_dir`` under
    ``root``: an end-to-end stack's rows never mix with other tests'."""
    url = make_database()
    migrate.upgrade(url)
    return Settings(
        _env_file=None, database_url=url, redis_url=redis_url, data_dir=root / "data", **overrides
    )


@dataclass
class RolloutStack:
    """Running services plus the clients a test needs to drive and inspect them."""

    settings: Settings
    log_dir: Path
    env: ServiceProcess
    llm: ServiceProcess
    workers: list[ServiceProcess]
    engine: Engine
    sessions: sessionmaker[Session]
    celery: Celery
    redis: redis.Redis
    goal_ids: list[int] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        log_dir: Path,
        settings: Settings,
        *,
        workers: int = 2,
        concurrency: int = 8,
        llm_latency_ms: float = 0.0,
        llm_policy: str = "oracle",
        episode_steps: int | None = None,
        split: str = "test",
    ) -> Iterator[RolloutStack]:
        """``llm_policy`` and ``episode_steps``: the scripted LLM's (``oracle-long`` buys on
        step ``episode_steps``)."""
        started: list[ServiceProcess] = []
        engine = None
        try:
            env = env_server(log_dir, settings).start()
            started.append(env)
            llm = scripted_llm(
                log_dir, settings, latency_ms=llm_latency_ms, policy=llm_policy, steps=episode_steps
            ).start()
            started.append(llm)
            settings = settings.model_copy(update={"env_url": env.url, "llm_base_url": llm.url})
            engine = make_engine(settings, pool_size=4)
            sessions = make_sessionmaker(engine)
            with session_scope(sessions) as session, EnvClient(env.url) as client:
                sync_goals(session, client)
            with session_scope(sessions) as session:
                goal_ids = list(
                    session.scalars(select(Goal.id).where(Goal.split == split).order_by(Goal.id))
                )
            pool = [
                celery_worker(log_dir, settings, concurrency=concurrency, name=f"w{i}")
                for i in range(workers)
            ]
            for worker in pool:
                worker.start()
                started.append(worker)
            stack = cls(
                settings=settings,
                log_dir=log_dir,
                env=env,
                llm=llm,
                workers=pool,
                engine=engine,
                sessions=sessions,
                celery=create_celery(settings),
                redis=redis.Redis.from_url(settings.resolved_redis_url()),
                goal_ids=goal_ids,
            )
            yield stack
        finally:
            for process in reversed(started):
                process.stop()
            if engine is not None:
                engine.dispose()

    # --- driving -------------------------------------------------------------------------

    def enqueue(self, **kwargs: Any) -> list[uuid.UUID]:
        """``enqueue_rollouts`` in its own committed transaction (jobs sent after commit)."""
        kwargs.setdefault("settings", self.settings)
        with session_scope(self.sessions) as session:
            return enqueue_rollouts(session, self.celery, **kwargs)

    def statuses(self, ids: Sequence[uuid.UUID]) -> Counter[str]:
        with session_scope(self.sessions) as session:
            rows = session.scalars(select(Rollout.status).where(Rollout.id.in_(list(ids))))
            return Counter(str(s) for s in rows)

    def wait(
        self,
        ids: Sequence[uuid.UUID],
        *,
        timeout_s: float = 120.0,
        reconcile: bool = False,
        poll_s: float = 0.5,
    ) -> Counter[str]:
        """Poll Postgres until every rollout is final; with ``reconcile`` run the reconciler
        on each poll. Raises ``TimeoutError`` with the status counts and worker logs."""
        deadline = time.monotonic() + timeout_s
        finals = {str(s) for s in FINAL_ROLLOUT_STATUSES}
        while True:
            if reconcile:
                reconcile_once(self.sessions, self.celery, self.settings, self.redis)
            counts = self.statuses(ids)
            if sum(n for status, n in counts.items() if status in finals) == len(ids):
                return counts
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {w.name}\n{w.tail(15)}" for w in self.workers)
                raise TimeoutError(f"rollouts not final after {timeout_s}s: {dict(counts)}\n{logs}")
            time.sleep(poll_s)

    def running_attempts(self, worker: ServiceProcess) -> list[int]:
        """Ids of attempts a worker process is running now (its name holds its pid)."""
        with session_scope(self.sessions) as session:
            return list(
                session.scalars(
                    select(Attempt.id).where(
                        Attempt.status == AttemptStatus.RUNNING,
                        Attempt.worker.like(f"%:{worker.pid}"),
                    )
                )
            )

    # --- checking ------------------------------------------------------------------------

    def check_training_data(self, ids: Sequence[uuid.UUID]) -> None:
        """Assert the exactly-once contract for succeeded rollouts.

        Exactly one succeeded attempt each; its steps and LLM calls are contiguous from 0
        with ``num_steps`` steps; every call has prompt and response token ids.
        """
        with session_scope(self.sessions) as session:
            rollouts = session.scalars(
                select(Rollout).where(
                    Rollout.id.in_(list(ids)), Rollout.status == RolloutStatus.SUCCEEDED
                )
            ).all()
            for rollout in rollouts:
                winners = session.scalars(
                    select(Attempt).where(
                        Attempt.rollout_id == rollout.id,
                        Attempt.status == AttemptStatus.SUCCEEDED,
                    )
                ).all()
                assert len(winners) == 1, f"{rollout.id}: {len(winners)} succeeded attempts"
                attempt = winners[0]
                steps = session.scalars(
                    select(Step.index).where(Step.attempt_id == attempt.id).order_by(Step.index)
                ).all()
                assert list(steps) == list(range(rollout.num_steps)), (rollout.id, steps)
                calls = session.execute(
                    select(LlmCall.index, LlmCall.prompt_token_ids, LlmCall.response_token_ids)
                    .where(LlmCall.attempt_id == attempt.id)
                    .order_by(LlmCall.index)
                ).all()
                assert [c.index for c in calls] == list(range(len(calls))), rollout.id
                assert len(calls) >= rollout.num_steps
                for call in calls:
                    assert call.prompt_token_ids and call.response_token_ids, rollout.id
