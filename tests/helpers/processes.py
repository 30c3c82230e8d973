"""Launchers for the real processes of a deployment, for integration tests and benchmarks.

Every service runs as a subprocess (``wsrl env serve``, ``wsrl scripted-llm``,
``wsrl worker``) on a free 127.0.0.1 port, configured only through ``WSRL_*`` variables
in the child's environment (see :func:`child_env`), with its output in a log file that
failure messages quote. :class:`ServiceProcess` can be stopped, killed with SIGKILL and
started again on the same port (to simulate crashes and restarts).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.embedded.ports import free_port

REPO = Path(__file__).resolve().parents[2]
FIXTURE_CATALOG = REPO / "tests" / "webshop" / "fixtures" / "catalog"
WSRL = [sys.executable, "-m", "app.cli"]


def child_env(settings: Settings | None = None, **overrides: Any) -> dict[str, str]:
    """The environment of a child process: ours, plus ``WSRL_<FIELD>`` for the settings.

    Only fields set explicitly on ``settings`` (and ``overrides``) are exported, so the
    child's defaults stay the defaults.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
    env["PYTHONUNBUFFERED"] = "1"
    values: dict[str, Any] = {}
    if settings is not None:
        values.update(settings.model_dump(include=settings.model_fields_set))
    values.update(overrides)
    for name, value in values.items():
        if isinstance(value, dict | list):
            env[f"WSRL_{name.upper()}"] = json.dumps(value)
        elif value is not None:
            env[f"WSRL_{name.upper()}"] = str(value)
    return env


