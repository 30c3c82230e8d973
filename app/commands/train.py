"""``wsrl train``: the trainer, with the local backend (CPU or one GPU, in this process) or
verl (GPUs; ``--config`` names one of ``trainer/backends/verl/configs``).

The local trainer keeps ``batch_groups x (1 + max_staleness)`` GRPO groups queued, trains
on complete groups within the staleness bound, serves its weights on an in-process OpenAI-compatible
policy server and republishes the endpoint in Redis after every update. Stopping it
(Ctrl-C / SIGTERM) ends the run after the current step; running it again resumes from
the last committed checkpoint under ``<data_dir>/trainer/checkpoints``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.commands import fail

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

TINY = "tiny"


def tiny_policy_path(data_dir: Path, seed: int = 0) -> Path:
    """Where ``wsrl policy bootstrap`` (default options) writes the tiny policy."""
    return data_dir / "policy" / f"tiny-{seed}"


def ensure_tiny_policy(data_dir: Path) -> Path:
    """Run ``wsrl policy bootstrap`` (a no-op when its checkpoint is cached)."""
    target = tiny_policy_path(data_dir)
    command = [sys.executable, "-m", "app.cli", "policy", "bootstrap", "--out", str(target)]
    if subprocess.run(command, check=False).returncode != 0:
        raise fail("`wsrl policy bootstrap` failed; see its output above")
    return target


def train(
    backend: Annotated[str, typer.Option(help="local (this process) or verl (GPUs).")] = "local",
    model: Annotated[
        str, typer.Option(help="Checkpoint folder to start from, or 'tiny' (bootstrapped).")
    ] = TINY,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Steps to train in this run (default: forever).")
    ] = None,
    preset: Annotated[str, typer.Option(help="grpo, dr_grpo, rloo or gspo.")] = "grpo",
    group_size: Annotated[int, typer.Option(min=1, help="Rollouts per GRPO group.")] = 4,
    batch_groups: Annotated[int, typer.Option(min=1, help="Groups per update.")] = 4,
    max_staleness: Annotated[int, typer.Option(min=0, help="Versions a group may lag.")] = 1,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-4,
    sample_mode: Annotated[str, typer.Option(help="trajectory or transition.")] = "trajectory",
    sample_weighting: Annotated[
        str, typer.Option(help="rollout (each episode counts the same) or token.")
    ] = "rollout",
    step_discount: Annotated[
        float,
        typer.Option(
            help="Return = reward x this per policy step after the first, in (0, 1] "
            "(1: the reward as is)."
        ),
    ] = 0.95,
    seed: Annotated[int, typer.Option(help="Seed of torch, batches and goal draws.")] = 0,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    temperature: Annotated[float, typer.Option(help="Sampling temperature of rollouts.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(min=1, help="Max new tokens per LLM call.")] = 48,
    split: Annotated[str, typer.Option(help="Goal split the rollouts are drawn from.")] = "train",
    train_starts: Annotated[
        str,
        typer.Option(
            help="Comma list of starts (search, results, item) each train group draws one "
            "of: the page the policy starts on. Evaluations always start at search."
        ),
    ] = "search",
    eval_every: Annotated[
        int,
        typer.Option(min=0, help="Evaluate on held-out test goals every N versions (0: never)."),
    ] = 0,
    eval_goals: Annotated[int, typer.Option(min=1, help="Test goals per evaluation.")] = 50,
    eval_temperature: Annotated[
        float, typer.Option(min=0.0, help="Sampling temperature of evaluations (0: greedy).")
    ] = 0.0,
    enqueue: Annotated[
        bool, typer.Option(help="Enqueue rollouts (off: train on what others enqueue).")
    ] = True,
    policy_port: Annotated[int, typer.Option(help="Port of the policy server (0 = any).")] = 0,
    policy_host: Annotated[
        str, typer.Option(help="Address the policy server listens on (0.0.0.0: all).")
    ] = "127.0.0.1",
    advertise_host: Annotated[
        str | None,
        typer.Option(
            help="Host name workers reach the policy server by, published with the endpoint "
            "(default: the listening address; set it when that is 0.0.0.0 or workers run "
            "elsewhere, e.g. the Compose service name)."
        ),
    ] = None,
    poll: Annotated[float, typer.Option(help="Seconds between looks at Postgres.")] = 1.0,
    checkpoint_dir: Annotated[
        Path | None, typer.Option(help="Default: <data_dir>/trainer/checkpoints.")
    ] = None,
    config: Annotated[
        str, typer.Option("--config", help="verl only: config name (smoke, fast, qwen, qwen3b).")
    ] = "fast",
    override: Annotated[
        list[str] | None, typer.Option(help="verl only: KEY=VALUE config override (repeat).")
    ] = None,
    preflight: Annotated[
        bool,
        typer.Option(help="verl only: run the checks of `wsrl doctor` first, stop on a failure."),
    ] = True,
) -> None:
    """Train the policy with GRPO-style updates on rollouts from the Celery workers."""
    from app.config import ServicesNotRunningError, get_settings
    from app.core.opening import parse_starts

    if backend == "verl":
        _run_verl(config, override or [], preflight)
        return
    if backend != "local":
        raise fail(f"unknown backend {backend!r}: use local or verl")
    try:
        starts = parse_starts(train_starts)
    except ValueError as exc:
        raise fail(f"--train-starts: {exc}") from exc
    if not 0.0 < step_discount <= 1.0:
        raise fail(f"--step-discount {step_discount}: use a value in (0, 1] (the default is 0.95)")
    settings = get_settings()
    try:
        settings.resolved_database_url()
        settings.resolved_redis_url()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    if model == TINY:  # before the minutes of bootstrapping it
        _check_bootstrap_settings(settings, None)
    model_path = ensure_tiny_policy(settings.data_dir) if model == TINY else Path(model)
    if not (model_path / "config.json").is_file():
        raise fail(f"{model_path} is not a Hugging Face checkpoint folder (no config.json)")
    _check_bootstrap_settings(settings, model_path)
    _run(
        settings,
        model_path,
        steps=steps,
        config_args={
            "group_size": group_size,
            "batch_groups": batch_groups,
            "max_staleness": max_staleness,
            "lr": lr,
            "sample_mode": sample_mode,
            "sample_weighting": sample_weighting,
            "step_discount": step_discount,
            "seed": seed,
            "device": device,
        },
        preset=preset,
        sampling={"temperature": temperature, "max_tokens": max_tokens},
        split=split,
        train_starts=starts,
        eval_every=eval_every,
        eval_goals=eval_goals,
        eval_sampling={"temperature": eval_temperature, "max_tokens": max_tokens},
        enqueue=enqueue,
        policy_port=policy_port,
        policy_host=policy_host,
        advertise_host=advertise_host,
        poll=poll,
        checkpoint_dir=checkpoint_dir,
    )


def _check_bootstrap_settings(settings, model_path: Path | None) -> None:
    """A bootstrapped policy was trained on prompts with a set history length: the workers
    must prompt it the same way. ``model_path`` None: the tiny policy that
    ``wsrl policy bootstrap`` builds with its defaults."""
    from app.core.agent import AgentSettingsMismatch, check_agent_settings
    from trainer.bootstrap import MANIFEST, BootstrapConfig

    if model_path is None:
        history, source = BootstrapConfig().history_steps, "the tiny policy's bootstrap"
    else:
        manifest = model_path / MANIFEST
        if not manifest.is_file():
            return
        history = json.loads(manifest.read_text()).get("history_steps")
        source = f"the policy's bootstrap ({manifest})"
    try:
        check_agent_settings(settings, source, history_steps=history, mode="text")
    except AgentSettingsMismatch as exc:
        raise fail(exc) from exc


def _run_verl(config_name: str, overrides: list[str], preflight: bool) -> None:
    from trainer.backends.verl.entry import train as train_verl

    try:
        if preflight:
            _preflight(config_name, overrides)
        train_verl(config_name, overrides)
    except (ValueError, RuntimeError) as exc:
        raise fail(exc) from exc


def _preflight(config_name: str, overrides: list[str]) -> None:
    """`wsrl doctor`'s checks, before minutes of Ray, FSDP and vLLM start-up. Goals may be
    missing: the trainer loads them on its first request."""
    from app.commands.doctor import print_checks, run_checks

    checks = [c for c in run_checks("verl", config_name, overrides) if c.name != "goals"]
    if not all(c.ok for c in checks):
        print_checks(checks)
        raise fail("the preflight failed: fix the above (wsrl doctor re-checks), or --no-preflight")


def _sync_goals(settings, split: str) -> None:
    """Load the env server's goals into Postgres when the split has none yet."""
    from app.core.enqueue import EnqueueError, ensure_goals
    from app.core.env_client import EnvError
    from app.db.session import make_engine, make_sessionmaker, session_scope

    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            added = ensure_goals(session, settings, split)
        if added:
            console.print(f"loaded {added} goals from {settings.env_url}")
    except EnqueueError as exc:
        raise fail(f"{exc}; use --split") from exc
    except EnvError as exc:
        raise fail(f"{exc} (start it with `wsrl env serve`, or use --no-enqueue)") from exc
    finally:
        engine.dispose()


