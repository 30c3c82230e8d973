"""``wsrl status`` and ``wsrl show``: the pipeline and one trajectory, read for people.

Both read Postgres and Redis directly (the same queries as ``GET /v1/stats`` and
``GET /v1/rollouts/{id}/trajectory``), so they work without the API server.
"""

from __future__ import annotations

import uuid
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.api.dashboard import rollout_url
from app.commands import fail

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
RECENT = 10
SNIPPET = 160


def status(
    ping_timeout: Annotated[float, typer.Option(help="Seconds to wait for worker pings.")] = 1.0,
) -> None:
    """Queues, live workers, rollouts in flight and by status, recent rewards."""
    from sqlalchemy import select

    from app.api.services.stats import by_policy_version, queue_depths, rollouts_by_status
    from app.config import ServicesNotRunningError, get_settings
    from app.core.redis_client import connect_redis
    from app.db.lifecycle import RolloutStatus
    from app.db.models import Rollout
    from app.db.session import make_engine, make_sessionmaker
    from workers.celery_app import get_app

    settings = get_settings()
    try:
        engine = make_engine(settings)
        redis = connect_redis(settings)
        celery = get_app()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    try:
        depths = queue_depths(redis)
        replies = celery.control.inspect(timeout=ping_timeout).ping() or {}
        with make_sessionmaker(engine)() as session:
            statuses = rollouts_by_status(session)
            versions = by_policy_version(session)
            recent = session.execute(
                select(Rollout)
                .where(Rollout.finished_at.is_not(None))
                .order_by(Rollout.finished_at.desc())
                .limit(RECENT)
            ).scalars()
            recent_rows = [
                (str(r.id), r.mode.value, r.goal_id, r.status.value, r.reward, r.policy_version_max)
                for r in recent
            ]
    finally:
        redis.close()
        engine.dispose()

    console.print("queues: " + ", ".join(f"{name}={depth}" for name, depth in depths.items()))
    console.print(
        f"workers: {len(replies)} alive" + (f" ({', '.join(sorted(replies))})" if replies else "")
    )
    console.print(f"in flight: {statuses[RolloutStatus.RUNNING.value]}")
    console.print("rollouts: " + ", ".join(f"{k}={v}" for k, v in statuses.items()))
    if versions:
        table = Table(title="finished episodes by policy version")
        for column in ("version", "episodes", "mean reward", "success"):
            table.add_column(column, justify="right")
        for row in versions:
            table.add_row(
                str(row.policy_version),
                str(row.rollouts),
                _num(row.mean_reward),
                "-" if row.success_rate is None else f"{100 * row.success_rate:.1f}%",
            )
        console.print(table)
    if recent_rows:
        # Lines, not a table: a rollout's URL stays whole for the terminal to link.
        console.print(f"last {len(recent_rows)} finished rollouts (their dashboard pages):")
        for rollout_id, mode, goal, state, reward, version in recent_rows:
            console.print(
                f"  {rollout_url(settings.api_url, rollout_id)}  {mode} goal {goal} {state} "
                f"reward {_num(reward)} v{version}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def show(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id (a UUID).")],
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Attempt number (default: the final one).")
    ] = None,
) -> None:
    """A rollout's trajectory: instruction, each step (action, valid, observation), reward."""
    from app.api.errors import NotFoundError
    from app.api.services.trajectories import load_trajectory
    from app.config import ServicesNotRunningError, get_settings
    from app.db.session import make_engine, make_sessionmaker

    try:
        key = uuid.UUID(rollout_id)
    except ValueError as exc:
        raise fail(f"not a rollout id (UUID): {rollout_id!r}") from exc
    try:
        settings = get_settings()
        engine = make_engine(settings)
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    try:
        with make_sessionmaker(engine)() as session:
            trajectory = load_trajectory(session, key, attempt=attempt)
    except NotFoundError as exc:
        raise fail(exc) from exc
    finally:
        engine.dispose()

    run = trajectory.attempt
    console.print(
        f"[bold]rollout[/bold] {trajectory.rollout_id} ({trajectory.mode.value}, "
        f"goal {trajectory.goal_id}, {trajectory.rollout_status.value})"
    )
    console.print(f"[bold]instruction[/bold] {escape(trajectory.instruction)}", markup=True)
    console.print(
        f"[bold]attempt[/bold] {run.number} {run.status.value}"
        + (f" on {run.worker}" if run.worker else "")
        + (f" - error: {escape(run.error)}" if run.error else "")
    )
    versions = sorted(
        {c.policy_version for c in trajectory.llm_calls if c.policy_version is not None}
    )
    console.print(f"{len(trajectory.llm_calls)} LLM calls, policy versions {versions or '-'}")
    for step in trajectory.steps:
        mark = "valid" if step.valid else "INVALID"
        console.print(
            f"[bold]step {step.index}[/bold] {escape(step.action)}  ({mark}) r={step.reward:g}",
            markup=True,
            highlight=False,
        )
        console.print(f"    {_snippet(step.observation)}", markup=False, highlight=False)
    console.print(f"[bold]reward[/bold] {_num(trajectory.reward)}")
    for name, value in (trajectory.reward_parts or {}).items():
        console.print(f"    {name}: {value}", markup=False, highlight=False)
    console.print(f"dashboard: {rollout_url(settings.api_url, key)}", markup=False, soft_wrap=True)


def _snippet(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= SNIPPET else flat[: SNIPPET - 3] + "..."


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def register(cli: typer.Typer) -> None:
    cli.command("status")(status)
    cli.command("show")(show)
