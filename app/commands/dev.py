"""``wsrl dev``: the whole pipeline on this machine, in the foreground.

Starts (or reuses) the embedded PostgreSQL and Redis and migrates the database, builds
the tiny policy if it is not cached, then runs as child processes: the WebShop env
server, the API, one Celery worker (threads), Flower, the reconciler loop and the
trainer (local backend). It prints a progress line while waiting and one line per train
step, and where the TensorBoard curves are. Ctrl-C stops every child it started (see
:mod:`app.supervisor`) and says that the embedded services still run and how to stop them;
running it again resumes training from the last checkpoint. What it prints goes to
``<data_dir>/logs/dev-<time>.log`` too, its children's output to ``<data_dir>/logs/dev-<time>/``
(:mod:`app.commands.logs`).
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from rich.console import Console

from app.commands import fail
from app.commands._run_options import (
    RunOptionError,
    as_flags,
    collect,
    run_options,
    signature,
    typed_values,
)
from app.commands.logs import new_run
from app.commands.train import CONFIG_FILE, build_run
from trainer.backends import BACKENDS, StartError
from trainer.config import DEV_RUN, TINY, RunConfig

DEV_OPTIONS = tuple(
    o
    for o in run_options()
    if BACKENDS["local"].honours(o.path) and o.path not in ("backend", "local.enqueue")
)
"""The options of ``wsrl dev``: the local backend's (its trainer), less ``--backend`` and
``--enqueue`` (its trainer enqueues what its worker plays)."""
DEV_DEFAULTS = {
    f"{section}.{name}": value
    for section, changes in DEV_RUN.items()
    for name, value in changes.items()
}
"""Where ``wsrl dev``'s defaults differ from the run configuration's (:data:`DEV_RUN`)."""
THREADS = inspect.Parameter(
    "threads",
    inspect.Parameter.KEYWORD_ONLY,
    default=16,
    annotation=Annotated[int, typer.Option(min=1, help="Threads of the Celery worker.")],
)

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)
WSRL = [sys.executable, "-m", "app.cli"]
PROGRESS_EVERY_S = 10.0
POLL_S = 1.0


class _Stop(Exception):
    """SIGTERM/SIGINT arrived."""


class RunOutput:
    """What ``wsrl dev`` prints, on the terminal and (plain text) in the run's log file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", buffering=1)
        self._log = Console(file=self._file, color_system=None, width=200, soft_wrap=True)

    def print(self, text: str, *, error: bool = False) -> None:
        (err_console if error else console).print(text)
        self._log.print(text, highlight=False)

    def close(self) -> None:
        self._file.close()


def _port(url: str) -> int:
    return urlsplit(url).port or 80


def _check_ports(settings, environment: str) -> None:
    from app.embedded.ports import port_is_free
    from app.environments import get_environment

    served = get_environment(environment)
    wanted = {
        f"WSRL_{served.url_setting.upper()}": _port(served.url(settings)),
        "WSRL_API_URL": _port(settings.api_url),
        "WSRL_FLOWER_PORT": settings.flower_port,
    }
    for setting, port in wanted.items():
        if not port_is_free(port):
            raise fail(
                f"port {port} is in use (another `wsrl dev`?); stop it or set {setting} "
                "to a free port"
            )


def _http_ok(url: str):
    import httpx

    def ready(_child) -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def _log_says(text: str):
    def ready(child) -> bool:
        path = child.log_path
        return path.exists() and text in path.read_text(errors="replace")

    return ready


