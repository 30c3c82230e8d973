"""``wsrl train``: the trainer, with the backend ``--backend`` names (the registry
:data:`trainer.backends.BACKENDS`: ``local``, CPU or one GPU in this process; ``verl``,
GPUs, ``--config`` naming one of ``trainer/backends/verl/configs``).

Its options are the run configuration's fields, generated (:mod:`app.commands._run_options`);
a config file and the environment can set them too. A field the chosen backend cannot
honour is refused, naming it.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from app.commands import fail
from app.commands._run_options import (
    Collected,
    RunOptionError,
    collect,
    run_options,
    signature,
    typed_values,
)
from app.commands.doctor import backend_named, print_checks
from trainer.backends import Backend, ConfigValue, StartError
from trainer.config import RunConfig

console = Console(soft_wrap=True)

CONFIG_FILE = inspect.Parameter(
    "config_file",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        Path | None,
        typer.Option(
            help="A TOML or YAML file setting run-configuration fields (top-level keys and "
            "one table per section, as --print-config names them); flags and WSRL_TRAIN_* "
            "variables win over it."
        ),
    ],
)
PRINT_CONFIG = inspect.Parameter(
    "print_config",
    inspect.Parameter.KEYWORD_ONLY,
    default=False,
    annotation=Annotated[
        bool,
        typer.Option(
            help="Print the resolved configuration, where each value came from, and exit."
        ),
    ],
)


def train(ctx: typer.Context, **values: Any) -> None:
    """Train the policy with GRPO-style updates on rollouts from the Celery workers."""
    from app.config import get_settings

    try:
        user = collect(typed_values(ctx, values), values["config_file"], os.environ)
    except RunOptionError as exc:
        raise fail(exc) from exc
    chosen = backend_named(user.values.get("backend", RunConfig.backend))
    run = build_run(user)
    refuse_unhonoured(user, chosen)
    entry = chosen.load()
    try:
        if values["print_config"]:
            _print_config(entry.resolved_config(run, user.sources))
            return
        entry.train(get_settings(), run, user.sources, echo)
    except StartError as exc:
        if exc.checks:
            print_checks(exc.checks)
        raise fail(exc) from exc


train.__signature__ = signature({}, run_options(), CONFIG_FILE, PRINT_CONFIG)  # type: ignore[attr-defined]


def echo(line: str) -> None:
    console.print(line, highlight=False)


def build_run(user: Collected) -> RunConfig:
    """The validated run configuration of what the user set; a bad value is an error that
    names where it was set (status 1)."""
    try:
        return user.build()
    except RunOptionError as exc:
        raise fail(exc) from exc


def refuse_unhonoured(user: Collected, backend: Backend) -> None:
    """A field the backend would ignore is a usage error (status 2) that names it."""
    ignored = sorted(user.label(p) for p in user.set_by_user() if not backend.honours(p))
    if ignored:
        raise fail(
            f"{', '.join(ignored)}: the {backend.name} backend cannot honour it "
            f"({backend.unhonoured_hint}).",
            code=2,
        )


def _print_config(values: Sequence[ConfigValue]) -> None:
    """One line per value: its key, and where it came from (the backend's own keys with
    the run-configuration field they hold)."""
    for v in values:
        where = v.source if v.key == v.path else f"{v.path}; {v.source}"
        console.print(f"{v.key} = {v.value!r}  ({where})", highlight=False)


def register(cli: typer.Typer) -> None:
    cli.command("train")(train)
