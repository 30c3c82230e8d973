"""``wsrl api serve``: the control-plane API (FastAPI on uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

api_cli = typer.Typer(help="The control-plane API: rollouts, trajectories, policy, gateway.")
err_console = Console(stderr=True, soft_wrap=True)


@api_cli.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Serve the API until interrupted; docs at http://HOST:PORT/docs.

    Database and Redis come from the settings (WSRL_DATABASE_URL / WSRL_REDIS_URL or the
    embedded services); writes need `Authorization: Bearer $WSRL_API_TOKEN`.
    """
    from app.api.main import create_app
    from app.config import ServicesNotRunningError, get_settings
    from app.webshop.server.runner import serve as serve_app

    settings = get_settings()
    try:
        settings.resolved_database_url()
        settings.resolved_redis_url()
    except ServicesNotRunningError as exc:
        err_console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc
    serve_app(create_app(settings), host=host, port=port)


def register(cli: typer.Typer) -> None:
    cli.add_typer(api_cli, name="api")
