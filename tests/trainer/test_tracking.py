"""TensorBoard event files of a short local run (the verl backend's curves, written by the
same loop, are checked in test_verl_loop.py): the shared names are all there."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.training_rows import S, add_calls, add_group, ensure_goal

from app.config import Settings
from app.db import migrate
from app.db.lifecycle import PolicyVersionStatus, RolloutMode, RolloutStatus
from app.db.models import PolicyVersion, Rollout
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.webshop.success import is_success
from trainer.backends.local.run import start_local_run
from trainer.config import LocalSection, RunConfig, TrainerConfig
from trainer.loop import LoopOptions
from trainer.tracking import MetricsLogger, parse_backends, round_metrics, wilson_interval

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

CONFIG = TrainerConfig(group_size=2, batch_groups=1, max_staleness=1, lr=1e-3, seed=0)

SHARED = {
    "reward/mean",
    "reward/std",
    "reward/success",
    "losses/policy",
    "losses/entropy",
    "losses/total",
    "actor/grad_norm",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "batch/stale",
    "time/wait_s",
    "time/step_s",
    "perf/episodes_per_s",
    "policy/version",
}


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def add_eval_round(session, version: int, rewards: list[float]) -> None:
    ensure_goal(session, 2, split="test")
    group = uuid.uuid4()
    for reward in rewards:
        rollout = Rollout(
            goal_id=2,
            group_id=group,
            mode=RolloutMode.EVAL,
            status=RolloutStatus.SUCCEEDED,
            reward=reward,
            success=is_success(reward),
            policy_version_min=version,
            policy_version_max=version,
        )
        session.add(rollout)
        session.flush()
        add_calls(session, rollout, version)


@pytest.fixture
def local_run(make_database: Callable[[], str], test_settings: Settings, tmp_path: Path) -> tuple:
    """One step of the local loop on two groups, with a held-out round finishing meanwhile."""
    url = make_database()
    migrate.upgrade(url)
    settings = test_settings.model_copy(update={"database_url": url, "data_dir": tmp_path})
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    with session_scope(sessions) as session:
        session.add(PolicyVersion(version=1, status=PolicyVersionStatus.ACTIVE))
        add_group(session, [S, S], version=1)
    metrics = MetricsLogger(["tensorboard"], tmp_path / "tb", "local-test")
    options = LoopOptions(checkpoint_dir=tmp_path / "ckpt", poll_s=0.1)
    return settings, sessions, engine, metrics, options


def test_local_run_writes_step_and_eval_curves(local_run, tiny_checkpoint: Path) -> None:
    settings, sessions, engine, metrics, options = local_run
    run = RunConfig(algorithm=CONFIG, local=LocalSection(enqueue=False))
    trainer = start_local_run(settings, run, tiny_checkpoint, options, metrics=metrics)
    try:
        with session_scope(sessions) as session:
            add_eval_round(session, trainer.loop.version, [1.0, 0.0, 0.0, 1.0])
        [result] = trainer.loop.run(steps=1, wait_timeout_s=20)
    finally:
        trainer.close()
        engine.dispose()
    curves = scalars(metrics.run_dir)
    assert set(curves) >= SHARED, SHARED - set(curves)
    assert curves["reward/mean"] == [(result.step, pytest.approx(0.75))]
    assert curves["time/step_s"][0][1] == pytest.approx(result.metrics["time/step_s"])
    # The round started on the starting weights: placed at the step before the first.
    assert curves["eval/success"] == [(result.step - 1, pytest.approx(0.5))]
    for name in ("eval/reward_mean", "eval/success_ci_low", "eval/success_ci_high"):
        assert name in curves, name
    assert curves["eval/success_ci_low"][0][1] < 0.5 < curves["eval/success_ci_high"][0][1]


def test_parse_backends_and_a_clear_error() -> None:
    assert parse_backends("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert parse_backends("none") == [] and parse_backends("console") == []
    with pytest.raises(ValueError, match="tensorboard, wandb, mlflow"):
        parse_backends("tensorbored")


def test_round_metrics_have_a_wilson_interval() -> None:
    low, high = wilson_interval(0, 50)
    assert low == 0.0 and 0.05 < high < 0.1
    row = {"episodes": 50, "success_rate": 0.1, "mean_reward": 0.4, "policy_version": 7}
    metrics = round_metrics(row)
    assert metrics["eval/success_ci_low"] < 0.1 < metrics["eval/success_ci_high"]
    assert metrics["eval/policy_version"] == 7.0
