"""The verl backend in the shared training loop, on real Postgres, Redis and Celery's broker.

``WebShopPPOTrainer.fit`` runs the real :class:`~trainer.loop.TrainLoop` (scheduler,
group selection, commit, resume, publisher, metrics logger) with :class:`VerlBackend`,
and verl's real batch code (``DataProto``, rollout-level GRPO, ``extract_reward``,
``union``). The one stand-in is :class:`NoGpu`: verl's GPU worker groups (FSDP actor,
vLLM replicas, checkpoint engine) cannot start on a CPU machine, so the trainer is made
with ``__new__`` (as in test_verl_dataproto.py) and the methods that call those worker
groups are replaced by recording functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

import redis
from helpers.training_rows import S, add_group, ensure_goal, train_steps_of
from sqlalchemy import select
from transformers import AutoTokenizer
from verl import DataProto

from app.config import Settings
from app.core.agent import AgentMode, AgentProtocol
from app.core.endpoint import read_endpoint
from app.db.lifecycle import RolloutMode
from app.db.models import PolicyVersion, Rollout, TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.backends.verl.config import load_config, run_config
from trainer.backends.verl.trainer import STATE_FILE, WebShopPPOTrainer
from trainer.tracking import MetricsLogger

VERL_UPDATE = {  # what RayPPOTrainer._update_actor reports (verl 0.9), per micro-batch
    "actor/pg_loss": [0.1, 0.3],
    "actor/entropy_loss": [2.0],
    "actor/loss": [0.2],
    "actor/grad_norm": [1.5],
    "actor/pg_clipfrac": [0.0],
    "actor/ppo_kl": [0.0],
    "response_length/max": [3, 8],
}


class NoGpu:
    """Stands in for verl's GPU worker groups and records what they were given: the
    batches of the actor update, the weight syncs (by global step), sleeps of the
    colocated replicas, and the checkpoints saved and loaded."""

    def __init__(self) -> None:
        self.updates: list[DataProto] = []
        self.synced: list[int] = []
        self.sleeps = 0
        self.saved: list[int] = []
        self.loaded: list[str] = []

    def install(self, trainer: WebShopPPOTrainer) -> None:
        trainer._compute_old_log_prob = self.old_log_prob
        trainer._update_actor = self.update_actor
        trainer._save_checkpoint = lambda: self.save(trainer)
        trainer._load_checkpoint = lambda: self.loaded.append(
            str(trainer.config.trainer.resume_from_path)
        )
        trainer.checkpoint_manager = SimpleNamespace(sleep_replicas=self.sleep)
        trainer.serving_checkpoints = SimpleNamespace(update_weights=self.synced.append)

    def old_log_prob(self, batch: DataProto) -> tuple[DataProto, None]:
        return DataProto.from_dict({"old_log_probs": batch.batch["rollout_log_probs"]}), None

    def update_actor(self, batch: DataProto) -> DataProto:
        self.updates.append(batch)
        return DataProto(meta_info={"metrics": VERL_UPDATE})

    def sleep(self) -> None:
        self.sleeps += 1

    def save(self, trainer: WebShopPPOTrainer) -> None:
        folder = Path(trainer.config.trainer.default_local_dir)
        (folder / f"global_step_{trainer.global_steps}" / "actor").mkdir(parents=True)
        self.saved.append(trainer.global_steps)


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: Path):
    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    tok.add_special_tokens({"pad_token": "<|test-pad|>"})
    return tok


@pytest.fixture
def sessions(fresh_settings: Settings) -> Iterator:
    engine = make_engine(fresh_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


def verl_trainer(
    settings: Settings, tokenizer, steps: int, *overrides: str, metrics=None
) -> tuple[WebShopPPOTrainer, NoGpu]:
    """The ``fast`` config on groups of 2, 2 groups a step, a checkpoint every step."""
    config = load_config(
        "fast",
        [
            "actor_rollout_ref.rollout.prompt_length=12",
            "actor_rollout_ref.rollout.response_length=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.rollout.n=2",
            "data.train_batch_size=2",
            "webshop.max_staleness=2",
            "webshop.poll_interval_s=0.05",
            "trainer.balance_batch=false",
            "trainer.save_freq=1",
            f"trainer.default_local_dir={settings.data_dir / 'verl'}",
            f"trainer.total_training_steps={steps}",
            *overrides,
        ],
    )
    trainer = WebShopPPOTrainer.__new__(WebShopPPOTrainer)
    trainer.config, trainer.shop, trainer.tokenizer = config, config.webshop, tokenizer
    trainer.run = run_config(config)
    trainer.settings, trainer.metrics = settings, metrics
    trainer.base_url, trainer.relay = "http://vllm.test:8200/v1", None
    trainer.use_reference_policy = False
    trainer.total_training_steps = steps
    gpu = NoGpu()
    gpu.install(trainer)
    return trainer, gpu


def rollout_ids(sessions, groups: list[uuid.UUID]) -> set[str]:
    with session_scope(sessions) as session:
        rows = session.scalars(select(Rollout.id).where(Rollout.group_id.in_(groups)))
        return {str(r) for r in rows}


def trained_ids(batch: DataProto) -> set[str]:
    return {r for r in batch.non_tensor_batch["rollout_id"] if r != "__pad__"}


def test_verl_steps_commit_skip_flat_groups_and_resume_from_postgres(
    fresh_settings: Settings, sessions, tokenizer, tmp_path: Path
) -> None:
    with session_scope(sessions) as session:
        varied = add_group(session, [S, S], rewards=[1.0, 0.0])
        flat = add_group(session, [S, S], rewards=[0.0, 0.0])
    metrics = MetricsLogger(["tensorboard"], tmp_path / "tb", "verl-test")
    trainer, gpu = verl_trainer(fresh_settings, tokenizer, 1, metrics=metrics)
    trainer.fit()

    # Step 1: the DataProto holds the varied group's rollouts only; both groups are used.
    [batch] = gpu.updates
    assert trained_ids(batch) == rollout_ids(sessions, [varied])
    assert len(batch) % 2 == 0 and "advantages" in batch.batch
    assert gpu.sleeps == 1 and gpu.saved == [1]
    assert gpu.synced == [0, 1]  # the starting weights, then step 1's
    assert train_steps_of(sessions, [varied, flat]) == {varied: {1}, flat: {1}}
    with session_scope(sessions) as session:
        row = session.get(TrainStep, 1)
        assert row.policy_version == 1 and row.rollouts_used == 4
        assert row.metrics["batch/zero_variance_groups"] == 1.0
        assert row.metrics["losses/policy"] == pytest.approx(0.2)  # verl's, shared name
        assert row.metrics["response_length/max"] == 8.0
        assert "batch/padding_rows" in row.metrics and "time/sync_s" in row.metrics
    state = fresh_settings.data_dir / "verl" / "global_step_1" / STATE_FILE
    assert state.is_file()
    client = redis.Redis.from_url(fresh_settings.resolved_redis_url())
    endpoint = read_endpoint(client)
    assert (endpoint.version, endpoint.serving, endpoint.base_url) == (
        1,
        True,
        "http://vllm.test:8200/v1",
    )
    # The fast config's agent protocol, with every version (Redis and Postgres).
    expected = AgentProtocol(
        AgentMode.TOOLS, history_steps=4, constrain_actions=False, max_steps=15
    )
    assert endpoint.protocol == expected
    with session_scope(sessions) as session:
        protocols = session.scalars(select(PolicyVersion.protocol)).all()
        assert protocols == [expected.to_dict()] * 2  # v0 (the start) and v1

    # A crash after step 2's checkpoint but before its commit, then a restart.
    (fresh_settings.data_dir / "verl" / "global_step_2").mkdir()
    with session_scope(sessions) as session:  # one transaction: one created_at
        both_flat = [add_group(session, [S, S], rewards=[1.0, 1.0]) for _ in range(2)]
    with session_scope(sessions) as session:
        later = [add_group(session, [S, S]) for _ in range(2)]
    again, gpu = verl_trainer(fresh_settings, tokenizer, 3)
    again.fit()
    assert gpu.loaded == [str((fresh_settings.data_dir / "verl" / "global_step_1").resolve())]
    assert not (fresh_settings.data_dir / "verl" / "global_step_2" / "actor").exists()
    # Step 2: every group flat, no update, the version stays; step 3 trains the rest.
    [batch] = gpu.updates
    assert trained_ids(batch) == rollout_ids(sessions, later)
    assert gpu.saved == [3] and gpu.synced == [1, 3]
    with session_scope(sessions) as session:
        steps = session.execute(
            select(TrainStep.step, TrainStep.policy_version).order_by(TrainStep.step)
        ).all()
        versions = session.scalars(select(PolicyVersion.version).order_by(PolicyVersion.version))
        assert [tuple(s) for s in steps] == [(1, 1), (2, 1), (3, 2)]
        assert list(versions) == [0, 1, 2]
        assert session.get(TrainStep, 2).metrics["update/skipped"] == 1.0
    assert all(m == {2} for m in train_steps_of(sessions, both_flat).values())
    assert all(m == {3} for m in train_steps_of(sessions, later).values())
    assert read_endpoint(client).version == 2
    client.close()

    from test_tracking import SHARED, scalars

    curves = scalars(metrics.run_dir)
    assert set(curves) >= SHARED, SHARED - set(curves)


def test_the_scheduler_draws_openings_and_queues_evaluations_on_the_verl_path(
    fresh_settings: Settings, sessions, tokenizer
) -> None:
    with session_scope(sessions) as session:
        for goal in (2, 3, 4):
            ensure_goal(session, goal)
        for goal in (11, 12, 13):
            ensure_goal(session, goal, split="test")
        groups = [add_group(session, [S, S]) for _ in range(4)]
    trainer, gpu = verl_trainer(
        fresh_settings,
        tokenizer,
        2,
        "webshop.train_starts=[results,item]",
        "webshop.eval_every=2",
        "webshop.eval_goals=2",
        "webshop.final_eval_wait_s=0",  # no workers play them here
        "webshop.max_tokens=40",
    )
    trainer.fit()
    assert len(gpu.updates) == 2
    assert all(m != {None} for m in train_steps_of(sessions, groups).values())
    with session_scope(sessions) as session:
        rows = session.execute(
            select(Rollout.group_id, Rollout.mode, Rollout.start, Rollout.sampling).where(
                Rollout.group_id.notin_(groups)
            )
        ).all()
    train = [r for r in rows if r.mode == RolloutMode.TRAIN]
    evals = [r for r in rows if r.mode == RolloutMode.EVAL]
    assert train, "the scheduler enqueued no train group"
    by_group: dict[uuid.UUID, set[str]] = {}
    for r in train:
        by_group.setdefault(r.group_id, set()).add(str(r.start))
    assert all(len(starts) == 1 for starts in by_group.values())  # one opening per group
    assert set().union(*by_group.values()) <= {"results", "item"}
    assert all(r.sampling.get("temperature") == 1.0 for r in train)
    # The cap on each LLM call travels with the rollouts (the workers' own 256 before).
    assert all(r.sampling.get("max_tokens") == 40 for r in rows)
    # The starting weights, then version 2 (version 1 is not a multiple of eval_every).
    assert len(evals) == 4 and {str(r.start) for r in evals} == {"search"}
    assert all(r.sampling.get("temperature") == 0.0 for r in evals)


def test_the_task_runner_carries_the_run_configuration_to_its_actor() -> None:
    """The verl entry reads the composed config into a RunConfig once and hands it to the
    trainer in Ray's actor process as data: the actor class, pickled by value as Ray ships
    it, holds it (the trainer no longer re-reads the loop's settings from Hydra)."""
    import pickle

    import cloudpickle

    from trainer.backends.verl.entry import task_runner
    from trainer.config import RunConfig

    def carried(value: object, depth: int = 0) -> list[RunConfig]:
        """The RunConfigs ``value`` (a class, a function) holds in its closures."""
        if isinstance(value, RunConfig):
            return [value]
        if depth > 4:
            return []
        if isinstance(value, type):
            return [r for v in vars(value).values() for r in carried(v, depth + 1)]
        cells = getattr(value, "__closure__", None) or ()
        wrapped = getattr(value, "__wrapped__", None)
        inner = [c.cell_contents for c in cells] + ([wrapped] if wrapped else [])
        return [r for v in inner for r in carried(v, depth + 1)]

    run = run_config(load_config("fast", ["actor_rollout_ref.rollout.n=3"]))
    shipped = pickle.loads(cloudpickle.dumps(task_runner(run)))
    found = carried(shipped)
    assert found and all(r == run for r in found) and found[0].algorithm.group_size == 3
