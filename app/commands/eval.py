"""``wsrl eval``: score the current policy (or a given endpoint) on a goal split.

The evaluation runs on the pipeline itself (:mod:`app.core.evaluation`): eval rollouts for
the first ``--limit`` goals of the split (the goals ``wsrl env baseline --limit`` plays) go
to the ``eval`` queue, workers play them, and the score is read back from Postgres.
Database and Redis are used directly, so no API server is needed; an env server and
workers on ``eval`` are.

``--base-url``/``--model`` publish that endpoint as a new policy version (recorded in
``policy_versions`` exactly like ``PUT /v1/policy``) before the rollouts are queued, so
every LLM call of the evaluation records which endpoint served it. Workers switch to it
from their next call: use it on a deployment that is not training at the same time.

The last line printed is ``score=<0-100> success=<0-100>% episodes=<n> failed=<m>``:
``episodes`` are the rollouts that played to the end, score is 100 x their mean reward and
success the share with reward 1; ``failed`` counts the rollouts that never completed (out
of attempts, cancelled) apart, so an outage cannot pass for a low score. The exit status
is 1 when any of them failed for an infrastructure reason (env, LLM, database, Redis or a
worker unreachable or lost: the score does not measure the policy), with the reasons on
stderr. The wait polls Postgres through outages (an unreachable database is retried until
``--timeout``). Interrupted (Ctrl-C, exit 130) or past ``--timeout`` (exit 1), it cancels
the rollouts it queued that have not finished, so that workers do not play them for
nobody; a Ctrl-C is taken once the step under way is done (the queueing, a poll), never
inside a query, and a second one quits at once.
"""

from __future__ import annotations

import signal
import threading
import uuid
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.commands import fail
from trainer.config import Schedule

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from celery import Celery
    from sqlalchemy.orm import Session, sessionmaker

    from app.config import Settings
    from app.core.evaluation import Outcome

console = Console(stderr=True, soft_wrap=True)


def eval_command(
    split: Annotated[str, typer.Option(help="Goal split: test, eval or train.")] = "test",
    limit: Annotated[int, typer.Option(min=1, help="First N goals of the split.")] = 100,
    base_url: Annotated[
        str | None, typer.Option(help="Evaluate this OpenAI-compatible endpoint (with --model).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name served at --base-url.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the episodes.")] = 3600.0,
    temperature: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Sampling temperature of the episodes; 0 (greedy) as the trainer's held-out "
            "rounds.",
        ),
    ] = Schedule.eval_temperature,
    environment: Annotated[
        str, typer.Option(help="Environment whose goals are played (webshop, babyai).")
    ] = Schedule.environment,
) -> None:
    """Run eval rollouts on the first LIMIT goals of SPLIT and print the score."""
    # Imported here, not at the top: ``wsrl --help`` loads every command module.
    from app.config import ServicesNotRunningError, get_settings
    from app.core.enqueue import EnqueueError
    from app.core.env_client import EnvError
    from app.core.evaluation import EvalStopped, EvalTimeout, score_of
    from app.db.session import make_engine, make_sessionmaker
    from app.environments import UnknownEnvironmentError, get_environment
    from workers.celery_app import get_app

    if (base_url is None) != (model is None):
        raise fail("give --base-url and --model together")
    settings = get_settings()
    try:
        get_environment(environment, settings)
    except UnknownEnvironmentError as exc:
        raise fail(exc, code=2) from exc
    try:
        engine = make_engine(settings)
        celery = get_app()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    sessions = make_sessionmaker(engine)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, _deferred_interrupt(stop))
    try:
        ids = _enqueue(
            sessions, celery, settings, environment, split, limit, base_url, model, temperature
        )
        console.print(f"queued {len(ids)} eval rollouts on split {split!r}")
        try:
            outcomes = _wait_with_progress(sessions, ids, timeout, stop)
        except EvalTimeout:
            _cancel_unfinished(sessions, ids, f"gave up after --timeout {timeout:g}")
            raise
        except EvalStopped:
            _cancel_unfinished(sessions, ids, "was interrupted")
            raise typer.Exit(130) from None
    except (EnqueueError, EnvError, LookupError, EvalTimeout) as exc:
        raise fail(exc) from exc
    finally:
        signal.signal(signal.SIGINT, previous)
        engine.dispose()
    result = score_of(outcomes)
    if result.failed:
        console.print(
            f"{result.failed} of {len(ids)} rollouts did not complete (not in the score), "
            f"{result.infrastructure} for an infrastructure reason:"
        )
        for reason, count in result.reasons.items():
            console.print(f"  {count} x {reason}", highlight=False)
    typer.echo(result.line())
    if result.infrastructure:
        raise typer.Exit(1)


