"""``wsrl export goals|trajectories``: datasets for training frameworks, streamed from Postgres."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer
from rich.console import Console

from app.commands import fail
from app.exports.writers import ExportFormat, ExportProgress, TrajectoryForm

if TYPE_CHECKING:
    from app.work_progress import WorkProgress

export_cli = typer.Typer(
    help="Export goals (verl dataset) or trajectories (JSONL, Parquet, Hugging Face dataset)."
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

OutOption = Annotated[Path, typer.Option("--out", "-o", help="File to write (parents created).")]
FolderOutOption = Annotated[
    Path, typer.Option("--out", "-o", help="File to write; a folder with --format hf.")
]
# What each form's rows are, for the last line.
UNITS = {
    TrajectoryForm.TRAJECTORIES: "trajectories",
    TrajectoryForm.MESSAGES: "replies",
    TrajectoryForm.PREFERENCES: "preference pairs",
}
SplitOption = Annotated[str | None, typer.Option(help="Only goals of this split.")]


@export_cli.command("goals")
def goals(
    out: OutOption,
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f")] = ExportFormat.PARQUET,
    split: SplitOption = None,
) -> None:
    """The goal set as a verl-style RL dataset (prompt, reward_model, extra_info).

    A database without goals is filled from the env server first (``WSRL_ENV_URL``); an
    empty dataset is an error, never a file with no rows.
    """
    from app.config import ServicesNotRunningError, get_settings
    from app.core.enqueue import EnqueueError
    from app.core.env_client import EnvError
    from app.db.session import make_engine, session_scope
    from app.environments.webshop.goals import ensure_goals
    from app.exports.goals import export_goals
    from app.exports.writers import ExportDependencyError
    from app.work_progress import WorkProgress

    if fmt is ExportFormat.HF:
        raise fail(
            "wsrl export goals writes verl's one-file dataset: --format parquet or jsonl "
            "(--format hf is for wsrl export trajectories)",
            code=2,
        )
    settings = get_settings()
    try:
        engine = make_engine(settings, json_deserializer=orjson.loads)
        try:
            with session_scope(engine) as session:
                added = ensure_goals(session, settings, split)
            if added:
                console.print(f"loaded {added} goals from {settings.env_url}")
            with WorkProgress(console, settings.progress_every_s) as progress:
                written = export_goals(
                    engine, out, fmt, split=split, progress=_rows(progress, "goals")
                )
        finally:
            engine.dispose()
    except (ServicesNotRunningError, ExportDependencyError, EnqueueError) as exc:
        raise fail(exc) from exc
    except EnvError as exc:
        raise fail(f"no goals in Postgres and {exc} (start it with `wsrl env serve`)") from exc
    except OSError as exc:
        raise fail(_cannot_write(out, exc)) from exc
    console.print(f"wrote {written} goals to {out}")


@export_cli.command("trajectories")
def trajectories(
    out: FolderOutOption,
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f")] = ExportFormat.JSONL,
    form: Annotated[
        TrajectoryForm,
        typer.Option(
            help="Rows: one per trajectory; one per reply as chat messages (TRL SFT); one "
            "pair per group, its best and worst episode (TRL DPO)."
        ),
    ] = TrajectoryForm.TRAJECTORIES,
    min_reward: Annotated[
        float | None, typer.Option(help="Only trajectories with reward >= this.")
    ] = None,
    policy_version: Annotated[
        int | None, typer.Option(help="Only trajectories with a call served by this version.")
    ] = None,
    split: SplitOption = None,
    tokens: Annotated[
        bool, typer.Option("--tokens", help="Include token ids and logprobs of every call.")
    ] = False,
) -> None:
    """Succeeded rollouts (their succeeded attempt only): transcript, actions, reward.

    ``--format hf`` writes a folder that ``datasets.load_dataset(folder)`` reads: a Parquet
    file per goal split and a dataset card (README.md) naming the fields, the policy
    versions and the splits. Nothing matching is an error, never an empty dataset.
    """
    from app.config import ServicesNotRunningError, get_settings
    from app.db.session import make_engine
    from app.exports.forms import export_trajectories
    from app.exports.trajectories import TrajectoryFilter
    from app.exports.writers import EmptyExportError, ExportDependencyError, ExportUsageError
    from app.work_progress import WorkProgress

    filters = TrajectoryFilter(min_reward=min_reward, policy_version=policy_version, split=split)
    try:
        settings = get_settings()
        engine = make_engine(settings, json_deserializer=orjson.loads)
        try:
            phase = "groups" if form is TrajectoryForm.PREFERENCES else "trajectories"
            with WorkProgress(console, settings.progress_every_s) as progress:
                written = export_trajectories(
                    engine, out, fmt, filters, form=form, tokens=tokens,
                    progress=_rows(progress, phase),
                )  # fmt: skip
        finally:
            engine.dispose()
    except ExportUsageError as exc:
        raise fail(exc, code=2) from exc
    except (ServicesNotRunningError, ExportDependencyError, EmptyExportError) as exc:
        raise fail(exc) from exc
    except OSError as exc:
        raise fail(_cannot_write(out, exc)) from exc
    console.print(f"wrote {written} {UNITS[form]} to {out}")


def _rows(progress: WorkProgress, phase: str) -> ExportProgress:
    return lambda written, total: progress.update(phase, written, total)


def _cannot_write(out: Path, exc: OSError) -> str:
    return f"cannot write {out}: {exc.strerror or exc}; nothing was written there"


def register(cli: typer.Typer) -> None:
    cli.add_typer(export_cli, name="export")