def _run(settings, model_path: Path, *, steps, config_args, preset, **kw) -> None:
    from trainer.config import TrainerConfig
    from trainer.local_run import default_checkpoint_dir, start_local_trainer
    from trainer.loop import LoopOptions
    from trainer.tracking import MetricsLogger

    try:
        config = TrainerConfig.preset(preset, **config_args)
        metrics = MetricsLogger.from_settings(settings, "local", config=asdict(config))
    except ValueError as exc:
        raise fail(exc) from exc
    if kw["enqueue"]:
        _sync_goals(settings, kw["split"])
    options = LoopOptions(
        checkpoint_dir=kw["checkpoint_dir"] or default_checkpoint_dir(settings),
        poll_s=kw["poll"],
        eval_every=kw["eval_every"],
    )
    trainer = start_local_trainer(
        settings,
        config,
        model_path,
        options,
        enqueue=kw["enqueue"],
        sampling=kw["sampling"],
        split=kw["split"],
        train_starts=kw["train_starts"],
        eval_goals=kw["eval_goals"],
        eval_sampling=kw["eval_sampling"],
        policy_port=kw["policy_port"],
        policy_host=kw["policy_host"],
        advertise_host=kw["advertise_host"],
        metrics=metrics,
    )
    loop = trainer.loop
    source = trainer.resumed_from or model_path
    console.print(
        f"trainer: policy v{loop.version} from {source} served at {trainer.base_url}; "
        f"next step {loop.step + 1}",
        highlight=False,
    )
    if metrics.backends:
        console.print(f"trainer: metrics to {', '.join(metrics.backends)}", highlight=False)
    if metrics.run_dir.is_dir():
        console.print(f"trainer: curves in {metrics.run_dir}", highlight=False)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        loop.run(steps, stop, on_step=_print_step)
    finally:
        trainer.close()


def _print_step(result) -> None:
    m = result.metrics
    console.print(
        f"step {result.step} v{result.version} reward {m['reward/mean']:.3f} "
        f"success {m['reward/success']:.1%} rollouts {result.rollouts} "
        f"loss {m.get('losses/total', float('nan')):.4f} step {m['time/step_s']:.1f}s "
        f"(wait {m['time/wait_s']:.1f}s)",
        highlight=False,
    )


def register(cli: typer.Typer) -> None:
    cli.command("train")(train)