def dev(ctx: typer.Context, **values: Any) -> None:
    """Run services, env server, API, worker, Flower, reconciler and trainer; Ctrl-C stops all."""
    from app.api.dashboard import dashboard_url
    from app.config import get_settings
    from app.supervisor import ChildFailed, Supervisor

    threads = values["threads"]
    try:
        given = typed_values(ctx, values)
        user = collect(given, values["config_file"], os.environ, DEV_DEFAULTS, "wsrl dev")
        _check_built_in(user.values.get("schedule.environment"))
        if not _has_openings(user.values.get("schedule.environment")):
            # Its episodes start at search only: dev's item-page starts are WebShop's.
            defaults = {k: v for k, v in DEV_DEFAULTS.items() if k != "schedule.train_starts"}
            user = collect(given, values["config_file"], os.environ, defaults, "wsrl dev")
    except RunOptionError as exc:
        raise fail(exc) from exc
    run = build_run(user)  # validated as `wsrl train` validates it, before anything starts
    own = {o.path for o in DEV_OPTIONS}
    local = {"backend": RunConfig.backend}  # what dev's trainer is anyway
    ignored = sorted(
        user.label(p)
        for p in user.set_by_user()
        if p not in own and local.get(p, object()) != user.values[p]
    )
    if ignored:
        raise fail(
            f"{', '.join(ignored)}: wsrl dev cannot honour it (its trainer is the local "
            "backend's, and enqueues the rollouts its worker plays); use wsrl train",
            code=2,
        )
    trainer_options = as_flags({p: v for p, v in user.values.items() if p in own - {"model"}})
    model: Path | None = None if run.model == TINY else Path(run.model)
    started = time.monotonic()
    settings = get_settings()
    if model is not None:
        from trainer.models import ModelError, resolve_model

        try:
            model = resolve_model(settings.data_dir, str(model)) or model
        except ModelError as exc:
            raise fail(exc) from exc
    _prepare(settings)
    _check_ports(settings, run.schedule.environment)
    if model is None:
        from trainer.backends.local.entry import ensure_tiny_policy

        try:
            model = ensure_tiny_policy(settings.data_dir)
        except StartError as exc:
            raise fail(exc) from exc
    run_log, children_logs = new_run(settings.data_dir)
    out = RunOutput(run_log)
    supervisor = Supervisor(children_logs, env=_child_env(settings, model))
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupt = _interrupt_once(tuple(previous))
    for signum in previous:
        signal.signal(signum, interrupt)
    code = 0
    engine = None
    try:
        from app.db.session import make_engine, make_sessionmaker
        from app.progress import TrainingProgress

        # Before the trainer starts: a step it commits while the others start is printed too.
        engine = make_engine(settings, pool_size=1)
        progress = TrainingProgress(make_sessionmaker(engine), datetime.now().astimezone())
        env_url = _start_children(
            supervisor, settings, run.schedule.environment, model, trainer_options, threads
        )
        out.print(
            f"[bold]webshop-rl dev[/bold] up in {time.monotonic() - started:.0f}s: "
            f"{run.schedule.environment} {env_url}, API {settings.api_url}/docs, "
            f"dashboard {dashboard_url(settings.api_url)} (token WSRL_API_TOKEN), "
            f"Flower http://127.0.0.1:{settings.flower_port} (user wsrl); Ctrl-C stops everything"
        )
        pids = ", ".join(f"{c.name} {c.pid}" for c in supervisor.children)
        out.print(f"processes (pid): {pids}")
        for line in where_to_look(settings, run_log):
            out.print(line)
        _monitor(supervisor, progress, started, out)
    except _Stop:
        out.print("stopping ...")
    except ChildFailed as exc:
        out.print(f"[red]Error:[/red] {exc}", error=True)
        code = 1
    finally:
        for signum in previous:
            signal.signal(signum, signal.SIG_IGN)
        supervisor.stop_all()
        if engine is not None:
            engine.dispose()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        out.print("all dev processes stopped")
        for line in still_running(settings):
            out.print(line)
        out.close()
    raise typer.Exit(code)


dev.__signature__ = signature(DEV_DEFAULTS, DEV_OPTIONS, THREADS, CONFIG_FILE)  # type: ignore[attr-defined]


