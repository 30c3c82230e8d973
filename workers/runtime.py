"""Long-lived clients of one worker process, built on its first task (never at import).

One engine (a pool sized to the worker's threads, so no thread waits for a connection),
one Redis client, one env client, one LLM client and one log publishing queue are shared
by all threads of the process; all are thread-safe. The heartbeat thread extends the
deadline of the rollouts this process is running: a rollout whose process died stops
being extended and the reconciler finds it past its deadline with no live attempt. The
same statement tells it which of them are no longer ``running`` (cancelled, or ended by
another attempt); their episodes stop at their next step (``AttemptRecorder``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.core.celery import TimeLimits, time_limits
from app.core.endpoint import EndpointResolver
from app.core.redis_client import connect_redis
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments import Environment
from app.environments.webshop.client import EnvClient
from workers.llm_client import LLMClient
from workers.log_queue import PublishQueue
from workers.persistence import extend_deadlines

logger = logging.getLogger(__name__)

# A worker that misses this many heartbeats is presumed dead.
MISSED_BEATS = 3


def liveness_s(settings: Settings) -> float:
    """How far ahead a heartbeat pushes a running rollout's deadline."""
    return MISSED_BEATS * settings.worker_heartbeat_s


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class ActiveAttempts:
    """The attempts that threads of this process are running now, by id, with their
    rollouts, and those of them the heartbeat found stopped: their rollout no longer
    ``running`` (cancelled, or finished or taken up again by another attempt). Thread-safe."""

    _rollouts: dict[int, uuid.UUID] = field(default_factory=dict)
    _stopped: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, attempt_id: int, rollout_id: uuid.UUID) -> None:
        with self._lock:
            self._rollouts[attempt_id] = rollout_id

    def discard(self, attempt_id: int) -> None:
        with self._lock:
            self._rollouts.pop(attempt_id, None)
            self._stopped.discard(attempt_id)

    def snapshot(self) -> dict[int, uuid.UUID]:
        with self._lock:
            return dict(self._rollouts)

    def stop(self, attempt_ids: Iterable[int]) -> None:
        """Mark attempts stopped; one that ended meanwhile is left out."""
        with self._lock:
            self._stopped.update(a for a in attempt_ids if a in self._rollouts)

    def stopped(self, attempt_id: int) -> bool:
        return attempt_id in self._stopped


class WorkerRuntime:
    """Shared clients plus the heartbeat thread of one worker process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits: TimeLimits = time_limits(settings)
        pool = settings.worker_concurrency + 2
        self.engine: Engine = make_engine(settings, pool_size=pool, max_overflow=pool)
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        self.redis: Redis = connect_redis(settings)
        self.log_queue = PublishQueue(self.redis)
        self.env = EnvClient.from_settings(settings)
        """WebShop's env server (the external agents' sessions are there)."""
        self._clients: dict[str, Any] = {"webshop": self.env}
        self._clients_lock = threading.Lock()
        self.endpoints = EndpointResolver(settings, self.redis, sessions=self.sessions, follow=True)
        self.llm = LLMClient(settings, self.endpoints)
        self.active = ActiveAttempts()
        self.worker = worker_name()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="wsrl-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.worker_heartbeat_s):
            attempts = self.active.snapshot()
            if not attempts:
                continue
            try:
                with session_scope(self.sessions) as session:
                    running = extend_deadlines(
                        session,
                        set(attempts.values()),
                        liveness_s=liveness_s(self.settings),
                        episode_s=self.limits.episode_s,
                    )
            except Exception:
                logger.exception("heartbeat for %d rollouts failed", len(attempts))
                continue
            self.active.stop(a for a, rollout in attempts.items() if rollout not in running)

    def env_client(self, environment: Environment) -> Any:
        """The client of ``environment``'s env server, made on its first rollout."""
        with self._clients_lock:
            client = self._clients.get(environment.name)
            if client is None:
                client = self._clients[environment.name] = environment.client(self.settings)
            return client

    def close(self) -> None:
        self._stop.set()
        with self._clients_lock:
            for client in self._clients.values():
                client.close()
        self.llm.close()
        self.log_queue.close()
        self.redis.close()
        self.engine.dispose()


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> WorkerRuntime:
    """The process's runtime; built once, by whichever thread asks first."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = WorkerRuntime(get_settings())
        return _runtime


def close_runtime() -> None:
    """Close the process's clients (worker shutdown); a later task builds new ones."""
    global _runtime
    with _runtime_lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.close()
