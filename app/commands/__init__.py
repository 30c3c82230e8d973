"""Command groups of the ``wsrl`` CLI, one module per group.

Each module defines ``register(cli: typer.Typer) -> None``. Modules import heavy
dependencies (torch, transformers, the catalog) inside their commands, so that
``wsrl --help`` stays instant and an install without the ``train`` extra still works.
"""

from __future__ import annotations

import typer
from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def fail(message: object, code: int = 1) -> typer.Exit:
    """Print ``Error: message`` on stderr; the exit (status 1, or ``code``: 2 for a usage
    error such as a flag the command cannot honour) for the caller to raise."""
    err_console.print(f"[red]Error:[/red] {message}")
    return typer.Exit(code)
