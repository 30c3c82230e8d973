"""The trainer as real processes: SIGKILL + restart, and Celery workers running through syncs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.processes import WSRL, ServiceProcess, celery_worker, child_env, env_server
from helpers.training_rows import S, add_group
from sqlalchemy import func, select

from app.config import Settings
from app.core.endpoint import read_endpoint
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, Rollout, TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import sync_goals
from trainer.backends.local import checkpoints
from trainer.backends.local.run import start_local_run
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer
from trainer.config import RunConfig, Sampling, Schedule, TrainerConfig
from trainer.loop import LoopOptions

pytestmark = pytest.mark.slow


@pytest.fixture
def sessions(fresh_settings: Settings) -> Iterator:
    engine = make_engine(fresh_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


def _committed(sessions) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.max(TrainStep.step))) or 0)


def _trainer_process(settings: Settings, model: Path, log: Path, steps: int) -> ServiceProcess:
    args = [
        *WSRL, "train", "--backend", "local", "--model", str(model), "--no-enqueue",
        "--group-size", "2", "--batch-groups", "1", "--max-staleness", "100",
        "--poll", "0.1", "--lr", "1e-3", "--steps", str(steps),
    ]  # fmt: skip
    return ServiceProcess(
        name="trainer",
        args=args,
        env=child_env(settings),
        log_path=log,
        ready=lambda p: "trainer: policy" in p.log_text(current_run=True),
    )


def test_sigkilled_trainer_resumes_without_training_a_group_twice(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    with session_scope(sessions) as session:
        groups = [add_group(session, [S, S], version=0) for _ in range(6)]
    first = _trainer_process(fresh_settings, tiny_checkpoint, tmp_path / "t1.log", 6)
    first.start(timeout_s=180)
    deadline = time.monotonic() + 180
    while _committed(sessions) < 2:
        assert first.alive(), first.tail()
        assert time.monotonic() < deadline, first.tail()
        time.sleep(0.02)
    first.kill()  # SIGKILL, most likely in the middle of the next step
    killed_at = _committed(sessions)
    with session_scope(sessions) as session:
        left = session.scalar(
            select(func.count(func.distinct(Rollout.group_id))).where(Rollout.train_step.is_(None))
        )
    assert left == 6 - killed_at
    if left:
        second = _trainer_process(fresh_settings, tiny_checkpoint, tmp_path / "t2.log", left)
        second.start(timeout_s=180)
        assert second.proc is not None and second.proc.wait(180) == 0, second.tail()
        assert f"next step {killed_at + 1}" in second.log_text()
    with session_scope(sessions) as session:
        steps = session.execute(
            select(TrainStep.step, TrainStep.policy_version, TrainStep.rollouts_used).order_by(
                TrainStep.step
            )
        ).all()
        marks = session.execute(select(Rollout.group_id, Rollout.train_step)).all()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6]
    versions = [s.policy_version for s in steps]
    assert versions == sorted(set(versions)), versions  # strictly increasing
    assert all(s.rollouts_used == 2 for s in steps)
    by_group: dict[uuid.UUID, set] = {}
    for group, step in marks:
        by_group.setdefault(group, set()).add(step)
    assert set(by_group) == set(groups)
    assert sorted(next(iter(v)) for v in by_group.values()) == [1, 2, 3, 4, 5, 6]
    saved = checkpoints.list_checkpoints(fresh_settings.data_dir / "trainer" / "checkpoints")
    assert saved[-1].step == 6 and saved[-1].version == versions[-1]


# --- workers keep running through weight syncs -------------------------------------------

TEXTS = [
    "Instruction: i need a red cotton shirt for men, and price lower than 30.00 dollars",
    "search[red cotton shirt] click[b00abc123] click[buy now] click[< prev] click[next >]",
    "You are a shopping agent on WebShop. Reply with exactly one action.",
    "[SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] price: $12.99",
] * 30


@pytest.fixture(scope="module")
def long_context_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random weights with room for whole WebShop prompts (the shared one has 512)."""
    out = tmp_path_factory.mktemp("tiny-long")
    tokenizer = train_tokenizer(TEXTS, 400)
    size = TinySize(400, 32, 2, 2, 64, max_positions=16384)
    build_model(tokenizer, size, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_workers_keep_running_through_syncs(
    fresh_settings: Settings, sessions, long_context_checkpoint: Path, tmp_path: Path
) -> None:
    env = env_server(tmp_path, fresh_settings).start()
    settings = fresh_settings.model_copy(
        update={"env_url": env.url, "max_steps": 3, "llm_max_tokens": 12}
    )
    worker = None
    trainer = None
    try:
        with session_scope(sessions) as session, EnvClient(env.url) as client:
            sync_goals(session, client)
        worker = celery_worker(tmp_path, settings, concurrency=8, name="sync").start()
        # Random weights earn reward 0 everywhere: train on flat groups anyway, so that
        # every step syncs new weights while the worker runs.
        config = TrainerConfig(
            group_size=2, batch_groups=1, max_staleness=1, lr=1e-3, skip_zero_variance=False
        )
        options = LoopOptions(checkpoint_dir=tmp_path / "ckpt", poll_s=0.2)
        run = RunConfig(
            algorithm=config,
            sampling=Sampling(temperature=1.0, max_tokens=12),
            schedule=Schedule(split="test"),
        )
        trainer = start_local_run(settings, run, long_context_checkpoint, options)
        results = trainer.loop.run(steps=3, wait_timeout_s=240)
        assert [r.version for r in results] == [1, 2, 3], worker.tail()
        assert read_endpoint(trainer.redis).version == 3
        # Everything queued or running during the syncs still finishes, and well.
        deadline = time.monotonic() + 240
        while True:
            with session_scope(sessions) as session:
                pending = session.scalar(
                    select(func.count()).where(
                        Rollout.status.in_([RolloutStatus.QUEUED, RolloutStatus.RUNNING])
                    )
                )
            if not pending:
                break
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.5)
        with session_scope(sessions) as session:
            statuses = session.scalars(select(Rollout.status)).all()
            bad_attempts = session.scalar(
                select(func.count()).where(Attempt.status != AttemptStatus.SUCCEEDED)
            )
            syncs = session.scalars(select(TrainStep.created_at)).all()
            spans = session.execute(select(Rollout.started_at, Rollout.finished_at)).all()
            mixed = session.scalar(
                select(func.count()).where(Rollout.policy_version_max > Rollout.policy_version_min)
            )
        assert set(statuses) == {RolloutStatus.SUCCEEDED}
        assert bad_attempts == 0
        through = [s for s in spans if any(s.started_at < t < s.finished_at for t in syncs)]
        assert through or mixed, "no rollout was running while the trainer synced weights"
    finally:
        if trainer is not None:
            trainer.close()
        if worker is not None:
            worker.stop()
        env.stop()
