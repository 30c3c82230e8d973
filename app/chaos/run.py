"""One chaos run: the whole pipeline on worker hosts, faults while it trains, then checks.

The head (this machine's namespace) runs PostgreSQL and Redis of the run's own (embedded,
in ``out/``: restarted by the faults, never the machine's), the env server, the API, the
reconciler and the local trainer with its policy server; each worker host runs one
``wsrl worker``, configured as docs/operations.md's "Scaling across hosts" says: the
head's address in ``WSRL_REDIS_URL``, ``WSRL_DATABASE_URL`` and ``WSRL_ENV_URL``, the
policy's address from the published endpoint (the trainer's ``--policy-host``).

After ``duration`` the faults stop, everything enqueued until then is given ``settle_s``
to end, the trainer is stopped, and the invariants (:mod:`app.chaos.invariants`) are
checked. While it runs, every newly served version's weights are hashed on the policy
server and compared with the checkpoint it was published from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from redis import Redis
    from sqlalchemy import Engine

from app.chaos.faults import CUT_S, KILLS, RESTART_S, SLOW_S, Fault, Schedule
from app.chaos.hosts import HEAD_IP, HostNetwork, WorkerHost
from app.supervisor import Child, ChildFailed, Supervisor

logger = logging.getLogger(__name__)

WSRL = [sys.executable, "-m", "app.cli"]
THREADS = 8
POLL_S = 2.0
START_TRIES = 10


@dataclass
class RunSpec:
    out: Path
    duration_s: float
    seed: int = 0
    hosts: int = 2
    every: tuple[float, float] = (20.0, 90.0)
    settle_s: float = 300.0
    faults: bool = True
    trainer_options: list[str] = field(default_factory=list)
    evaluate: int = 0
    """Goals of ``wsrl eval`` (greedy, test split) on the starting weights while the faults
    go on; the trainer then only serves them (``--no-enqueue``). 0: train."""


class Parts:
    """The run's processes by name; a killed one is started again with the same command.

    Each part is started from a thread of its own that lives as long as the run: a child
    gets SIGTERM when the thread that started it ends (``PR_SET_PDEATHSIG``, see
    :mod:`app.supervisor`), and the faults' threads end."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.supervisor = Supervisor(log_dir, env=env)
        self.commands: dict[str, list[str]] = {}
        self.pids: dict[str, list[int]] = {}
        self._starters: dict[str, queue.Queue] = {}

    def start(self, name: str, args: list[str]) -> Child:
        self.commands[name] = args
        if name not in self._starters:
            self._starters[name] = queue.Queue()
            threading.Thread(
                target=self._starter,
                args=(self._starters[name],),
                name=f"start-{name}",
                daemon=True,
            ).start()
        answer: queue.Queue = queue.Queue()
        self._starters[name].put((name, args, answer))
        child = answer.get()
        if isinstance(child, BaseException):
            raise child
        self.pids.setdefault(name, []).append(child.pid)
        return child

    def _starter(self, requests: queue.Queue) -> None:
        while (request := requests.get()) is not None:
            name, args, answer = request
            try:
                answer.put(self.supervisor.start(name, args))
            except Exception as exc:  # raised in the caller's thread
                answer.put(exc)

    def close(self) -> None:
        self.supervisor.stop_all()
        for requests in self._starters.values():
            requests.put(None)

    def child(self, name: str) -> Child:
        return next(c for c in reversed(self.supervisor.children) if c.name == name)

    def kill(self, name: str) -> None:
        child = self.child(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.proc.wait()
        self.supervisor.children.remove(child)

    def restart(self, name: str) -> Child:
        return self.start(name, self.commands[name])

    def dead(self) -> list[str]:
        return [c.name for c in self.supervisor.children if not c.alive()]


class Head:
    """What runs on the head: the embedded services (restartable) and the URLs they serve."""

    def __init__(self, out: Path) -> None:
        from app.embedded.ports import free_port
        from app.embedded.postgres import LOOPBACK, EmbeddedPostgres
        from app.embedded.redis import EmbeddedRedis

        self.listen = (LOOPBACK, HEAD_IP)
        self.postgres = EmbeddedPostgres(out / "postgres")
        self.redis = EmbeddedRedis(out / "redis")
        self.pg_port, self.redis_port = free_port(), free_port()
        self.env_port, self.api_port, self.policy_port = free_port(), free_port(), free_port()

    def start_services(self) -> None:
        self.postgres.start(self.pg_port, self.listen)
        self.redis.start(self.redis_port, self.listen)

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg://postgres@{HEAD_IP}:{self.pg_port}/wsrl"

    @property
    def redis_url(self) -> str:
        return f"redis://{HEAD_IP}:{self.redis_port}/0"

    @property
    def env_url(self) -> str:
        return f"http://{HEAD_IP}:{self.env_port}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"


def _http_ok(url: str) -> Callable[[Child], bool]:
    def ready(_child: Child) -> bool:
        try:
            return httpx.get(url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def _log_count(text: str, at_least: int) -> Callable[[Child], bool]:
    def ready(child: Child) -> bool:
        path = child.log_path
        return path.exists() and path.read_text(errors="replace").count(text) >= at_least

    return ready


READY_LINE = {"worker": " ready.", "trainer": "trainer: policy"}


class Chaos:
    """The run: :meth:`start` the pipeline, :meth:`inject` faults, :meth:`finish`."""

    def __init__(self, spec: RunSpec, model: Path, agent_env: dict[str, str]) -> None:
        self.spec = spec
        self.head = Head(spec.out)
        self.network = HostNetwork(os.getpid(), spec.hosts)
        self.workers = {f"worker-{h.name}": h for h in self.network.hosts}
        env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
        env.update(agent_env)
        env.update(
            PYTHONUNBUFFERED="1",
            WSRL_DATABASE_URL=self.head.database_url,
            WSRL_REDIS_URL=self.head.redis_url,
            WSRL_ENV_URL=self.head.env_url,
            WSRL_API_URL=self.head.api_url,
            WSRL_API_TOKEN="chaos",
            WSRL_DATA_DIR=str(spec.out / "data"),
        )
        self.env = env
        self.parts = Parts(spec.out / "logs", env)
        self.model = model
        self.faults: list[Fault] = []
        self.busy: set[str] = set()
        self.versions: dict[int, dict[str, str | None]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.engine: Engine | None = None  # the head's database and Redis, from start()
        self.redis: Redis | None = None

    # --- the pipeline ----------------------------------------------------------------------

    def start(self) -> None:
        import redis
        from sqlalchemy import create_engine

        from app.db import migrate

        self.network.create()
        self.head.start_services()
        migrate.upgrade(self.head.database_url)
        self.engine = create_engine(self.head.database_url, pool_pre_ping=True)
        self.redis = redis.Redis.from_url(self.head.redis_url, socket_timeout=5)
        head = self.head
        self._start_ready("env", [*WSRL, "env", "serve", "--host", HEAD_IP,
                                  "--port", str(head.env_port)])  # fmt: skip
        self._start_ready("api", [*WSRL, "api", "serve", "--port", str(head.api_port)])
        self.parts.start("reconciler", [*WSRL, "reconcile"])
        for name, host in self.workers.items():
            self._start_ready(name, host.command(self._worker_args(host)))
        self._start_ready("trainer", [
            *WSRL, "train", "--backend", "local", "--model", str(self.model),
            "--policy-host", HEAD_IP, "--policy-port", str(head.policy_port),
            *self.spec.trainer_options,
        ])  # fmt: skip
        if self.spec.evaluate:  # the faults begin once its episodes are queued
            self._start_ready("eval", [
                *WSRL, "eval", "--split", "test", "--limit", str(self.spec.evaluate),
                "--temperature", "0", "--timeout", "86400",
            ])  # fmt: skip
        sampler = threading.Thread(target=self._sample_versions, name="versions", daemon=True)
        sampler.start()
        self._threads.append(sampler)

    def _worker_args(self, host: WorkerHost) -> list[str]:
        return [*WSRL, "worker", "-c", str(THREADS), "-Q", "rollouts,eval",
                "--name", f"{host.name}@%h"]  # fmt: skip

    def _start_ready(self, name: str, args: list[str] | None = None) -> None:
        seen = 0
        if name in self.parts.commands:
            old = self.parts.supervisor.log_dir / f"{name}.log"  # type: ignore[operator]
            if name.startswith("worker") or name == "trainer":
                line = READY_LINE["worker" if name.startswith("worker") else name]
                seen = old.read_text(errors="replace").count(line) if old.exists() else 0
        child = self.parts.start(name, args) if args else self.parts.restart(name)
        ready = self._readiness(name, seen)
        for _ in range(START_TRIES - 1 if args is None else 0):
            try:
                self.parts.supervisor.wait_ready(child, ready, timeout_s=300)
                return
            except ChildFailed:  # started while another part was down: its supervisor retries
                self.parts.supervisor.children.remove(child)
                time.sleep(RESTART_S)
                child = self.parts.restart(name)
        self.parts.supervisor.wait_ready(child, ready, timeout_s=300)

    def _readiness(self, name: str, seen: int) -> Callable[[Child], bool]:
        if name == "env":
            return _http_ok(f"{self.head.env_url}/health")
        if name == "api":
            return _http_ok(f"{self.head.api_url}/health")
        if name.startswith("worker"):
            return _log_count(READY_LINE["worker"], seen + 1)
        if name == "trainer":
            return _log_count(READY_LINE["trainer"], seen + 1)
        if name == "eval":
            return _log_count("evaluating", 1)
        return lambda child: child.alive()

    # --- faults ----------------------------------------------------------------------------

    def inject(self) -> None:
        """Faults until ``duration`` is over (none when ``spec.faults`` is off)."""
        hosts = [h.name for h in self.network.hosts]
        schedule = Schedule(self.spec.seed, hosts, self.spec.every)
        deadline = time.monotonic() + self.spec.duration_s
        while time.monotonic() < deadline:
            self._check_alive()
            if self.spec.faults:
                with self._lock:
                    picked = schedule.next(self.busy)
                    if picked is not None:
                        self.busy.add(picked[1])
                if picked is not None:
                    self._begin(*picked)
            wait_until = min(deadline, time.monotonic() + schedule.wait_s())
            while time.monotonic() < wait_until:
                self._check_alive()
                time.sleep(min(POLL_S, max(wait_until - time.monotonic(), 0)))
        for thread in self._threads[1:]:
            thread.join()

    def _check_alive(self) -> None:
        with self._lock:
            dead = [n for n in self.parts.dead() if n not in self.busy and not self._done(n)]
            busy_names = {n for n, h in self.workers.items() if h.name in self.busy}
        dead = [n for n in dead if n not in busy_names]
        if dead:
            logs = "\n".join(f"--- {n}\n{self.parts.child(n).tail()}" for n in dead)
            raise RuntimeError(f"{', '.join(dead)} exited on its own:\n{logs}")

    def _done(self, name: str) -> bool:
        """``wsrl eval`` ended by itself, as it should."""
        return name == "eval" and self.parts.child(name).proc.returncode == 0

    def evaluation(self) -> str | None:
        """The last line of ``wsrl eval`` (its score) once it ended, waiting for it."""
        if not self.spec.evaluate:
            return None
        child = self.parts.child("eval")
        child.proc.wait(self.spec.settle_s)
        lines = child.log_path.read_text(errors="replace").strip().splitlines()
        return f"{lines[-1] if lines else ''} (exit {child.proc.returncode})"

    def _begin(self, kind: str, target: str) -> None:
        fault = Fault(kind, target, datetime.now(UTC))
        self.faults.append(fault)
        logger.info("fault %s on %s", kind, target)
        thread = threading.Thread(target=self._act, args=(fault,), name=kind, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _act(self, fault: Fault) -> None:
        try:
            self._do(fault)
        except Exception as exc:  # the run's report says what a fault could not do
            fault.notes.append(f"{type(exc).__name__}: {exc}")
            logger.exception("fault %s on %s failed", fault.kind, fault.target)
        finally:
            fault.ended = datetime.now(UTC)
            with self._lock:
                self.busy.discard(fault.target)

    def _do(self, fault: Fault) -> None:
        kind, head = fault.kind, self.head
        host = next((h for h in self.network.hosts if h.name == fault.target), None)
        if kind in KILLS:
            name = f"worker-{host.name}" if host else kind
            self.parts.kill(name)
            time.sleep(RESTART_S)
            self._start_ready(name)
        elif kind == "redis_restart":
            head.redis.stop()
            head.redis.start(head.redis_port, head.listen)
        elif kind == "redis_flush":
            import redis

            redis.Redis.from_url(head.redis_url.replace(HEAD_IP, "127.0.0.1")).flushdb()
        elif kind == "postgres_restart":
            head.postgres.stop()
            time.sleep(RESTART_S)
            head.postgres.start(head.pg_port, head.listen)
        elif kind == "link_cut":
            assert host is not None
            host.cut()
            time.sleep(CUT_S)
            host.mend()
        elif kind == "link_slow":
            assert host is not None
            host.slow()
            time.sleep(SLOW_S)
            host.unslow()

    # --- the served weights ----------------------------------------------------------------

    def _sample_versions(self) -> None:
        """Each newly served version: the policy server's digest of its weights and the
        digest of the checkpoint its ``policy_versions`` row names."""
        while not self._stop.wait(POLL_S):
            try:
                self._sample_once()
            except Exception as exc:  # an outage: tried again on the next poll
                logger.debug("version sample: %s", exc)

    def _sample_once(self) -> None:
        from sqlalchemy import text

        from app.core.endpoint import read_endpoint

        endpoint = read_endpoint(self.redis)
        if endpoint is None or not endpoint.serving or endpoint.version in self.versions:
            return
        served = httpx.get(f"{endpoint.base_url}/weights", timeout=30).json()
        if served["version"] != endpoint.version:
            return
        with self.engine.connect() as conn:
            checkpoint = conn.execute(
                text("SELECT checkpoint FROM policy_versions WHERE version = :v"),
                {"v": endpoint.version},
            ).scalar()
        self.versions[endpoint.version] = {
            "served": served["sha256"],
            "checkpoint": checkpoint,
            "digest": _checkpoint_digest(checkpoint),
        }

    # --- the end ---------------------------------------------------------------------------

    def settle(self) -> datetime:
        """Waits until every rollout enqueued before now has ended (at most ``settle_s``);
        returns that moment, the invariants' window."""
        from sqlalchemy import text

        until = datetime.now(UTC)
        deadline = time.monotonic() + self.spec.settle_s
        while time.monotonic() < deadline:
            self._check_alive()
            with self.engine.connect() as conn:
                open_rollouts = conn.execute(
                    text(
                        "SELECT count(*) FROM rollouts WHERE created_at < :until "
                        "AND status IN ('queued', 'running')"
                    ),
                    {"until": until},
                ).scalar()
            if not open_rollouts:
                break
            time.sleep(POLL_S)
        return until

    def stop_trainer(self) -> None:
        """SIGTERM, as an operator stops it: its last version stays published."""
        child = self.parts.child("trainer")
        child.proc.send_signal(signal.SIGTERM)
        child.proc.wait(120)
        self.parts.supervisor.children.remove(child)
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self.parts.close()
        if self.engine is not None:
            self.engine.dispose()
        self.network.remove()
        self.head.redis.stop()
        self.head.postgres.stop()


def _checkpoint_digest(checkpoint: str | None) -> str | None:
    if not checkpoint or not Path(checkpoint).is_dir():
        return None
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    from trainer.backends.local.checkpoints import weights_sha256

    transformers_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    return weights_sha256(model)
