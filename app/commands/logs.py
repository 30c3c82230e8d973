"""``wsrl logs``: the output of the newest ``wsrl dev`` run and of each of its processes.

Every ``wsrl dev`` run keeps what it printed in ``<data_dir>/logs/dev-<YYYYmmdd-HHMMSS>.log``
and its children's output in ``<data_dir>/logs/dev-<YYYYmmdd-HHMMSS>/<name>.log``; older
runs stay until removed. ``make logs-latest`` is ``wsrl logs --follow``.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

PROFILE = "dev"
RUN = "run"
"""The name of the run's own output (what ``wsrl dev`` printed), beside its children's."""


def logs_dir(data_dir: Path) -> Path:
    return data_dir / "logs"


def new_run(data_dir: Path, profile: str = PROFILE) -> tuple[Path, Path]:
    """(the run's log file, the folder of its children's logs) for a run starting now."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = logs_dir(data_dir) / f"{profile}-{stamp}"
    return base.with_suffix(".log"), base


def newest_run(data_dir: Path, profile: str = PROFILE) -> Path | None:
    """The newest run's log file (the timestamps sort by name), or None."""
    runs = sorted(logs_dir(data_dir).glob(f"{profile}-*.log"))
    return runs[-1] if runs else None


def log_of(run_log: Path, name: str) -> Path:
    """``run``: the run's own output; any other name: that child's output."""
    return run_log if name == RUN else run_log.with_suffix("") / f"{name}.log"


def logs(
    name: Annotated[
        str,
        typer.Argument(
            help="run (what wsrl dev printed) or a process: env, api, worker, "
            "flower, reconciler, trainer."
        ),
    ] = RUN,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines (tail -F).")
    ] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, help="Last lines shown.")] = 50,
    path: Annotated[bool, typer.Option("--path", help="Print the file's path only.")] = False,
) -> None:
    """Show the newest `wsrl dev` run's output, or one of its processes' (make logs-latest)."""
    from app.config import get_settings

    data_dir = get_settings().data_dir
    run_log = newest_run(data_dir)
    if run_log is None and follow:
        console.print(f"waiting for a `wsrl dev` run (logs under {logs_dir(data_dir)}) ...")
        while (run_log := newest_run(data_dir)) is None:
            time.sleep(1.0)
    if run_log is None:
        err_console.print(
            f"[red]Error:[/red] no `wsrl dev` run has logs under {logs_dir(data_dir)}; "
            "start one with `make dev`"
        )
        raise typer.Exit(1)
    target = log_of(run_log, name)
    if path:
        typer.echo(str(target))
        return
    if follow:
        tail = shutil.which("tail")
        if tail is not None:
            console.print(f"==> {target} <==")
            os.execv(tail, [tail, "-n", str(lines), "-F", str(target)])
    if not target.is_file():
        err_console.print(f"[red]Error:[/red] {target} does not exist (yet)")
        raise typer.Exit(1)
    text = target.read_text(errors="replace").splitlines()
    typer.echo("\n".join(text[-lines:] if lines else []))


def register(cli: typer.Typer) -> None:
    cli.command("logs")(logs)
