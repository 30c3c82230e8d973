"""``wsrl eval``: score the current policy (or a given endpoint) on a goal split.

The evaluation runs on the pipeline itself: eval rollouts for the first ``--limit`` goals
of the split (the goals ``wsrl env baseline --limit`` plays) go to the ``eval`` queue,
workers play them, and the score is read back from Postgres. Database and Redis are used
directly, so no API server is needed; an env server and workers on ``eval`` are.

``--base-url``/``--model`` publish that endpoint as a new policy version (recorded in
``policy_versions`` exactly like ``PUT /v1/policy``) before the rollouts are queued, so
every LLM call of the evaluation records which endpoint served it. Workers switch to it
from their next call: use it on a deployment that is not training at the same time.

The last line printed is ``score=<0-100> success=<0-100>% episodes=<n>``: score is 100 x
the mean reward, success the share of episodes with reward 1; a rollout that failed
(out of attempts) counts as reward 0.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.commands import fail

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from app.config import Settings

console = Console(stderr=True)
POLL_S = 0.5


@dataclass(frozen=True)
class EvalScore:
    score: float
    success: float
    episodes: int
    failed: int

    def line(self) -> str:
        return f"score={self.score:.1f} success={self.success:.1f}% episodes={self.episodes}"


def score_of(rewards: Sequence[float | None]) -> EvalScore:
    """WebShop's score over finished episodes; ``None`` (a failed rollout) counts as 0."""
    if not rewards:
        return EvalScore(0.0, 0.0, 0, 0)
    values = [r or 0.0 for r in rewards]
    return EvalScore(
        score=100 * sum(values) / len(values),
        success=100 * sum(v == 1.0 for v in values) / len(values),
        episodes=len(values),
        failed=sum(r is None for r in rewards),
    )


def eval_command(
    split: Annotated[str, typer.Option(help="Goal split: test, eval or train.")] = "test",
    limit: Annotated[int, typer.Option(min=1, help="First N goals of the split.")] = 100,
    base_url: Annotated[
        str | None, typer.Option(help="Evaluate this OpenAI-compatible endpoint (with --model).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name served at --base-url.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the episodes.")] = 3600.0,
) -> None:
    """Run eval rollouts on the first LIMIT goals of SPLIT and print the score."""
    from app.config import ServicesNotRunningError, get_settings
    from app.core.enqueue import EnqueueError
    from app.core.env_client import EnvError
    from app.db.session import make_engine, make_sessionmaker
    from workers.celery_app import get_app

    if (base_url is None) != (model is None):
        raise fail("give --base-url and --model together")
    settings = get_settings()
    try:
        engine = make_engine(settings)
        celery = get_app()
    except ServicesNotRunningError as exc:
        raise fail(exc) from exc
    sessions = make_sessionmaker(engine)
    try:
        ids = _enqueue(sessions, celery, settings, split, limit, base_url, model)
        rewards = _wait_with_progress(sessions, ids, timeout)
    except (EnqueueError, EnvError, LookupError) as exc:
        raise fail(exc) from exc
    finally:
        engine.dispose()
    result = score_of(rewards)
    if result.failed:
        console.print(f"{result.failed} episode(s) failed after all attempts (reward 0)")
    typer.echo(result.line())


def _enqueue(
    sessions: sessionmaker[Session],
    celery: object,
    settings: Settings,
    split: str,
    limit: int,
    base_url: str | None,
    model: str | None,
) -> list[uuid.UUID]:
    """Load the split's goals from the env server, publish the endpoint, queue the rollouts."""
    from redis import Redis
    from sqlalchemy import func, select

    from app.core.endpoint import PolicyEndpoint, publish_policy
    from app.core.enqueue import enqueue_rollouts, sync_goals
    from app.core.env_client import EnvClient
    from app.db.lifecycle import RolloutMode
    from app.db.models import Goal, PolicyVersion
    from app.db.session import session_scope

    with session_scope(sessions) as session:
        with EnvClient.from_settings(settings) as env:
            sync_goals(session, env, split=split)
        goal_ids = list(
            session.scalars(
                select(Goal.id).where(Goal.split == split).order_by(Goal.id).limit(limit)
            )
        )
        if not goal_ids:
            raise LookupError(f"split {split!r} has no goals at {settings.env_url}")
        if base_url is not None and model is not None:
            version = (session.scalar(select(func.max(PolicyVersion.version))) or 0) + 1
            redis = Redis.from_url(settings.resolved_redis_url())
            try:
                publish_policy(session, redis, PolicyEndpoint(base_url, model, version))
            finally:
                redis.close()
            console.print(f"published {model} at {base_url} as policy version {version}")
        ids = enqueue_rollouts(
            session, celery, goal_ids=goal_ids, mode=RolloutMode.EVAL.value, settings=settings
        )
    console.print(f"queued {len(ids)} eval rollouts on split {split!r}")
    return ids


def _wait_with_progress(
    sessions: sessionmaker[Session], ids: list[uuid.UUID], timeout: float
) -> list[float | None]:
    """A bar on a terminal, a plain line every 10 s otherwise (:class:`WorkProgress`)."""
    from app.progress import WorkProgress

    with WorkProgress(console) as progress:
        return wait_for_rollouts(
            sessions, ids, timeout, lambda done: progress.update("evaluating", done, len(ids))
        )


def wait_for_rollouts(
    sessions: sessionmaker[Session],
    ids: list[uuid.UUID],
    timeout: float,
    on_progress: Callable[[int], None],
) -> list[float | None]:
    """Poll until every rollout is final; rewards, None for a failed/cancelled rollout.

    Exits with an error naming how many are left when ``timeout`` passes.
    """
    from sqlalchemy import select

    from app.db.lifecycle import FINAL_ROLLOUT_STATUSES, RolloutStatus
    from app.db.models import Rollout

    deadline = time.monotonic() + timeout
    while True:
        with sessions() as session:
            rows = session.execute(
                select(Rollout.status, Rollout.reward).where(Rollout.id.in_(ids))
            ).all()
        done = [row for row in rows if row.status in FINAL_ROLLOUT_STATUSES]
        on_progress(len(done))
        if len(done) == len(ids):
            return [r.reward if r.status == RolloutStatus.SUCCEEDED else None for r in done]
        if time.monotonic() > deadline:
            raise fail(
                f"{len(ids) - len(done)} of {len(ids)} eval rollouts unfinished after "
                f"{timeout:g}s (are workers consuming the 'eval' queue?)"
            )
        time.sleep(POLL_S)


def register(cli: typer.Typer) -> None:
    cli.command("eval")(eval_command)
