"""``wsrl view`` (``make watch``): a three-pane tmux view of a running ``wsrl dev``.

Top: the agents' decisions (``wsrl watch``: every worker's ``[TASK]/[STEP]/[DONE]`` lines
and a summary). Bottom left: training progress (``wsrl logs -f``: the run's step, held-out
and rollout-summary lines). Bottom right: the env server's log (``wsrl logs -f env``).
Panes stay open when their command ends, so an error stays readable. Without tmux it says
how to install it, and which commands give the same streams in separate terminals.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

WSRL = [sys.executable, "-m", "app.cli"]
PANES = (
    ("agent decisions (wsrl watch)", [*WSRL, "watch"]),
    ("training progress (wsrl logs -f)", [*WSRL, "logs", "-f"]),
    ("env server (wsrl logs -f env)", [*WSRL, "logs", "-f", "env"]),
)
PASSED_ON = ("WSRL_", "OPENAI_", "PYTHONPATH", "VIRTUAL_ENV", "PATH")
"""Variables handed to the panes: a tmux server that already runs has its own environment."""

NO_TMUX = (
    "`make watch` needs tmux, which is not installed: `sudo apt-get install tmux` "
    "(Debian/Ubuntu), `sudo dnf install tmux` (Fedora) or `brew install tmux` (macOS). "
    "Without it, open three terminals: `make watch-steps` (agent decisions), "
    "`make watch-progress` (training progress), `wsrl logs -f env` (env server)."
)


def view(
    session: Annotated[str, typer.Option(help="tmux session name.")] = "wsrl",
    attach: Annotated[
        bool, typer.Option(help="Attach to the session (off: leave it detached).")
    ] = (True),
    socket: Annotated[
        str | None, typer.Option(help="tmux server socket name (tmux -L); default tmux's own.")
    ] = None,
) -> None:
    """Three tmux panes: agent decisions, training progress, env server log (make watch)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        err_console.print(f"[red]Error:[/red] {NO_TMUX}")
        raise typer.Exit(1)
    base = [tmux, *(["-L", socket] if socket else [])]
    exists = subprocess.run([*base, "has-session", "-t", f"={session}"], capture_output=True)
    if exists.returncode != 0:
        _create(base, session, Path.cwd())
        console.print(f"tmux session {session!r}: {', '.join(title for title, _ in PANES)}")
    else:
        console.print(f"tmux session {session!r} already runs")
    if not attach:
        detach_hint = f"tmux {'-L ' + socket + ' ' if socket else ''}attach -t {session}"
        console.print(f"attach with `{detach_hint}`; Ctrl-b d detaches again")
        return
    verb = "switch-client" if os.environ.get("TMUX") else "attach-session"
    os.execv(tmux, [*base, verb, "-t", session])


def _create(base: list[str], session: str, cwd: Path) -> None:
    env = [
        f"-e{key}={value}"
        for key, value in os.environ.items()
        if key.startswith(PASSED_ON) and "\n" not in value
    ]
    commands = [shlex.join(command) for _, command in PANES]
    run = [*base, "new-session", "-d", "-s", session, "-x", "200", "-y", "50", "-c", str(cwd)]
    # One tmux call, so that the option is set before the first pane's command can end.
    options = [";", "set-option", "-w", "-t", f"{session}:0", "remain-on-exit", "on"]
    options += [";", "set-option", "-w", "-t", f"{session}:0", "pane-border-status", "top"]
    _tmux([*run, *env, commands[0], *options])
    _tmux([*base, "split-window", "-v", "-t", f"{session}:0.0", "-c", str(cwd), *env, commands[1]])
    _tmux([*base, "split-window", "-h", "-t", f"{session}:0.1", "-c", str(cwd), *env, commands[2]])
    for index, (title, _) in enumerate(PANES):
        _tmux([*base, "select-pane", "-t", f"{session}:0.{index}", "-T", title])
    _tmux([*base, "select-pane", "-t", f"{session}:0.0"])


def _tmux(args: list[str]) -> None:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        err_console.print(f"[red]Error:[/red] {shlex.join(args[:4])} ...: {result.stderr.strip()}")
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("view")(view)
