"""``wsrl worker|enqueue|reconcile|watch``: the Celery side of rollouts."""

from __future__ import annotations

import os
import time
import uuid
from typing import Annotated

import typer
from rich.console import Console

from app.commands import database_session, fail
from app.config import ServicesNotRunningError, get_settings

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def worker(
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Threads (default: settings).")
    ] = None,
    queues: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated.")] = (
        "rollouts,eval"
    ),
    pool: Annotated[str, typer.Option(help="Celery pool: threads, prefork, solo.")] = "threads",
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    name: Annotated[str | None, typer.Option(help="Node name (default wsrl-<pid>@host).")] = None,
    processes: Annotated[
        int,
        typer.Option(
            "--processes",
            "-p",
            min=1,
            help="Worker processes, each with --concurrency threads; episodes are CPU-bound "
            "Python, so use about one per core.",
        ),
    ] = 1,
) -> None:
    """Run a Celery worker for rollout jobs (wraps `celery worker`)."""
    from app.core.celery import QUEUES
    from workers.celery_app import get_app

    unknown = set(queues.split(",")) - set(QUEUES)
    if unknown:
        raise fail(f"unknown queues {sorted(unknown)}; known: {', '.join(QUEUES)}")
    if processes > 1:
        import sys

        from app.supervisor import node_names, run_processes

        base = [sys.executable, "-m", "app.cli", "worker", "--queues", queues, "--pool", pool]
        base += ["--loglevel", loglevel]
        if concurrency is not None:
            base += ["--concurrency", str(concurrency)]
        names = node_names(name or f"wsrl-{os.getpid()}@%h", processes)
        raise typer.Exit(run_processes([[*base, "--name", node] for node in names]))
    try:
        celery = get_app()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    threads = concurrency or get_settings().worker_concurrency
    celery.worker_main(
        [
            "worker",
            f"--pool={pool}",
            f"--concurrency={threads}",
            f"--queues={queues}",
            f"--loglevel={loglevel}",
            f"--hostname={name or f'wsrl-{os.getpid()}@%h'}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def enqueue(
    split: Annotated[str | None, typer.Option(help="Draw goals from this split.")] = None,
    count: Annotated[
        int | None, typer.Option(min=1, help="Goals to draw (default: all of the split).")
    ] = None,
    group_size: Annotated[int, typer.Option(min=1, help="Rollouts per goal (a GRPO group).")] = 1,
    mode: Annotated[str, typer.Option(help="train or eval.")] = "train",
    start: Annotated[
        str, typer.Option(help="Where the policy starts: search, results or item (an opening).")
    ] = "search",
    goal_ids: Annotated[
        str | None, typer.Option(help="Comma-separated goal ids instead of --split.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the goal draw.")] = None,
    agent_url: Annotated[
        str | None,
        typer.Option(help="External agent URL that plays these rollouts (agent-as-a-service)."),
    ] = None,
) -> None:
    """Create rollouts (COUNT goals x GROUP_SIZE samples) and queue their jobs."""
    from app.core.enqueue import EnqueueError, enqueue_rollouts, reach_broker
    from app.core.env_client import EnvError
    from app.db.session import make_engine, make_sessionmaker, session_scope
    from app.environments.webshop.client import EnvClient
    from app.environments.webshop.goals import sync_goals
    from workers.celery_app import get_app

    settings = get_settings()
    try:
        ids = [int(x) for x in goal_ids.split(",")] if goal_ids else None
    except ValueError as exc:
        raise fail(f"--goal-ids must be comma-separated integers: {goal_ids!r}") from exc
    if ids is None and split is None:
        raise fail("give --split (train, test or eval) or --goal-ids", code=2)
    try:
        engine = make_engine(settings)
        celery = get_app()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    try:
        reach_broker(celery)
        with session_scope(make_sessionmaker(engine)) as session:
            with EnvClient.from_settings(settings) as env:
                added = sync_goals(session, env)
            if added:
                console.print(f"loaded {added} goals from {settings.env_url}")
            rollout_ids = enqueue_rollouts(
                session,
                celery,
                goal_ids=ids,
                split=split,
                count=count,
                group_size=group_size,
                mode=mode,
                start=start,
                settings=settings,
                seed=seed,
                agent_url=agent_url,
            )
    except (EnqueueError, EnvError) as exc:
        raise fail(exc) from exc
    finally:
        engine.dispose()
    console.print(f"queued {len(rollout_ids)} {mode} rollouts")


def cancel(
    rollout_ids: Annotated[
        list[str] | None, typer.Argument(help="Rollout ids (as `wsrl status` and the API show).")
    ] = None,
    mode: Annotated[
        str | None, typer.Option(help="Every unfinished rollout of this mode: train or eval.")
    ] = None,
) -> None:
    """Cancel rollouts not finished: queued ones are never played, running ones not kept."""
    from app.core.enqueue import cancel_rollouts
    from app.db.lifecycle import RolloutMode

    if not rollout_ids and mode is None:
        raise fail("give rollout ids or --mode (train or eval)", code=2)
    ids: list[uuid.UUID] = []
    for value in rollout_ids or ():
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            raise fail(f"not a rollout id: {value!r}", code=2) from None
    try:
        chosen = None if mode is None else RolloutMode(mode)
    except ValueError:
        raise fail(f"--mode must be train or eval, not {mode!r}", code=2) from None
    with database_session() as session:
        cancelled = cancel_rollouts(session, "cancelled: wsrl cancel", ids=ids or None, mode=chosen)
    console.print(f"cancelled {len(cancelled)} rollouts")
    if len(cancelled) < len(ids):
        console.print(f"{len(ids) - len(cancelled)} of the ids given had finished or do not exist")


def reconcile(
    interval: Annotated[
        float | None, typer.Option(help="Seconds between passes (default: settings).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """Re-enqueue rollouts stuck past their deadline; fail those out of attempts."""
    from app.core.redis_client import connect_redis
    from app.db.session import make_engine, make_sessionmaker
    from workers.celery_app import get_app
    from workers.reconciler import reconcile_once, run_loop

    settings = get_settings()
    try:
        engine = make_engine(settings)
        celery = get_app()
        broker = connect_redis(settings)
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    sessions = make_sessionmaker(engine)
    try:
        if once:
            report = reconcile_once(sessions, celery, settings, broker)
            restored = report.endpoint_restored
            console.print(
                f"resent {len(report.resent)} ({report.missing_messages} with no message in "
                f"the broker), failed {len(report.failed)}, attempts marked lost "
                f"{report.lost_attempts}, idempotency keys expired {report.expired_keys}"
                + ("" if restored is None else f", policy endpoint v{restored} restored")
            )
            return
        run_loop(
            sessions,
            celery,
            settings,
            interval_s=interval or settings.reconcile_interval_s,
            redis=broker,
        )
    except KeyboardInterrupt:
        pass
    finally:
        broker.close()
        engine.dispose()


def watch(
    summary_every: Annotated[float, typer.Option(help="Seconds between summary lines.")] = 5.0,
    quiet: Annotated[bool, typer.Option(help="Only the summary, no episode lines.")] = False,
) -> None:
    """Follow the episode logs of all workers live, with a progress summary."""
    from app.core.redis_client import connect_redis
    from app.progress import EpisodeTally, follow, format_message

    settings = get_settings()
    try:
        redis = connect_redis(settings)
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    progress = EpisodeTally()
    last_summary = time.monotonic()
    console.print(f"following {settings.logs_channel} (Ctrl-C stops)")
    try:
        for message in follow(redis, settings.logs_channel):
            if message is not None:
                progress.update(message)
                if not quiet:
                    console.print(format_message(message), markup=False, highlight=False)
            if time.monotonic() - last_summary >= summary_every:
                console.rule(progress.summary())
                last_summary = time.monotonic()
    except KeyboardInterrupt:
        console.rule(progress.summary())


def register(cli: typer.Typer) -> None:
    cli.command("worker")(worker)
    cli.command("enqueue")(enqueue)
    cli.command("cancel")(cancel)
    cli.command("reconcile")(reconcile)
    cli.command("watch")(watch)
