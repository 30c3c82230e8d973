"""``wsrl train --backend local`` and ``wsrl doctor --backend local`` (its entry in
:data:`trainer.backends.BACKENDS`).

The trainer keeps ``batch_groups x (1 + max_staleness)`` GRPO groups queued, trains on
complete groups within the staleness bound, serves its weights on an in-process
OpenAI-compatible policy server and republishes the endpoint in Redis after every update.
A signal (Ctrl-C / SIGTERM) ends the run after the current step; running it again resumes
from the last committed checkpoint under ``<data_dir>/trainer/checkpoints``.

torch loads when the run starts, not for ``--print-config`` or the preflight.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

from app.config import ServicesNotRunningError, Settings
from app.core.agent import AgentProtocolMismatch
from app.core.enqueue import EnqueueError
from app.core.env_client import EnvError
from app.core.preflight import Check, service_checks
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments import GoalIdsTaken, get_environment, goals_of
from trainer.backends import ConfigValue, StartError
from trainer.checkpoint_protocol import policy_protocol
from trainer.config import TINY, RunConfig, tiny_policy_path
from trainer.loop import LoopOptions
from trainer.lora import is_adapter
from trainer.models import ModelError, refuse_tools_unrendered, resolve_model
from trainer.tracking import MetricsLogger

SECTIONS = ("", "algorithm", "sampling", "schedule", "lora", "local")
"""The sections of the run configuration the local backend reads."""


def ensure_tiny_policy(data_dir: Path) -> Path:
    """Run ``wsrl policy bootstrap`` (a no-op when its checkpoint is cached)."""
    target = tiny_policy_path(data_dir)
    command = [sys.executable, "-m", "app.cli", "policy", "bootstrap", "--out", str(target)]
    if subprocess.run(command, check=False).returncode != 0:
        raise StartError("`wsrl policy bootstrap` failed; see its output above")
    return target


def resolved_config(run: RunConfig, given: Mapping[str, str]) -> list[ConfigValue]:
    values = []
    for section in SECTIONS:
        obj = getattr(run, section) if section else run
        for f in fields(obj):
            if is_dataclass(getattr(obj, f.name)):
                continue
            path = f"{section}.{f.name}" if section else f.name
            values.append(ConfigValue(path, getattr(obj, f.name), path, given.get(path, "default")))
    return values


def checks(settings: Settings, run: RunConfig, given: Mapping[str, str]) -> list[Check]:
    return _service_checks(settings, run)


def _service_checks(
    settings: Settings, run: RunConfig, only: set[str] | None = None
) -> list[Check]:
    """The preflight of the run's environment: its env server, its goals."""
    environment = get_environment(run.schedule.environment, settings)
    return service_checks(
        settings,
        run.schedule.split,
        only=only,
        environment=environment.name,
        env_probe=environment.env_probe(settings),
    )


def train(
    settings: Settings, run: RunConfig, given: Mapping[str, str], echo: Callable[[str], None]
) -> None:
    try:
        settings.resolved_database_url()
        settings.resolved_redis_url()
    except ServicesNotRunningError as exc:
        raise StartError(str(exc)) from exc
    # what was asked first (the policy and its protocol), then the services; all of them
    # before bootstrapping the tiny policy
    model_path = None if run.model == TINY else _model(settings, run)
    _check_bootstrap_settings(settings, model_path)
    _preflight(settings, run)
    if model_path is None:
        model_path = ensure_tiny_policy(settings.data_dir)
        _check_bootstrap_settings(settings, model_path)
    _run(settings, model_path, run, echo)


def _model(settings: Settings, run: RunConfig) -> Path:
    """``--model``: a model ``wsrl model get`` converted (by name), or a checkpoint folder."""
    try:
        found = resolve_model(settings.data_dir, run.model)
    except ModelError as exc:
        raise StartError(str(exc)) from exc
    path = found or Path(run.model)
    if not (path / "config.json").is_file() and not is_adapter(path):
        raise StartError(
            f"{path} is not a Hugging Face checkpoint folder (no config.json) nor a LoRA "
            "adapter (no adapter_config.json)"
        )
    return path


