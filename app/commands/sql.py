"""``wsrl sql "SELECT ..."``: read-only SQL for people (see :mod:`app.db.readonly`)."""

from __future__ import annotations

import csv
import json
import sys
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from app.config import ServicesNotRunningError, get_settings

# Piped output is not cut to 80 columns: tables of trajectories are wide.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, soft_wrap=True)


class OutputFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def sql(
    statement: str = typer.Argument(..., help="One SQL statement, e.g. SELECT * FROM trajectories"),
    output: OutputFormat = typer.Option(OutputFormat.TABLE, "--format", "-f", help="Output."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.001, help="Statement timeout in seconds (default: settings)."
    ),
) -> None:
    """Run one read-only statement (logged in as wsrl_readonly, rolled back); writes are
    refused."""
    from app.db.readonly import QueryError, ReadOnlyViolation, run_readonly

    settings = get_settings()
    try:
        result = run_readonly(
            settings.resolved_database_url(),
            statement,
            timeout_s=timeout or settings.sql_statement_timeout_s,
            user=settings.sql_user,
            password=settings.sql_password,
        )
    except (ServicesNotRunningError, ReadOnlyViolation, QueryError) as exc:
        err_console.print(f"[red]Error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc
    if output is OutputFormat.JSON:
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        sys.stdout.write(json.dumps(rows, default=str, indent=2) + "\n")
    elif output is OutputFormat.CSV:
        writer = csv.writer(sys.stdout)
        writer.writerow(result.columns)
        writer.writerows([_cell(value) for value in row] for row in result.rows)
    else:
        table = Table(*result.columns, show_lines=False)
        for row in result.rows:
            table.add_row(*(_cell(value) for value in row))
        console.print(table)
        console.print(f"({len(result.rows)} rows)", style="dim")


def register(cli: typer.Typer) -> None:
    cli.command("sql")(sql)
