"""``wsrl flower``: Flower on the configured broker, for the Celery side of the pipeline.

Flower's HTTP API (``/api/workers``, ``/api/tasks``) refuses unauthenticated callers
unless the ``FLOWER_UNAUTHENTICATED_API`` variable is set; this command protects UI and
API with basic auth instead (user ``wsrl``, password ``WSRL_API_TOKEN`` by default), so
the API works out of the box without opening it to everyone. Workers are found with
``inspect`` (``--inspect-timeout``) and tasks from the task events the workers send.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True)


def flower(
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default: WSRL_FLOWER_PORT).")
    ] = None,
    address: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    basic_auth: Annotated[
        str | None, typer.Option(help="USER:PASSWORD (default: wsrl:$WSRL_API_TOKEN).")
    ] = None,
    broker_api: Annotated[
        str | None,
        typer.Option(help="Broker management API URL (RabbitMQ only; Redis needs none)."),
    ] = None,
    inspect_timeout_ms: Annotated[
        float, typer.Option("--inspect-timeout", help="Milliseconds to wait for workers.")
    ] = 1000.0,
) -> None:
    """Run Flower on the pipeline's broker (UI and HTTP API behind basic auth)."""
    from app.config import ServicesNotRunningError, get_settings
    from workers.celery_app import get_app

    settings = get_settings()
    credentials = basic_auth or f"wsrl:{settings.api_token}"
    if ":" not in credentials:
        err_console.print("[red]Error:[/red] --basic-auth must be USER:PASSWORD")
        raise typer.Exit(2)
    try:
        celery = get_app()
    except ServicesNotRunningError as exc:
        err_console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc
    argv = [
        "flower",
        f"--port={port or settings.flower_port}",
        f"--address={address}",
        f"--basic_auth={credentials}",
        f"--inspect_timeout={inspect_timeout_ms}",
    ]
    if broker_api:
        argv.append(f"--broker_api={broker_api}")
    celery.start(argv=argv)


def register(cli: typer.Typer) -> None:
    cli.command("flower")(flower)
