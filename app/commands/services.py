"""``wsrl services start|status|stop``: the embedded PostgreSQL and Redis."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console

from app.config import Settings, get_settings

services_cli = typer.Typer(help="Embedded PostgreSQL and Redis (daemons under the data dir).")
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

DataDirOption = typer.Option(None, "--data-dir", help="Default: WSRL_DATA_DIR or .wsrl")

EXTERNAL_SETTING = {"postgres": "WSRL_DATABASE_URL", "redis": "WSRL_REDIS_URL"}


def _settings(data_dir: Path | None) -> Settings:
    settings = get_settings()
    return settings.model_copy(update={"data_dir": data_dir}) if data_dir else settings


def _mask(url: str | None) -> str:
    """The URL without its password, for printing."""
    return re.sub(r"(://[^:/@]*:)[^@/]+@", r"\1***@", url) if url else "-"


def _print(reports: list) -> None:
    for report in reports:
        if report.state == "external":
            setting = EXTERNAL_SETTING[report.name]
            console.print(f"{report.name}: using {setting} = {_mask(report.url)} (nothing started)")
        else:
            url = f"  {_mask(report.url)}" if report.url else ""
            console.print(f"{report.name}: {report.state}{url}")


@services_cli.command("start")
def start(data_dir: Path | None = DataDirOption) -> None:
    """Start the embedded services (a running one is kept) and record their URLs."""
    from app.embedded.ports import PortInUseError
    from app.embedded.services import start_services

    settings = _settings(data_dir)
    try:
        reports = start_services(settings)
    except PortInUseError as exc:
        err_console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc
    _print(reports)
    console.print(f"URLs recorded in {settings.services_file()}")


@services_cli.command("status")
def status(data_dir: Path | None = DataDirOption) -> None:
    """Show whether each service runs and its URL; exit 1 when an embedded one is down."""
    from app.embedded.services import services_status

    reports = services_status(_settings(data_dir))
    _print(reports)
    if any(report.state == "not running" for report in reports):
        raise typer.Exit(1)


@services_cli.command("stop")
def stop(data_dir: Path | None = DataDirOption) -> None:
    """Stop the embedded services; their data stays under the data dir."""
    from app.embedded.services import stop_services

    _print(stop_services(_settings(data_dir)))


def register(cli: typer.Typer) -> None:
    cli.add_typer(services_cli, name="services")
