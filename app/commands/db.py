"""``wsrl db upgrade|downgrade|current``: the schema, through Alembic."""

from __future__ import annotations

import typer
from rich.console import Console

from app.commands import fail
from app.config import ServicesNotRunningError, get_settings

db_cli = typer.Typer(help="Database schema (Alembic migrations).")
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _database_url() -> str:
    try:
        return get_settings().resolved_database_url()
    except ServicesNotRunningError as exc:
        err_console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc


@db_cli.command("upgrade")
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    from app.db import migrate
    from app.db.readonly import set_readonly_password

    url = _database_url()
    try:
        migrate.upgrade(url, revision)
    except migrate.MigrationError as exc:
        raise fail(exc) from exc
    settings = get_settings()
    if settings.sql_password:
        set_readonly_password(url, settings.sql_password, settings.sql_user)
        console.print(f"password of {settings.sql_user} set (WSRL_SQL_PASSWORD)")
    console.print(f"database at revision {migrate.current_revision(url) or 'base'}")


@db_cli.command("downgrade")
def downgrade(
    revision: str = typer.Argument("-1", help="Target revision; default one step; 'base'."),
) -> None:
    """Migrate the database down to REVISION (default: one step back)."""
    from app.db import migrate

    url = _database_url()
    try:
        migrate.downgrade(url, revision)
    except migrate.MigrationError as exc:
        raise fail(exc) from exc
    console.print(f"database at revision {migrate.current_revision(url) or 'base'}")


@db_cli.command("current")
def current() -> None:
    """Print the database's revision and the newest one."""
    from app.db import migrate

    url = _database_url()
    revision = migrate.current_revision(url)
    head = migrate.head_revision()
    note = "up to date" if revision == head else f"head is {head}: run `wsrl db upgrade`"
    console.print(f"{revision or 'base'} ({note})")


def register(cli: typer.Typer) -> None:
    cli.add_typer(db_cli, name="db")