def _interrupt_once(signums: tuple[int, ...]):
    """The handler of ``signums`` while ``wsrl dev`` runs: the first one stops the run, and
    the ones after it (Ctrl-C pressed again, or by ``timeout`` and the shell alike) are
    ignored until the children are stopped, instead of breaking the shutdown with a
    traceback and exit status 1."""

    def interrupt(*_: object) -> None:
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)
        raise _Stop

    return interrupt


def where_to_look(settings, run_log: Path) -> list[str]:
    """The lines that say where the curves, the logs and the live views are."""
    from trainer.tracking import metrics_dir, parse_backends

    lines = [f"logs: {run_log} (and {run_log.with_suffix('')}/); `make logs-latest` follows it"]
    backends = parse_backends(settings.metrics_loggers)
    if "tensorboard" in backends:
        installed = Path(sys.executable).parent / "tensorboard"
        tensorboard = str(installed) if installed.is_file() else "tensorboard"
        lines.append(
            f"curves: TensorBoard event files in {metrics_dir(settings)}; open them with "
            f"`{tensorboard} --logdir {metrics_dir(settings)}` (http://localhost:6006)"
        )
    if others := [b for b in backends if b != "tensorboard"]:
        lines.append(f"curves: also logged to {', '.join(others)}")
    lines.append("live view: `make watch` (tmux: agent steps, training progress, env server)")
    return lines


SERVICE_NAMES = {"postgres": "PostgreSQL", "redis": "Redis"}


def still_running(settings) -> list[str]:
    """What ``wsrl dev`` leaves running on purpose (the embedded services, so the next run
    starts fast and keeps its data), and how to stop it."""
    from app.embedded.services import services_status

    running = [r for r in services_status(settings) if r.state == "running"]
    if not running:
        return []
    ports = {"postgres": settings.embedded_postgres_port, "redis": settings.embedded_redis_port}
    names = " and ".join(f"{SERVICE_NAMES[r.name]} (port {ports[r.name]})" for r in running)
    return [
        f"still running: the embedded {names}, data under {settings.data_dir}; "
        "`make dev` reuses them",
        "stop them with `wsrl services stop` (or `make services-stop`)",
    ]


def _child_env(settings, model: Path) -> dict[str, str] | None:
    """The children's environment for a bootstrapped tiny policy (a ``bootstrap.json``):
    the prompt history and result names it was bootstrapped with, and replies constrained
    to the page's valid actions, each unless the user set the variable explicitly. A
    model ``wsrl model get`` converted gets the constrained replies too: unconstrained,
    SmolLM2 writes prose without an action in most replies, and its groups would be all
    zero.

    Why constrained: the bootstrap's greedy replies are half invalid (an unlisted product
    id, an option the page does not offer); limited to the valid actions the same weights
    win more often with no training, and GRPO chooses among valid actions
    (docs/benchmarks.md, Learning).
    """
    import os

    from app.core.agent import AgentProtocolMismatch
    from trainer.checkpoint_protocol import BOOTSTRAP_MANIFEST, policy_protocol
    from trainer.models import MANIFEST as CONVERTED

    bootstrapped = (model / BOOTSTRAP_MANIFEST).exists()
    if not bootstrapped and not (model / CONVERTED).exists():
        return None
    overrides = {}
    if bootstrapped:  # played as it was bootstrapped (a contradicting setting is refused)
        try:
            protocol = policy_protocol(settings, model)
        except AgentProtocolMismatch as exc:
            raise fail(exc) from exc
        overrides["WSRL_AGENT_HISTORY_STEPS"] = str(protocol.history_steps)
        overrides["WSRL_AGENT_RESULT_REFS"] = str(protocol.result_refs)
    if "agent_constrain_actions" not in settings.model_fields_set:
        overrides["WSRL_AGENT_CONSTRAIN_ACTIONS"] = "true"
    return {**os.environ, **overrides} if overrides else None