@dataclass
class ServiceProcess:
    """One subprocess with its log file; ``ready`` says when it serves."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    ready: Callable[[ServiceProcess], bool]
    url: str | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_offset: int = 0

    def start(self, timeout_s: float = 60.0) -> ServiceProcess:
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.args, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self.ready(self):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"{self.name} exited with {code}:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} not ready after {timeout_s}s:\n{self.tail()}")
            time.sleep(0.1)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (graceful), then SIGKILL if it does not exit in time."""
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up (a crash)."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, timeout_s: float = 60.0) -> ServiceProcess:
        self.stop()
        return self.start(timeout_s)

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self, *, current_run: bool = False) -> str:
        """The log; with ``current_run`` only what the latest start wrote."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(self.log_offset if current_run else 0)
            return handle.read().decode(errors="replace")


def _http_ok(url: str) -> Callable[[ServiceProcess], bool]:
    def ready(_: ServiceProcess) -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def env_server(
    log_dir: Path,
    settings: Settings,
    *,
    data: Path | None = FIXTURE_CATALOG,
    port: int | None = None,
) -> ServiceProcess:
    """``wsrl env serve`` over ``data`` (default: the hand-written fixture catalog; None:
    the generated catalog, cached under the settings' ``data_dir``)."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    source = [] if data is None else ["--data", str(data)]
    return ServiceProcess(
        name=f"env-server:{port}",
        args=[*WSRL, "env", "serve", "--port", str(port), *source],
        env=child_env(settings),
        log_path=log_dir / f"env-server-{port}.log",
        ready=_http_ok(f"{url}/health"),
        url=url,
    )


def babyai_server(log_dir: Path, settings: Settings, *, port: int | None = None) -> ServiceProcess:
    """``wsrl env babyai``: BabyAI over AgentGym's protocol."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    return ServiceProcess(
        name=f"babyai:{port}",
        args=[*WSRL, "env", "babyai", "--port", str(port)],
        env=child_env(settings),
        log_path=log_dir / f"babyai-{port}.log",
        ready=_http_ok(f"{url}/"),
        url=url,
    )


def scripted_llm(
    log_dir: Path,
    settings: Settings,
    *,
    data: Path = FIXTURE_CATALOG,
    latency_ms: float = 0.0,
    policy: str = "oracle",
    port: int | None = None,
    steps: int | None = None,
) -> ServiceProcess:
    """``wsrl scripted-llm``; ``url`` is the OpenAI base URL (``.../v1``). ``steps``: the
    step on which the ``oracle-long`` policy buys.

    Faults are set at run time with :func:`set_llm_fault`.
    """
    port = port or free_port()
    root = f"http://127.0.0.1:{port}"
    return ServiceProcess(
        name=f"scripted-llm:{port}",
        args=[
            *WSRL,
            "scripted-llm",
            "--port",
            str(port),
            "--data",
            str(data),
            "--policy",
            policy,
            "--latency-ms",
            str(latency_ms),
            *(["--steps", str(steps)] if steps is not None else []),
        ],
        env=child_env(settings),
        log_path=log_dir / f"scripted-llm-{port}.log",
        ready=_http_ok(f"{root}/health"),
        url=f"{root}/v1",
    )


def set_llm_fault(
    llm: ServiceProcess, mode: str, *, count: int | None = None, **extra: float
) -> None:
    """Switch the scripted LLM's fault (``ok``, ``error_5xx``, ``timeout``, ``garbage``)."""
    assert llm.url is not None
    root = llm.url.removesuffix("/v1")
    body: dict[str, Any] = {"mode": mode, **extra}
    if count is not None:
        body["count"] = count
    httpx.post(f"{root}/admin/faults", json=body, timeout=5.0).raise_for_status()


def llm_stats(llm: ServiceProcess) -> dict[str, Any]:
    """The scripted LLM's counters (``/admin/stats``: requests, completions, ...)."""
    assert llm.url is not None
    return httpx.get(f"{llm.url.removesuffix('/v1')}/admin/stats", timeout=5.0).json()


def _log_says(text: str) -> Callable[[ServiceProcess], bool]:
    def ready(process: ServiceProcess) -> bool:
        return text in process.log_text(current_run=True)

    return ready


def celery_worker(
    log_dir: Path,
    settings: Settings,
    *,
    concurrency: int = 8,
    queues: str = "rollouts,eval",
    name: str,
    extra_env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """``wsrl worker``: a real Celery worker process (threads pool); ready when it says so."""
    env = child_env(settings)
    env.update(extra_env or {})
    return ServiceProcess(
        name=f"worker:{name}",
        args=[
            *WSRL,
            "worker",
            "--concurrency",
            str(concurrency),
            "--queues",
            queues,
            "--name",
            f"{name}@%h",
        ],
        env=env,
        log_path=log_dir / f"worker-{name}.log",
        ready=_log_says(" ready."),
    )


def api_server(log_dir: Path, settings: Settings, *, port: int | None = None) -> ServiceProcess:
    """``wsrl api serve`` (control plane + LLM gateway) on the settings' database and Redis."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    return ServiceProcess(
        name=f"api:{port}",
        args=[*WSRL, "api", "serve", "--port", str(port)],
        env=child_env(settings),
        log_path=log_dir / f"api-{port}.log",
        ready=_http_ok(f"{url}/health"),
        url=url,
    )


def example_agent(log_dir: Path, *, port: int | None = None) -> ServiceProcess:
    """``examples/external_agent`` under uvicorn, as its README runs it; ``url`` is the
    episode URL to enqueue with. It gets everything from the episode payload, no settings."""
    port = port or free_port()
    root = f"http://127.0.0.1:{port}"
    return ServiceProcess(
        name=f"example-agent:{port}",
        args=[
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(REPO / "examples" / "external_agent"),
            "agent:app",
            "--port",
            str(port),
            "--no-access-log",
        ],
        env=child_env(),
        log_path=log_dir / f"example-agent-{port}.log",
        ready=_http_ok(f"{root}/docs"),
        url=f"{root}/episode",
    )


def reconciler(
    log_dir: Path, settings: Settings, *, interval_s: float | None = None
) -> ServiceProcess:
    """``wsrl reconcile`` passing every ``interval_s`` (None: the settings' period); its log
    has a line per pass that changed something (``reconciler: ...``) and a traceback per
    pass that failed."""
    interval = [] if interval_s is None else ["--interval", str(interval_s)]
    return ServiceProcess(
        name="reconciler",
        args=[*WSRL, "reconcile", *interval],
        env=child_env(settings),
        log_path=log_dir / "reconciler.log",
        ready=lambda process: process.alive(),
    )