def _deferred_interrupt(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    """A SIGINT handler: the first Ctrl-C sets ``stop``, which the command takes once the
    step under way is done (queueing completes, a poll is not cut inside its query), so
    what it queued is cancelled rather than left half-made; a second one quits at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        console.print(
            "stopping: the eval rollouts queued will be cancelled (Ctrl-C again to quit now)"
        )

    return handler


def _enqueue(
    sessions: sessionmaker[Session],
    celery: Celery,
    settings: Settings,
    environment_name: str,
    split: str,
    limit: int,
    base_url: str | None,
    model: str | None,
    temperature: float,
) -> list[uuid.UUID]:
    """Load the environment's goals (WebShop's from its env server), publish the endpoint,
    queue the rollouts (sampled at ``temperature``, whatever the workers'
    ``WSRL_LLM_TEMPERATURE``)."""
    from app.core.enqueue import reach_broker
    from app.core.evaluation import enqueue_evaluation, publish_for_evaluation, split_goal_ids
    from app.core.redis_client import connect_redis
    from app.db.session import session_scope
    from app.environments import get_environment, goals_of
    from app.environments.webshop.client import EnvClient
    from app.environments.webshop.goals import sync_goals

    environment = get_environment(environment_name, settings)
    reach_broker(celery)
    with session_scope(sessions) as session:
        if environment.goal_rows is None:  # the server lists them: add the ones it gained
            with EnvClient.from_settings(settings) as env:
                sync_goals(session, env, split=split)
        else:
            goals_of(session, settings, environment, split)
        goal_ids = split_goal_ids(session, split, limit, environment.name)
        if base_url is not None and model is not None:
            redis = connect_redis(settings)
            try:
                version = publish_for_evaluation(session, redis, base_url, model)
            finally:
                redis.close()
            console.print(f"published {model} at {base_url} as policy version {version}")
        sampling = {"temperature": temperature}
        ids = enqueue_evaluation(session, celery, goal_ids, settings=settings, sampling=sampling)
    return ids


def _cancel_unfinished(sessions: sessionmaker[Session], ids: list[uuid.UUID], why: str) -> None:
    """Cancel the evaluation's rollouts not played yet, so that workers do not play them for
    nobody (a database that is down is said, not raised: the rollouts then stay queued)."""
    from app.core.enqueue import cancel_rollouts
    from app.db.session import DATABASE_DOWN, session_scope

    try:
        with session_scope(sessions) as session:
            cancelled = cancel_rollouts(session, f"cancelled: `wsrl eval` {why}", ids=ids)
    except DATABASE_DOWN as exc:
        console.print(f"could not cancel the eval rollouts left (database unreachable): {exc}")
        return
    console.print(f"`wsrl eval` {why}: cancelled the {len(cancelled)} eval rollouts not finished")


def _wait_with_progress(
    sessions: sessionmaker[Session],
    ids: list[uuid.UUID],
    timeout: float,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """A bar on a terminal, a plain line every ``WSRL_PROGRESS_EVERY_S`` (10 s) otherwise
    (:class:`WorkProgress`)."""
    from app.config import get_settings
    from app.core import evaluation
    from app.work_progress import WorkProgress

    with WorkProgress(console, get_settings().progress_every_s) as progress:
        return evaluation.wait_for_rollouts(
            sessions,
            ids,
            timeout,
            lambda done: progress.update("evaluating", done, len(ids)),
            say=console.print,
            stop=stop,
        )


def register(cli: typer.Typer) -> None:
    cli.command("eval")(eval_command)
