"""``wsrl doctor``: the preflight of a training run, each failure with its fix.

The backend (:data:`trainer.backends.BACKENDS`) names its checks: the services every run
needs (:mod:`app.core.preflight`) and its own (verl's: ``trainer/backends/verl/doctor.py``).
``wsrl train --backend verl`` runs them first, so a missing GPU, a wrong image, an
unreachable service or settings the workers would not play stop the run in seconds, not
after minutes of Ray, FSDP and vLLM start-up. Exit status 1 when any check fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.commands import fail
from trainer.backends import Backend, StartError, UnknownBackendError, choices, get_backend
from trainer.config import RunConfig, Schedule, VerlSection

if TYPE_CHECKING:
    from app.core.preflight import Check  # imported at run time, it costs `wsrl --help` 0.6 s

console = Console(highlight=False, soft_wrap=True)


def backend_named(name: str) -> Backend:
    """The registry's backend ``name``; an unknown one is a usage error (status 2)."""
    try:
        return get_backend(name)
    except UnknownBackendError as exc:
        raise fail(exc, code=2) from exc


def print_checks(checks: Sequence[Check]) -> None:
    """One line per check; a failed one with its fix below."""
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = "[green]ok  [/green]" if check.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {check.name:<{width}}  {check.detail}")
        if not check.ok:
            console.print(f"     {'':<{width}}  fix: {check.fix}")


def doctor(
    backend: Annotated[str, typer.Option(help=f"{choices()}.")] = "verl",
    config: Annotated[str, typer.Option(help="verl config: smoke, fast, qwen or qwen3b.")] = "fast",
    environment: Annotated[
        str, typer.Option(help="Environment the run plays (its env server, its goals).")
    ] = Schedule.environment,
) -> None:
    """Check that a training run can start: GPU stack, model, disk, services, settings."""
    from app.config import get_settings

    chosen = backend_named(backend)
    try:
        schedule = Schedule(environment=environment)
    except ValueError as exc:
        raise fail(exc, code=2) from exc
    run = RunConfig(backend=chosen.name, schedule=schedule, verl=VerlSection(config=config))
    try:
        checks = chosen.load().checks(get_settings(), run, {})
    except StartError as exc:  # an unknown or invalid verl config
        console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc
    print_checks(checks)
    failed = [c for c in checks if not c.ok]
    console.print(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    if failed:
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("doctor")(doctor)
