"""``wsrl train``: the trainer, with the backend ``--backend`` names (the registry
:data:`trainer.backends.BACKENDS`: ``local``, CPU or one GPU in this process; ``verl``,
GPUs, ``--config`` naming one of ``trainer/backends/verl/configs``).

The options are the run configuration's fields (:class:`trainer.config.RunConfig`); one
the chosen backend cannot honour is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.commands import fail
from app.commands.doctor import backend_named, print_checks
from trainer.backends import Backend, ConfigValue, StartError
from trainer.config import (
    PRESETS,
    LocalSection,
    Lora,
    RunConfig,
    Sampling,
    Schedule,
    TrainerConfig,
    VerlSection,
    defaults,
    help_of,
)

console = Console(soft_wrap=True)


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
    "lora_rank": "lora.rank",
    "lora_alpha": "lora.alpha",
    "lora_target_modules": "lora.target_modules",
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
    lora_rank: Annotated[int, _opt(Lora, "rank")] = R.lora.rank,
    lora_alpha: Annotated[int, _opt(Lora, "alpha")] = R.lora.alpha,
    lora_target_modules: Annotated[str, _opt(Lora, "target_modules")] = ",".join(
        R.lora.target_modules
    ),
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
    from app.config import get_settings

    values = {name: value for name, value in locals().items() if name in FLAGS}
    given = {name for name in FLAGS if _given(ctx, name)}
    chosen = backend_named(backend)
    run = build_run(values)
    _refuse_unhonoured(given, chosen)
    typed = {FLAGS[name] for name in given}
    entry = chosen.load()
    try:
        if print_config:
            _print_config(entry.resolved_config(run, typed))
            return
        entry.train(get_settings(), run, typed, echo)
    except StartError as exc:
        if exc.checks:
            print_checks(exc.checks)
        raise fail(exc) from exc


def echo(line: str) -> None:
    console.print(line, highlight=False)


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
        if name in ("train_starts", "lora_target_modules") and isinstance(value, str):
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
            lora=Lora(**sections["lora"]),
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


def _refuse_unhonoured(given: set[str], backend: Backend) -> None:
    """A flag the backend would ignore is a usage error (status 2) that names it."""
    ignored = sorted(name for name in given if FLAGS[name] not in backend.honours)
    if not ignored:
        return
    flags = ", ".join(flag(n) for n in ignored)
    raise fail(
        f"{flags}: the {backend.name} backend cannot honour it ({backend.unhonoured_hint}).",
        code=2,
    )


def _print_config(values: Sequence[ConfigValue]) -> None:
    """One line per value: its key, and where it came from (the backend's own keys with
    the run-configuration field they hold)."""
    option = {path: name for name, path in FLAGS.items()}
    for v in values:
        source = f"flag {flag(option[v.typed])}" if v.typed else v.source
        where = source if v.key == v.path else f"{v.path}; {source}"
        console.print(f"{v.key} = {v.value!r}  ({where})", highlight=False)


def register(cli: typer.Typer) -> None:
    cli.command("train")(train)