def _prepare(settings) -> None:
    """Embedded services (kept when running) and the schema at head."""
    from app.db import migrate
    from app.embedded.ports import PortInUseError
    from app.embedded.services import start_services

    try:
        for report in start_services(settings):
            console.print(f"{report.name}: {report.state}")
        migrate.upgrade(settings.resolved_database_url())
    except (PortInUseError, migrate.MigrationError) as exc:
        raise fail(exc) from exc


def _check_built_in(environment: str | None) -> None:
    """``wsrl dev`` starts the environment's server: a built-in one's."""
    from app.environments import ENVIRONMENTS

    if (environment or "webshop") not in ENVIRONMENTS:
        raise fail(
            f"wsrl dev runs a built-in environment ({', '.join(ENVIRONMENTS)}), not "
            f"{environment!r}; train on an AgentGym server named in WSRL_AGENTGYM with "
            "`wsrl train --environment NAME`",
            code=2,
        )


def _has_openings(environment: str | None) -> bool:
    from app.environments import ENVIRONMENTS

    known = ENVIRONMENTS.get(environment or "webshop")
    return known is None or known.openings  # an unknown name is refused by build_run


def _start_children(
    supervisor,
    settings,
    environment: str,
    model: Path,
    trainer_options: list[str],
    threads: int,
) -> str:
    """Start every child; returns the URL of the environment's server."""
    from app.environments import get_environment

    served = get_environment(environment)
    url = served.url(settings)
    env = supervisor.start("env", [*WSRL, *served.serve, "--port", str(_port(url))])
    supervisor.wait_ready(env, _http_ok(f"{url}{served.health}"), timeout_s=300)
    api = supervisor.start("api", [*WSRL, "api", "serve", "--port", str(_port(settings.api_url))])
    worker = supervisor.start(
        "worker", [*WSRL, "worker", "-c", str(threads), "-Q", "rollouts,eval", "--name", "dev"]
    )
    supervisor.start("flower", [*WSRL, "flower"])
    supervisor.start("reconciler", [*WSRL, "reconcile"])
    supervisor.wait_ready(api, _http_ok(f"{settings.api_url}/health"))
    supervisor.wait_ready(worker, _log_says(" ready."))
    trainer_args = [*WSRL, "train", "--backend", "local", "--model", str(model)]
    trainer = supervisor.start("trainer", [*trainer_args, *trainer_options])
    supervisor.wait_ready(trainer, _log_says("trainer: policy"), timeout_s=300)
    return url


def _monitor(supervisor, progress, started: float, out: RunOutput) -> None:
    """Print progress until a child exits (the trainer ending after --steps is normal).

    While the database does not answer (stopped, restarting) the children wait it out on
    their own (docs/operations.md, outages); so does this: one line when it goes, one when
    it is back, and the steps made meanwhile are printed then."""
    from app.db.session import DATABASE_DOWN

    last, down_since = 0.0, None
    while True:
        now = time.monotonic()
        try:
            for line in progress.new_step_lines():
                out.print(line)
            if now - last >= PROGRESS_EVERY_S:
                # Rounds take minutes to play: looking for finished ones at this pace is enough.
                for line in progress.new_eval_lines():
                    out.print(line)
                out.print(f"[{now - started:5.0f}s] {progress.summary()}")
                last = now
        except DATABASE_DOWN as exc:
            if down_since is None:
                down_since = now
                reason = str(exc.orig or exc).strip().splitlines()[0]
                out.print(
                    f"[{now - started:5.0f}s] the database does not answer ({reason}); "
                    "the processes retry until it is back"
                )
        else:
            if down_since is not None:
                out.print(f"[{now - started:5.0f}s] the database answers again")
                down_since = None
        trainer = next(c for c in supervisor.children if c.name == "trainer")
        if not trainer.alive() and trainer.proc.returncode == 0:
            if down_since is None:
                for line in progress.new_step_lines():
                    out.print(line)
            return
        supervisor.check()
        time.sleep(POLL_S)


def register(cli: typer.Typer) -> None:
    cli.command("dev")(dev)
