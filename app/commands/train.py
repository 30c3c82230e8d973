"""``wsrl train``: the trainer, with the local backend (CPU or one GPU, in this process) or
verl (GPUs; ``--config`` names one of ``trainer/backends/verl/configs``).

The local trainer keeps ``batch_groups x (1 + max_staleness)`` GRPO groups queued, trains
on complete groups within the staleness bound, serves its weights on an in-process OpenAI-compatible
policy server and republishes the endpoint in Redis after every update. Stopping it
(Ctrl-C / SIGTERM) ends the run after the current step; running it again resumes from
the last committed checkpoint under ``<data_dir>/trainer/checkpoints``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from dataclasses import asdict, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.commands import fail
from trainer.config import (
    PRESETS,
    TINY,
    LocalSection,
    RunConfig,
    Sampling,
    Schedule,
    TrainerConfig,
    VerlSection,
    defaults,
    help_of,
)

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


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


R = defaults(RunConfig)
A = TrainerConfig


def _opt(cls: type, name: str, **kw) -> typer.models.OptionInfo:
    """A typer option whose help is the run configuration's (trainer/config.py)."""
    return typer.Option(help=help_of(cls, name), **kw)


FLAGS: dict[str, str] = {
    "backend": "backend",
    "model": "model",
    "steps": "steps",
    "preset": "preset",
    **{
        name: f"algorithm.{name}"
        for name in (
            "group_size",
            "batch_groups",
            "max_staleness",
            "lr",
            "sample_mode",
            "sample_weighting",
            "step_discount",
            "seed",
            "device",
        )
    },
    "temperature": "sampling.temperature",
    "max_tokens": "sampling.max_tokens",
    **{
        name: f"schedule.{name}"
        for name in ("split", "train_starts", "eval_every", "eval_goals", "eval_temperature")
    },
    **{
        name: f"local.{name}"
        for name in ("enqueue", "policy_port", "policy_host", "advertise_host", "checkpoint_dir")
    },
    "poll": "local.poll_s",
    "config": "verl.config",
    "override": "verl.overrides",
    "preflight": "verl.preflight",
}
"""Each option of ``wsrl train`` -> the :class:`RunConfig` field it sets."""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def train(
    ctx: typer.Context,
    backend: Annotated[str, _opt(RunConfig, "backend")] = R.backend,
    model: Annotated[str, _opt(RunConfig, "model")] = R.model,
    steps: Annotated[int | None, _opt(RunConfig, "steps")] = R.steps,
    preset: Annotated[str, _opt(RunConfig, "preset")] = R.preset,
    group_size: Annotated[int, _opt(A, "group_size")] = R.algorithm.group_size,
    batch_groups: Annotated[int, _opt(A, "batch_groups")] = R.algorithm.batch_groups,
    max_staleness: Annotated[int, _opt(A, "max_staleness")] = R.algorithm.max_staleness,
    lr: Annotated[float, _opt(A, "lr")] = R.algorithm.lr,
    sample_mode: Annotated[str, _opt(A, "sample_mode")] = R.algorithm.sample_mode,
    sample_weighting: Annotated[str, _opt(A, "sample_weighting")] = R.algorithm.sample_weighting,
    step_discount: Annotated[float, _opt(A, "step_discount")] = R.algorithm.step_discount,
    seed: Annotated[int, _opt(A, "seed")] = R.algorithm.seed,
    device: Annotated[str, _opt(A, "device")] = R.algorithm.device,
    temperature: Annotated[float, _opt(Sampling, "temperature")] = R.sampling.temperature,
    max_tokens: Annotated[int, _opt(Sampling, "max_tokens")] = R.sampling.max_tokens,
    split: Annotated[str, _opt(Schedule, "split")] = R.schedule.split,
    train_starts: Annotated[str, _opt(Schedule, "train_starts")] = ",".join(
        R.schedule.train_starts
    ),
    eval_every: Annotated[int, _opt(Schedule, "eval_every")] = R.schedule.eval_every,
    eval_goals: Annotated[int, _opt(Schedule, "eval_goals")] = R.schedule.eval_goals,
    eval_temperature: Annotated[
        float, _opt(Schedule, "eval_temperature")
    ] = R.schedule.eval_temperature,
    enqueue: Annotated[bool, _opt(LocalSection, "enqueue")] = R.local.enqueue,
    policy_port: Annotated[int, _opt(LocalSection, "policy_port")] = R.local.policy_port,
    policy_host: Annotated[str, _opt(LocalSection, "policy_host")] = R.local.policy_host,
    advertise_host: Annotated[
        str | None, _opt(LocalSection, "advertise_host")
    ] = R.local.advertise_host,
    poll: Annotated[float, _opt(LocalSection, "poll_s")] = R.local.poll_s,
    checkpoint_dir: Annotated[
        Path | None, _opt(LocalSection, "checkpoint_dir")
    ] = R.local.checkpoint_dir,
    config: Annotated[str, _opt(VerlSection, "config")] = R.verl.config,
    override: Annotated[list[str] | None, _opt(VerlSection, "overrides")] = None,
    preflight: Annotated[bool, _opt(VerlSection, "preflight")] = R.verl.preflight,
    print_config: Annotated[
        bool,
        typer.Option(
            help="Print the resolved configuration, where each value came from, and exit."
        ),
    ] = False,
) -> None:
    """Train the policy with GRPO-style updates on rollouts from the Celery workers."""
    from app.config import ServicesNotRunningError, get_settings

    values = {name: value for name, value in locals().items() if name in FLAGS}
    given = {name for name in FLAGS if _given(ctx, name)}
    run = build_run(values)
    if run.backend == "verl":
        _refuse_unhonoured(given, VERL_FLAGS, "verl")
        overrides = verl_overrides(run, given)
        if print_config:
            _print_verl_config(run, overrides, given)
            return
        _run_verl(run.verl.config, overrides, run.verl.preflight)
        return
    _refuse_unhonoured(given, LOCAL_FLAGS, "local")
    if print_config:
        _print_run_config(run, given)
        return
    settings = get_settings()
    try:
        settings.resolved_database_url()
        settings.resolved_redis_url()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    if run.model == TINY:  # before the minutes of bootstrapping it
        _check_bootstrap_settings(settings, None)
    model_path = ensure_tiny_policy(settings.data_dir) if run.model == TINY else Path(run.model)
    if not (model_path / "config.json").is_file():
        raise fail(f"{model_path} is not a Hugging Face checkpoint folder (no config.json)")
    _check_bootstrap_settings(settings, model_path)
    _run(settings, model_path, run)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user typed option ``name`` (its value is not the default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _default(path: str) -> object:
    value: object = R
    for part in path.split("."):
        value = getattr(value, part)
    return value


def build_run(values: dict) -> RunConfig:
    """The validated :class:`RunConfig` of the options' ``values`` (an option left out: its
    default); a bad value is an error that names its flag (status 1)."""
    sections: dict[str, dict] = {}
    top: dict = {}
    for name, path in FLAGS.items():
        value = values[name] if name in values else _default(path)
        if name == "train_starts" and isinstance(value, str):
            value = tuple(value.split(","))
        elif name == "override":
            value = tuple(value or ())
        if "." in path:
            section, field_name = path.split(".")
            sections.setdefault(section, {})[field_name] = value
        else:
            top[path] = value
    try:
        if top["preset"] not in PRESETS:
            raise ValueError(f"preset={top['preset']!r}: use one of {sorted(PRESETS)}.")
        return RunConfig(
            **top,
            algorithm=TrainerConfig.preset(top["preset"], **sections["algorithm"]),
            sampling=Sampling(**sections["sampling"]),
            schedule=Schedule(**sections["schedule"]),
            local=LocalSection(**sections["local"]),
            verl=VerlSection(**sections["verl"]),
        )
    except ValueError as exc:
        raise fail(_name_flag(str(exc))) from exc


def _name_flag(message: str) -> str:
    """``lr=0: ...`` -> ``--lr=0: ...``: the flag the user typed, not the field's name."""
    field_to_flag = {path.split(".")[-1]: name for name, path in FLAGS.items()}
    head = message.split("=")[0].split(":")[0]
    if head in field_to_flag:
        return flag(field_to_flag[head]) + message[len(head) :]
    return message


VERL_FLAGS: frozenset[str] = frozenset(
    {"backend", "config", "override", "preflight", "model", "preset", "steps", "poll"}
    | {"group_size", "batch_groups", "max_staleness", "lr", "sample_mode", "step_discount"}
    | {"seed", "temperature", "split", "train_starts", "eval_every", "eval_goals"}
    | {"eval_temperature", "policy_port", "policy_host", "advertise_host", "checkpoint_dir"}
)
"""The options the verl backend honours (trainer/backends/verl/config.py maps each to its
key); any other one given with ``--backend verl`` is refused."""
LOCAL_FLAGS: frozenset[str] = frozenset(FLAGS) - {"config", "override", "preflight"}
"""The options the local backend honours."""


def _refuse_unhonoured(given: set[str], honoured: frozenset[str], backend: str) -> None:
    """A flag the backend would ignore is a usage error (status 2) that names it."""
    ignored = sorted(given - honoured)
    if not ignored:
        return
    flags = ", ".join(flag(n) for n in ignored)
    hint = (
        "set the verl key with --override KEY=VALUE, or use --backend local"
        if backend == "verl"
        else "it is for --backend verl"
    )
    raise fail(f"{flags}: the {backend} backend cannot honour it ({hint}).", code=2)


def verl_overrides(run: RunConfig, given: set[str]) -> list[str]:
    """The Hydra overrides of the verl config that the typed options make, then the user's
    own ``--override`` (which win)."""
    from trainer.backends.verl.config import run_overrides

    paths = {FLAGS[name] for name in given if name in VERL_FLAGS}
    if "preset" in given:
        paths |= {f"algorithm.{key}" for key in PRESETS[run.preset]}
    if run.model == TINY and "model" in paths:
        from app.config import get_settings

        run = replace(run, model=str(tiny_policy_path(get_settings().data_dir)))
    return [*run_overrides(run, paths), *run.verl.overrides]


def _print_run_config(run: RunConfig, given: set[str]) -> None:
    by_path = {path: name for name, path in FLAGS.items()}
    for section in ("", "algorithm", "sampling", "schedule", "local"):
        obj = getattr(run, section) if section else run
        for f in fields(obj):
            if is_dataclass(getattr(obj, f.name)):
                continue
            path = f"{section}.{f.name}" if section else f.name
            name = by_path.get(path)
            source = f"flag {flag(name)}" if name in given else "default"
            console.print(f"{path} = {getattr(obj, f.name)!r}  ({source})", highlight=False)


def _print_verl_config(run: RunConfig, overrides: list[str], given: set[str]) -> None:
    from omegaconf import OmegaConf

    from trainer.backends.verl.config import VERL_KEYS, load_config

    try:
        config = load_config(run.verl.config, overrides)
    except ValueError as exc:
        raise fail(exc) from exc
    set_by = {FLAGS[name]: name for name in given}
    if "preset" in given:
        set_by |= {f"algorithm.{key}": "preset" for key in PRESETS[run.preset]}
    user = {o.split("=", 1)[0] for o in run.verl.overrides}
    for path, key in VERL_KEYS.items():
        value = OmegaConf.select(config, key)
        if key in user:
            source = "--override"
        elif path in set_by:
            source = f"flag {flag(set_by[path])}"
        else:
            source = f"config {run.verl.config}"
        console.print(f"{key} = {value!r}  ({path}; {source})", highlight=False)


def _check_bootstrap_settings(settings, model_path: Path | None) -> None:
    """A bootstrapped policy was trained on prompts with a set history length, in text mode:
    the trainer publishes that protocol, and refuses settings given explicitly that say
    otherwise. ``model_path`` None: the tiny policy that ``wsrl policy bootstrap`` builds
    with its defaults."""
    from app.core.agent import AgentProtocolMismatch
    from trainer.bootstrap import policy_protocol

    try:
        policy_protocol(settings, model_path)
    except AgentProtocolMismatch as exc:
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


def _run(settings, model_path: Path, run: RunConfig) -> None:
    from trainer.local_run import default_checkpoint_dir, start_local_trainer
    from trainer.loop import LoopOptions
    from trainer.tracking import MetricsLogger

    try:
        metrics = MetricsLogger.from_settings(settings, "local", config=asdict(run.algorithm))
    except ValueError as exc:
        raise fail(exc) from exc
    if run.local.enqueue:
        _sync_goals(settings, run.schedule.split)
    options = LoopOptions(
        checkpoint_dir=run.local.checkpoint_dir or default_checkpoint_dir(settings),
        poll_s=run.local.poll_s,
        eval_every=run.schedule.eval_every,
    )
    sampling = asdict(run.sampling)
    trainer = start_local_trainer(
        settings,
        run.algorithm,
        model_path,
        options,
        enqueue=run.local.enqueue,
        sampling=sampling,
        split=run.schedule.split,
        train_starts=run.schedule.train_starts,
        eval_goals=run.schedule.eval_goals,
        eval_sampling={**sampling, "temperature": run.schedule.eval_temperature},
        policy_port=run.local.policy_port,
        policy_host=run.local.policy_host,
        advertise_host=run.local.advertise_host,
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
        loop.run(run.steps, stop, on_step=_print_step)
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
