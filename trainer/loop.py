"""The training loop of both backends: wait for complete groups, update, save, commit, publish.

One step, top to bottom:

1. **wait** - top up the queue (:mod:`trainer.scheduler`) and poll Postgres until
   ``batch_groups`` complete, untrained groups within ``max_staleness`` exist.
2. **batch** - load their succeeded rollouts with the LLM calls of the one succeeded
   attempt, leave groups with equal rewards out, and let the backend build its batch
   (:meth:`TrainBackend.prepare`: token-exact samples and advantages, its own way).
3. **update** - one policy update of the backend (announced ``paused`` first when the
   backend cannot serve meanwhile: verl's colocated vLLM sleeps during the update).
4. **checkpoint** - the backend saves step N (atomic, or verl's own checkpoint).
5. **commit** - one transaction: the ``train_steps`` row with the metrics, and every
   rollout of the used groups marked with step N. The marking only touches rollouts that
   are still unmarked and fails the transaction otherwise, so a group is never trained
   twice, even by two trainers on one database.
6. **sync / publish** - publish version v+1 ``paused``, the backend swaps the weights into
   its inference server, publish ``serving`` (:class:`~trainer.publish.Publisher`); the
   phase times are then merged into the step's metrics.
7. **log** - the step's metrics, and every held-out round finished meanwhile, go to the
   metrics logger (:mod:`trainer.tracking`: TensorBoard, W&B, MLflow).

Groups that can never be trained are *retired* in the same transaction: a complete group
whose oldest call is more than ``max_staleness`` versions old (versions only go up, so it
stays stale), or with fewer than ``min_group_rollouts`` succeeded rollouts. Their rollouts
get ``train_step`` = the step that retired them; the step's ``rollouts_used`` counts only
the rollouts trained on, and ``batch/retired_groups`` how many groups were retired.

Restart: step and version come from Postgres (:func:`resume`): numbering continues after
the last committed step, and the restored weights are published again (under a new
version when anything newer was published meanwhile), so versions only go up. Which
weights are restored is the backend's business (:mod:`trainer.backends.local.checkpoints`
for the local one, verl's checkpoints for verl); neither loads a checkpoint newer than
the last committed step.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from redis import Redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.agent import AgentProtocol
from app.core.endpoint import EndpointStatus, next_version, resume_version
from app.core.enqueue import cancel_rollouts
from app.db.lifecycle import UNFINISHED_ROLLOUT_STATUSES, RolloutMode
from app.db.models import Rollout, TrainStep
from app.db.session import session_scope
from trainer.batches import Selection
from trainer.config import RunConfig, TrainerConfig
from trainer.publish import Publisher, committed_step
from trainer.ready_groups import load_ready_groups, record_train_step
from trainer.samples import RolloutRecord
from trainer.scheduler import Scheduler
from trainer.tracking import EvalRounds, MetricsLogger

logger = logging.getLogger(__name__)

ADVISE_AFTER = 3
"""Steps in a row without an update after which the warning says what to change."""


class TrainBackend(Protocol):
    """What the loop needs from a backend: the update and the weights, nothing of Postgres.

    The local backend (:class:`trainer.backends.local.run.LocalBackend`) trains in this process
    and serves on an in-process policy server; verl's
    (:class:`trainer.backends.verl.trainer.VerlBackend`) trains with Ray/FSDP and serves
    from vLLM replicas.
    """

    pauses_serving: bool
    """True when the inference server cannot answer during the update (verl colocated:
    vLLM sleeps); the loop then publishes the current version ``paused`` first."""

    def prepare(
        self, records: Sequence[RolloutRecord], returns: Mapping[str, float]
    ) -> tuple[Any | None, dict[str, float]]:
        """The batch the update takes, built from ``records`` (whole groups, possibly none)
        and their ``returns`` (rollout id -> the loop's :func:`episode_returns`: the backend
        normalises these, never the raw reward), and its metrics; batch None when nothing in
        it can be trained (every sample too long)."""
        ...

    def update(self, batch: Any, step: int, version: int) -> dict[str, float]:
        """One policy update on a prepared batch; the weights become ``version``."""
        ...

    def save(self, step: int, version: int) -> str | None:
        """Checkpoint the updated weights as ``step`` (before it is committed); the path, or
        None when this step saves none."""
        ...

    def swap(self, version: int) -> None:
        """Load the current weights into the inference server(s) (the endpoint is paused)."""
        ...


class AlreadyTrainedError(RuntimeError):
    """Some rollouts of a batch were marked by another step meanwhile; nothing was recorded."""


@dataclass
class LoopOptions:
    """How the loop runs (the algorithm is in :class:`~trainer.config.TrainerConfig`)."""

    checkpoint_dir: Path
    """Where the backend keeps its checkpoints (local: ``<data_dir>/trainer/checkpoints``
    by default; verl: ``trainer.default_local_dir``)."""
    keep_checkpoints: int = 2
    """Committed checkpoints kept on disk (the newest ones; verl:
    ``trainer.max_actor_ckpt_to_keep``)."""
    poll_s: float = 1.0
    """Seconds between looks at Postgres while waiting for complete groups."""
    eval_every: int = 0
    """Queue a held-out evaluation (the scheduler's ``eval_goals``) every this many policy
    versions, and one of the starting weights when the database has no evaluation yet;
    0: never. The ``eval`` episodes run on the same workers, beside the train groups."""
    final_eval_wait_s: float = 600.0
    """How long a run that trained all its steps waits, still serving, for the evaluation
    episodes still queued or running (the last version's round) before it returns."""


@dataclass
class StepResult:
    """What one step did; ``metrics`` is what the ``train_steps`` row holds."""

    step: int
    version: int
    rollouts: int
    metrics: dict[str, Any] = field(default_factory=dict)


def discounted_return(reward: float, policy_steps: int, config: TrainerConfig) -> float:
    """The return GRPO compares: ``reward`` discounted per policy step after the first
    (``TrainerConfig.step_discount``)."""
    return reward * config.step_discount ** max(policy_steps - 1, 0)


def episode_returns(records: Sequence[RolloutRecord], config: TrainerConfig) -> dict[str, float]:
    """Rollout id -> the return both backends build their advantages from (one objective
    whichever backend trains: each normalises these within a group with verl's estimator)."""
    return {r.rollout_id: discounted_return(r.reward, len(r.calls), config) for r in records}


def batch_metrics(records: Sequence[RolloutRecord], successes: Sequence[bool]) -> dict[str, float]:
    """Reward and success of the rollouts trained on (``successes``: each rollout's
    ``success``, as the worker judged it by its environment's rule)."""
    rewards = [r.reward for r in records]
    return {
        "reward/mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward/std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "reward/success": sum(successes) / len(successes) if successes else 0.0,
        "batch/rollouts": float(len(rewards)),
    }


def successes_of(session: Session, records: Sequence[RolloutRecord]) -> list[bool]:
    """The ``success`` of each rollout of ``records``."""
    ids = [uuid.UUID(r.rollout_id) for r in records]
    found = session.scalars(select(Rollout.success).where(Rollout.id.in_(ids))).all()
    return [bool(s) for s in found]


def commit_step(
    session: Session,
    step: int,
    version: int,
    rollout_ids: Sequence[str],
    selection: Selection,
    metrics: dict[str, Any],
) -> None:
    """The train step row plus the marking of every rollout of its groups (trained and
    retired), in ``session``: :func:`~trainer.ready_groups.record_train_step` after locking
    the groups' rollouts.

    Raises :class:`AlreadyTrainedError` (the caller's transaction rolls back) when a rollout
    of a selected group is already marked.
    """
    groups = [g.group_id for g in (*selection.selected, *selection.discarded)]
    locked = session.execute(
        select(Rollout.id, Rollout.train_step)
        .where(Rollout.group_id.in_([uuid.UUID(g) for g in groups]))
        .with_for_update()
    ).all()
    taken = sum(1 for _, s in locked if s is not None)
    if taken:
        raise AlreadyTrainedError(
            f"step {step}: {taken} rollouts of the batch already belong to another train step"
        )
    record_train_step(session, step, version, rollout_ids, groups, metrics)


def resume(sessions: sessionmaker[Session], checkpoint_version: int | None) -> tuple[int, int]:
    """(last committed step, version to serve restored weights as), from Postgres: a
    restart in any state neither repeats a step number nor moves versions back, whatever
    checkpoint the weights came from (``checkpoint_version`` None: none, or unknown)."""
    with session_scope(sessions) as session:
        return committed_step(session), resume_version(session, checkpoint_version)


def merge_metrics(session: Session, step: int, extra: dict[str, float]) -> None:
    """Adds ``extra`` to a committed step's metrics (phase times known only after publish)."""
    row = session.get(TrainStep, step, with_for_update=True)
    if row is not None:
        row.metrics = {**row.metrics, **extra}


class TrainLoop:
    """Owns the backend, the served weights and the step counter; see the module docstring."""

    def __init__(
        self,
        config: TrainerConfig,
        options: LoopOptions,
        sessions: sessionmaker[Session],
        backend: TrainBackend,
        publisher: Publisher,
        scheduler: Scheduler | None,
        *,
        step: int,
        version: int,
        metrics: MetricsLogger | None = None,
    ) -> None:
        self.config, self.options, self.sessions = config, options, sessions
        self.backend, self.publisher, self.scheduler = backend, publisher, scheduler
        self.step, self.version = step, version
        self.steps_without_update = 0
        self.metrics = metrics
        self.outages = publisher.outages
        self.eval_rounds = EvalRounds(sessions, metrics) if metrics is not None else None

    # --- start / restart ---------------------------------------------------------------

    def publish_current(self, checkpoint: str | None = None) -> None:
        """Announce the served weights as the current version (at start and after a restart)."""
        self.publisher.publish(self.version, EndpointStatus.SERVING, checkpoint)

    # --- one step ----------------------------------------------------------------------

    def wait_for_batch(
        self, stop: threading.Event, timeout_s: float | None = None
    ) -> tuple[list[RolloutRecord], Selection] | None:
        """Poll until a full batch is ready; None when stopped or timed out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not stop.is_set():
            if self.scheduler is not None:
                self.outages("topping up the queue", self._top_up)
            records, selection = self.outages("looking for ready groups", self._ready_groups)
            if len(selection.selected) >= self.config.batch_groups:
                return records, selection
            if deadline is not None and time.monotonic() >= deadline:
                return None
            stop.wait(self.options.poll_s)
        return None

    def _top_up(self) -> None:
        assert self.scheduler is not None
        with session_scope(self.sessions) as session:
            self.scheduler.top_up(session)

    def _ready_groups(self) -> tuple[list[RolloutRecord], Selection]:
        with session_scope(self.sessions) as session:
            return load_ready_groups(
                session,
                self.version,
                self.config.max_staleness,
                self.config.batch_groups,
                self.config.min_group_rollouts,
            )

    def train_on(
        self, records: list[RolloutRecord], selection: Selection, wait_s: float
    ) -> StepResult:
        """Steps 2-7 of the module docstring on a ready batch."""
        times: dict[str, float] = {"time/wait_s": wait_s}
        started = time.perf_counter()
        learn_from, flat = self._informative(records)
        batch, batch_stats = self.backend.prepare(
            learn_from, episode_returns(learn_from, self.config)
        )
        times["time/batch_s"] = time.perf_counter() - started
        step = self.step + 1
        with session_scope(self.sessions) as session:
            successes = successes_of(session, records)
        metrics: dict[str, Any] = {
            **batch_metrics(records, successes),
            **selection.as_metrics(),
            **batch_stats,
            "batch/retired_groups": float(len(selection.discarded)),
            "batch/zero_variance_groups": float(flat),
        }
        checkpoint: str | None = None
        if batch is not None:
            self.steps_without_update = 0
            version = self._update(batch, step, metrics, times)
            started = time.perf_counter()
            checkpoint = self.backend.save(step, version)
            times["time/checkpoint_s"] = time.perf_counter() - started
        else:  # nothing to learn from: the groups are used up, the weights unchanged
            version = self.version
            metrics["update/skipped"] = 1.0
            self._warn_no_update(step, records, flat, batch_stats)
        metrics["policy/version"] = float(version)
        started = time.perf_counter()
        rollout_ids = [r.rollout_id for r in records]

        def commit() -> None:
            with session_scope(self.sessions) as session:
                if session.get(TrainStep, step) is not None:
                    return  # committed, though the connection dropped before it said so
                commit_step(session, step, version, rollout_ids, selection, {**metrics, **times})

        self.outages(f"committing step {step}", commit)
        times["time/commit_s"] = time.perf_counter() - started
        self.step = step
        if version != self.version:
            self.version = version
            synced = self.publisher.sync(version, checkpoint, lambda: self.backend.swap(version))
            times["time/sync_s"], times["time/publish_s"] = synced.sync_s, synced.publish_s
            if self.options.eval_every and version % self.options.eval_every == 0:
                self._enqueue_eval()
        times["time/step_s"] = sum(v for k, v in times.items() if k != "time/wait_s")
        times["perf/episodes_per_s"] = len(records) / max(wait_s + times["time/step_s"], 1e-9)

        def merge() -> None:
            with session_scope(self.sessions) as session:
                merge_metrics(session, step, times)

        self.outages(f"step {step}'s times", merge)
        metrics.update(times)
        self._log(step, version, metrics, len(records))
        return StepResult(step, version, len(records), metrics)

    def _update(self, batch: Any, step: int, metrics: dict[str, Any], times: dict) -> int:
        """The backend's update; returns the version its weights now are."""

        def next_free() -> int:
            with session_scope(self.sessions) as session:
                return next_version(session, self.version)

        version = self.outages("numbering the next version", next_free)
        if self.backend.pauses_serving:
            self.publisher.publish(self.version, EndpointStatus.PAUSED, None)
        started = time.perf_counter()
        metrics.update(self.backend.update(batch, step, version))
        times["time/update_s"] = time.perf_counter() - started
        return version

    def _log(self, step: int, version: int, metrics: dict[str, Any], rollouts: int) -> None:
        if self.metrics is not None:
            self.metrics.log(metrics, step)
        if self.eval_rounds is not None:
            self.outages("logging held-out rounds", self.eval_rounds.log_finished)
        logger.info(
            "step %d -> v%d: reward %.3f success %.2f on %d rollouts (%.1f s)",
            step,
            version,
            metrics["reward/mean"],
            metrics["reward/success"],
            rollouts,
            metrics["time/step_s"],
        )

    def _enqueue_eval(self, only_if_first: bool = False) -> None:
        scheduler = self.scheduler
        if scheduler is None or not self.options.eval_every:
            return

        def enqueue() -> None:
            with session_scope(self.sessions) as session:
                if only_if_first and session.scalar(
                    select(Rollout.id).where(Rollout.mode == RolloutMode.EVAL).limit(1)
                ):
                    return
                scheduler.enqueue_eval(session)

        self.outages("queueing a held-out round", enqueue)

    def _warn_no_update(
        self, step: int, records: list[RolloutRecord], flat: int, stats: dict[str, Any]
    ) -> None:
        """Say why a step made no update (its weights and version stay as they were), and
        after a few in a row what to change."""
        self.steps_without_update += 1
        groups = len({r.group_id for r in records})
        if flat == groups:
            rewards = ", ".join(f"{r:g}" for r in sorted({round(r.reward, 3) for r in records}))
            why = (
                f"in each of its {groups} groups every rollout scored the same (rewards "
                f"{rewards}): no advantage to learn from (algorithm.skip_zero_variance)"
            )
            if self.steps_without_update >= ADVISE_AFTER:
                why += (
                    ". A policy that scores the same on every try of a goal cannot improve "
                    "from its own episodes: start its episodes nearer the goal "
                    "(schedule.train_starts item), sample at a higher temperature, or "
                    "start from a policy that sometimes succeeds"
                )
        else:
            dropped = stats.get("samples/dropped_overlength", 0) + stats.get(
                "batch/dropped_overlong", 0
            )
            why = (
                f"no rollout gave a sample to train on ({dropped:.0f} samples over "
                "algorithm.max_sample_tokens; the step's samples/ metrics say more)"
            )
        logger.warning(
            "step %d made no update; the policy stays v%d (%d steps in a row): %s",
            step,
            self.version,
            self.steps_without_update,
            why,
        )

    def _informative(self, records: list[RolloutRecord]) -> tuple[list[RolloutRecord], int]:
        """The records worth a gradient, and how many groups were left out as flat."""
        uses_all = self.config.kl_coef > 0 or self.config.entropy_coef > 0
        if not self.config.skip_zero_variance or uses_all:
            return records, 0
        rewards: dict[str, set[float]] = {}
        for r in records:
            rewards.setdefault(r.group_id, set()).add(r.reward)
        flat = {g for g, values in rewards.items() if len(values) == 1}
        return [r for r in records if r.group_id not in flat], len(flat)

    def run(
        self,
        steps: int | None = None,
        stop: threading.Event | None = None,
        on_step: Callable[[StepResult], None] | None = None,
        wait_timeout_s: float | None = None,
        finish_evaluation: bool = False,
    ) -> list[StepResult]:
        """Train ``steps`` steps (None: until ``stop``); a wait past ``wait_timeout_s`` ends
        the run early. With ``finish_evaluation``, a run that trained all its steps then
        waits for its evaluation episodes still queued or running (the last version's
        round), while its weights are still served, and a run that ends otherwise (stopped,
        no batch in time) does not wait; either way the episodes left are cancelled:
        :meth:`finish_evaluation`."""
        stop = stop or threading.Event()
        self.outages.stop = stop
        results: list[StepResult] = []
        started_at = self._now()
        self._enqueue_eval(only_if_first=True)  # the starting weights' baseline
        while not stop.is_set() and (steps is None or len(results) < steps):
            started = time.perf_counter()
            ready = self.wait_for_batch(stop, wait_timeout_s)
            if ready is None:
                break
            result = self.train_on(*ready, wait_s=time.perf_counter() - started)
            results.append(result)
            if on_step is not None:
                on_step(result)
        if finish_evaluation:
            wait_s = 0.0  # stopped, or no batch came: the trainer is leaving
            if steps is not None and len(results) >= steps:
                wait_s = self.options.final_eval_wait_s
                if wait_timeout_s is not None:
                    wait_s = min(wait_s, wait_timeout_s)
            self.finish_evaluation(stop, started_at, wait_s)
        return results

    def _now(self) -> Any:
        def now() -> Any:
            with session_scope(self.sessions) as session:
                return session.scalar(select(func.now()))

        return self.outages("reading the database's clock", now)

    def finish_evaluation(self, stop: threading.Event, since: Any, timeout_s: float) -> bool:
        """Wait until no evaluation episode queued since ``since`` is queued or running, so
        that the last version's round is played by the weights it evaluates before a
        trainer that exits stops serving them; False when stopped or past ``timeout_s``.
        Then the episodes left are cancelled (:func:`app.core.enqueue.cancel_rollouts`):
        played later, they would meet no server, or another trainer's weights under this
        round's name; what was left is said in the log."""
        if self.scheduler is None or not self.options.eval_every:
            return True
        started = time.monotonic()
        said = False
        unfinished = select(Rollout.id).where(
            Rollout.mode == RolloutMode.EVAL,
            Rollout.status.in_(UNFINISHED_ROLLOUT_STATUSES),
            Rollout.created_at >= since,
        )

        def still_pending() -> list[Any]:
            with session_scope(self.sessions) as session:
                return list(session.scalars(unfinished).all())

        while True:
            pending = self.outages("waiting for the last held-out round", still_pending)
            if not pending:
                if self.eval_rounds is not None:
                    self.outages("logging held-out rounds", self.eval_rounds.log_finished)
                return True
            if stop.is_set() or time.monotonic() - started >= timeout_s:
                break
            if not said:
                logger.info(
                    "waiting for the evaluation of v%d (%d episodes)", self.version, len(pending)
                )
                said = True
            stop.wait(self.options.poll_s)
        with session_scope(self.sessions) as session:
            cancelled = cancel_rollouts(
                session,
                f"cancelled: the trainer stopped at v{self.version} before it was played",
                ids=pending,
            )
        logger.warning(
            "stopping with %d evaluation episodes of v%d unplayed (waited %.0f s); cancelled",
            len(cancelled),
            self.version,
            time.monotonic() - started,
        )
        return False


def build_loop(
    run: RunConfig,
    settings: Settings,
    sessions: sessionmaker[Session],
    redis: Redis,
    backend: TrainBackend,
    options: LoopOptions,
    *,
    step: int,
    version: int,
    endpoint: tuple[str, str],
    protocol: AgentProtocol,
    base_model: str | None = None,
    enqueue: bool = True,
    metrics: MetricsLogger | None = None,
) -> TrainLoop:
    """The loop of a run, either backend's: a scheduler drawing ``run``'s groups and
    evaluations (none when the trainer does not enqueue), a publisher of ``endpoint``
    (base URL, served model name) with the agent ``protocol`` (and a LoRA run's
    ``base_model``), and the loop over ``backend`` from ``step`` at ``version``."""
    scheduler = None
    if enqueue:
        sampling = asdict(run.sampling)
        schedule = run.schedule
        scheduler = Scheduler.for_run(
            settings,
            run.algorithm,
            step,
            environment=schedule.environment,
            split=schedule.split,
            sampling=sampling,
            starts=schedule.train_starts,
            eval_goals=schedule.eval_goals if schedule.eval_every else 0,
            eval_sampling={**sampling, "temperature": schedule.eval_temperature},
        )
    base_url, model_name = endpoint
    publisher = Publisher(sessions, redis, base_url, model_name, protocol, base_model)
    return TrainLoop(
        run.algorithm,
        options,
        sessions,
        backend,
        publisher,
        scheduler,
        step=step,
        version=version,
        metrics=metrics,
    )
