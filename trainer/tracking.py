"""One metrics logger for both backends: TensorBoard event files, W&B and MLflow.

Train steps and held-out evaluation rounds are logged under stable, namespaced names,
the same from the local and the verl backend:

* ``reward/mean``, ``reward/std``, ``reward/success`` - the rollouts trained on;
* ``losses/policy``, ``losses/entropy``, ``losses/kl``, ``losses/total``;
* ``actor/grad_norm``, ``actor/pg_clipfrac``, ``actor/ppo_kl`` (verl's own names);
* ``batch/*``, ``staleness/*``, ``samples/*`` - what the batch was made of;
* ``time/step_s`` and the phase times ``time/*_s``; ``perf/episodes_per_s``;
* ``policy/version``;
* ``eval/reward_mean``, ``eval/success`` with its 95 % Wilson interval
  (``eval/success_ci_low``, ``eval/success_ci_high``) and ``eval/episodes``, placed at the
  train step that produced the policy version the round started on.

Which backends: ``WSRL_METRICS_LOGGERS`` (comma-separated ``tensorboard``, ``wandb``,
``mlflow``; default ``tensorboard``; ``none`` for none). TensorBoard writes under
``WSRL_METRICS_DIR`` (default ``<data_dir>/tensorboard``), one folder per run. W&B and
MLflow go through verl's tracking utility (:class:`verl.utils.tracking.Tracking`), which
reads their usual variables (``WANDB_MODE=offline`` works without network,
``MLFLOW_TRACKING_URI``). The console line per step is printed by the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.intervals import wilson_interval
from app.db.models import TrainStep
from app.db.performance import evaluation_rounds
from app.db.session import session_scope

logger = logging.getLogger(__name__)

BACKENDS = ("tensorboard", "wandb", "mlflow")
PROJECT = "webshop-rl"

VERL_NAMES = {
    "actor/pg_loss": "losses/policy",
    "actor/entropy_loss": "losses/entropy",
    "actor/kl_loss": "losses/kl",
    "actor/loss": "losses/total",
}
"""verl metric (``verl.workers.utils.losses.ppo_loss`` via ``RayPPOTrainer._update_actor``)
-> our name, where both backends measure the same thing."""


def parse_backends(value: str) -> list[str]:
    """``"tensorboard,wandb"`` -> the list; ``none`` or empty -> []; unknown names raise."""
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    names = [n for n in names if n not in ("none", "console")]  # console: always printed
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(
            f"WSRL_METRICS_LOGGERS names {unknown}: use a comma-separated list of "
            f"{', '.join(BACKENDS)} (or none)."
        )
    return list(dict.fromkeys(names))


def metrics_dir(settings: Settings) -> Path:
    """Where the TensorBoard event files of every run go (``tensorboard --logdir`` this)."""
    return settings.metrics_dir or settings.data_dir / "tensorboard"


def run_name(prefix: str) -> str:
    return f"{prefix}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def shared_names(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """verl's metrics with the shared ones (:data:`VERL_NAMES`) also under our names."""
    renamed = {ours: metrics[theirs] for theirs, ours in VERL_NAMES.items() if theirs in metrics}
    return {**metrics, **renamed}


def round_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """One evaluation round (:func:`app.db.performance.evaluation_rounds`) as metrics."""
    episodes = int(row["episodes"])
    success = float(row["success_rate"])
    low, high = wilson_interval(success * episodes, episodes)
    return {
        "eval/reward_mean": float(row["mean_reward"]),
        "eval/success": success,
        "eval/success_ci_low": low,
        "eval/success_ci_high": high,
        "eval/episodes": float(episodes),
        "eval/policy_version": float(row["policy_version"]),
    }


class MetricsLogger:
    """Writes numeric metrics to the configured backends; :meth:`close` flushes them.

    Non-numeric values are left out. With no backend it does nothing, so callers need not
    check. A run is one folder under :func:`metrics_dir`; a resumed run continues its step
    numbers in a new folder, and TensorBoard draws the folders as one family of curves.
    """

    def __init__(
        self,
        backends: Sequence[str],
        log_dir: Path,
        run: str,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.backends = list(backends)
        self.run_dir = log_dir / run
        self._writer: Any = None
        self._tracking: Any = None
        if "tensorboard" in self.backends:
            from torch.utils.tensorboard import SummaryWriter

            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(str(self.run_dir))
        others = [b for b in self.backends if b != "tensorboard"]
        if others:
            from verl.utils.tracking import Tracking

            self._tracking = Tracking(PROJECT, run, default_backend=others, config=config)

    @classmethod
    def from_settings(
        cls, settings: Settings, prefix: str, config: Mapping[str, Any] | None = None
    ) -> MetricsLogger:
        backends = parse_backends(settings.metrics_loggers)
        return cls(backends, metrics_dir(settings), run_name(prefix), config)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        if self._writer is not None:
            for key, value in values.items():
                self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self._tracking is not None:
            self._tracking.log(values, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tracking is not None:
            self._tracking.finish()


class EvalRounds:
    """Logs each held-out evaluation round once, when all its episodes have finished.

    Rounds finished before it started are skipped (they were logged by an earlier run).
    """

    def __init__(self, sessions: sessionmaker[Session], metrics: MetricsLogger) -> None:
        self.sessions, self.metrics = sessions, metrics
        with session_scope(sessions) as session:
            self.logged = {r["created_at"] for r in evaluation_rounds(session) if _finished(r)}

    def log_finished(self) -> int:
        """Log the rounds finished since the last call; how many."""
        with session_scope(self.sessions) as session:
            rounds = [r for r in evaluation_rounds(session) if _finished(r)]
            new = [r for r in rounds if r["created_at"] not in self.logged]
            for row in new:
                self.metrics.log(round_metrics(row), _step_of(session, row["policy_version"]))
                self.logged.add(row["created_at"])
        return len(new)


def _finished(row: Mapping[str, Any]) -> bool:
    return row["unfinished"] == 0


def _step_of(session: Session, version: int) -> int:
    """The train step that produced ``version`` (0: the starting weights)."""
    step = session.scalar(
        select(func.max(TrainStep.step)).where(TrainStep.policy_version <= version)
    )
    return int(step or 0)