def _preflight(settings: Settings, run: RunConfig) -> None:
    """The services the run talks to, before the policy is bootstrapped or loaded (seconds
    to minutes): Postgres and Redis, and the env server when the trainer enqueues. Goals
    may be missing: the trainer loads them from the env server."""
    needed = {"Postgres", "Redis"} | ({"env server"} if run.local.enqueue else set())
    found = _service_checks(settings, run, only=needed)
    if not all(c.ok for c in found):
        raise StartError("the preflight failed: fix the above (wsrl doctor re-checks)", found)


def _check_bootstrap_settings(settings: Settings, model_path: Path | None) -> None:
    """A bootstrapped policy was trained on prompts with a set history length, in text mode:
    the trainer publishes that protocol, and refuses settings given explicitly that say
    otherwise; a model whose chat template renders no tools is not played in tools mode.
    ``model_path`` None: the tiny policy that ``wsrl policy bootstrap`` builds with its
    defaults."""
    try:
        protocol = policy_protocol(settings, model_path)
        if model_path is not None:
            refuse_tools_unrendered(
                protocol.mode,
                model_path,
                "WSRL_AGENT_MODE=tools",
                "Set WSRL_AGENT_MODE=text, or unset it.",
            )
    except AgentProtocolMismatch as exc:
        raise StartError(str(exc)) from exc


def _sync_goals(
    settings: Settings, environment: str, split: str, echo: Callable[[str], None]
) -> None:
    """Load the environment's goals into Postgres when the split has none of them yet."""
    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            added = goals_of(session, settings, get_environment(environment, settings), split)
        if added:
            echo(f"loaded {added} {environment} goals")
    except GoalIdsTaken as exc:
        raise StartError(str(exc)) from exc
    except EnqueueError as exc:
        raise StartError(f"{exc}; use --split") from exc
    except EnvError as exc:
        raise StartError(f"{exc} (start it with `wsrl env serve`, or use --no-enqueue)") from exc
    finally:
        engine.dispose()


def _run(settings: Settings, model_path: Path, run: RunConfig, echo: Callable[[str], None]) -> None:
    from trainer.backends.local.run import default_checkpoint_dir, start_local_run  # torch
    from trainer.lora import LoraError

    try:
        metrics = MetricsLogger.from_settings(settings, "local", config=asdict(run.algorithm))
    except ValueError as exc:
        raise StartError(str(exc)) from exc
    if run.local.enqueue:
        _sync_goals(settings, run.schedule.environment, run.schedule.split, echo)
    options = LoopOptions(
        checkpoint_dir=run.local.checkpoint_dir or default_checkpoint_dir(settings),
        poll_s=run.local.poll_s,
        eval_every=run.schedule.eval_every,
    )
    try:
        local_run = start_local_run(settings, run, model_path, options, metrics=metrics)
    except LoraError as exc:  # an adapter checkpoint of another rank, unknown modules
        metrics.close()
        raise StartError(str(exc)) from exc
    loop = local_run.loop
    source = local_run.resumed_from or model_path
    echo(
        f"trainer: policy v{loop.version} from {source} served at {local_run.base_url}; "
        f"next step {loop.step + 1}"
    )
    if metrics.backends:
        echo(f"trainer: metrics to {', '.join(metrics.backends)}")
    if metrics.run_dir.is_dir():
        echo(f"trainer: curves in {metrics.run_dir}")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        loop.run(
            run.steps, stop, on_step=lambda result: echo(step_line(result)), finish_evaluation=True
        )
    finally:
        local_run.close()


def step_line(result: Any) -> str:
    """The line printed after each step."""
    m = result.metrics
    return (
        f"step {result.step} v{result.version} reward {m['reward/mean']:.3f} "
        f"success {m['reward/success']:.1%} rollouts {result.rollouts} "
        f"loss {m.get('losses/total', float('nan')):.4f} step {m['time/step_s']:.1f}s "
        f"(wait {m['time/wait_s']:.1f}s)"
    )
