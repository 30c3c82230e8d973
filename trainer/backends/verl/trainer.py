"""verl's classic ``RayPPOTrainer`` with its generation step replaced by Celery rollouts.

Why the classic trainer and not a v1 one: ``RayPPOTrainer`` hands ``DataProto`` batches
between plain methods (``_compute_old_log_prob``, ``_compute_ref_log_prob``,
``_update_actor``) and a ``CheckpointEngineManager`` that sleeps/wakes vLLM and syncs
weights. We keep all of them; advantages are computed over rollouts by the estimator verl's
``compute_advantage`` calls (:mod:`trainer.advantages`, both backends'). The loop that calls
them is the project's one training loop (:class:`trainer.loop.TrainLoop`, the local
backend's too), with :class:`VerlBackend` as its backend: one ``DataProto`` built from
Postgres replaces one call to ``async_rollout_manager.generate_sequences``. The v1 trainers
(``PPOTrainerSync``, ``PPOTrainerSeparateAsync``) move batches through TransferQueue as
``KVBatchMeta`` and sample from their own ``ReplayBuffer`` fed by verl's agent loop; feeding
them our rollouts would mean writing a TransferQueue producer and a replay-buffer
replacement, i.e. patching more of verl. The cost: ``RayPPOTrainer`` is deprecated in 0.9;
the methods we call are the ones ``main_ppo_v0`` still uses, and the contract tests pin the
batch layout.

Modes (``webshop.mode``):

colocated
    vLLM replicas share the training GPUs. Per step: publish ``serving`` -> rollouts run
    -> publish ``paused`` -> sleep replicas -> update -> wake + sync weights -> publish
    ``serving`` with version + 1 (``VerlBackend.pauses_serving``). Workers wait while
    paused, so no call sees half-synced weights.
async
    Standalone vLLM replicas on their own GPUs keep serving version v while the trainer
    updates; only the weight sync itself is ``paused``. Rollouts that straddle an update
    carry mixed versions and ``webshop.max_staleness`` bounds how old a trained group may be.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import open_dict
from redis import Redis
from torch.utils.data import Dataset
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import extract_reward
from verl.utils.config import omega_conf_to_dataclass

from app.config import Settings
from app.core.redis_client import connect_redis
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.goals import ensure_goals
from trainer.advantages import rollout_advantages
from trainer.backends.verl.config import (
    agent_protocol_of,
    loop_options,
    lora_base_model,
)
from trainer.backends.verl.dataproto import (
    build_dataproto,
    fitting_samples,
    pad_to_multiple,
    served_vs_trainer,
    with_rollout_advantages,
)
from trainer.backends.verl.relay import PortRelay, published_base_url
from trainer.backends.verl.startup import startup_lines, timed_calls
from trainer.config import RunConfig
from trainer.loop import TrainLoop, build_loop, resume
from trainer.publish import committed_step
from trainer.samples import RolloutRecord, build_samples
from trainer.tracking import MetricsLogger, shared_names

logger = logging.getLogger(__name__)

STATE_FILE = "wsrl_state.json"
"""Written into verl's ``global_step_<N>`` folder: the step and the policy version of
its weights (verl's checkpoint knows neither our versions nor what was committed)."""


def reduce_metric(key: str, values: Any) -> float:
    """One number for a metric verl reports per mini-batch: the maximum of a ``.../max``,
    ``..._max`` or ``.../max_...`` metric (verl's actor reports
    ``actor/perf/max_memory_allocated_gb``), the minimum of a ``min`` one, else the mean
    (averaging a maximum would hide the spike it is there to show)."""
    name = key.rsplit("/", 1)[-1]
    if name == "max" or name.endswith("_max") or name.startswith("max_"):
        return float(np.max(values))
    if name == "min" or name.endswith("_min") or name.startswith("min_"):
        return float(np.min(values))
    return float(np.mean(values))


def committed_checkpoint(directory: Path, done: int) -> Path | None:
    """The newest ``global_step_<K>`` folder with K <= ``done`` (the last committed step).

    A newer one holds an update whose groups were never marked as trained (the step
    crashed between its checkpoint and its commit); it is deleted, so that step is
    trained again from the previous weights and no group is applied twice.
    """
    usable: tuple[int, Path] | None = None
    for path in directory.glob("global_step_*"):
        number = path.name.removeprefix("global_step_")
        if not number.isdigit():
            continue
        if int(number) > done:
            logger.warning(
                "discarding verl checkpoint %s: its step was never committed (last committed "
                "step %d); it will be trained again from the previous weights",
                path,
                done,
            )
            shutil.rmtree(path, ignore_errors=True)
        elif usable is None or int(number) > usable[0]:
            usable = (int(number), path)
    return usable[1] if usable else None


def checkpoint_version(folder: Path) -> int | None:
    """The policy version saved beside a verl checkpoint (None: unknown)."""
    state = folder / STATE_FILE
    return int(json.loads(state.read_text())["version"]) if state.is_file() else None


class GoalSlots(Dataset):
    """A placeholder dataset: ``RayPPOTrainer`` builds dataloaders in ``__init__``, but our
    prompts are goals drawn by the scheduler, so the loaders are never iterated."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index}


class WebShopPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` trained by the shared loop on rollouts from Postgres."""

    def __init__(
        self,
        *args: Any,
        settings: Settings,
        run: RunConfig,
        metrics: MetricsLogger | None = None,
        **kwargs: Any,
    ) -> None:
        size = int(kwargs["config"].data.train_batch_size)
        kwargs.setdefault("train_dataset", GoalSlots(size))
        kwargs.setdefault("val_dataset", GoalSlots(1))
        kwargs.setdefault("collate_fn", lambda items: items)
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.run = run
        """The run configuration the verl config means, read once where the run started
        (:func:`~trainer.backends.verl.config.run_config`): the loop's groups, sampling
        and schedule come from it, never from the ``webshop`` section again."""
        self.metrics = metrics
        self.shop = self.config.webshop
        self.base_url = ""
        self.relay: PortRelay | None = None

    # --- serving -------------------------------------------------------------------------
    def init_workers(self) -> None:
        """verl's workers; in async mode also standalone vLLM replicas on their own GPUs.
        Then the address workers are given: a relay on ``webshop.endpoint.port`` in front of
        every replica's server (verl picks their ports at random). What verl's part took
        is logged by part (:mod:`trainer.backends.verl.startup`)."""
        from verl.experimental.agent_loop import AgentLoopManager
        from verl.experimental.reward_loop import RewardLoopManager
        from verl.workers.rollout.llm_server import LLMServerManager

        started = time.perf_counter()
        parts = [
            (RewardLoopManager, "__init__", "verl's reward loop workers"),
            (LLMServerManager, "create", "the vLLM servers, launch to ready"),
            (AgentLoopManager, "create", "verl's agent loop workers"),
        ]
        with timed_calls(parts) as calls:
            super().init_workers()
        logger.info(startup_lines(calls, time.perf_counter() - started))
        self.serving_manager = self.llm_server_manager
        self.serving_checkpoints = self.checkpoint_manager
        if self.shop.mode == "async":
            from verl.checkpoint_engine import CheckpointEngineManager
            from verl.workers.rollout.llm_server import LLMServerManager

            self.serving_manager = LLMServerManager.create(
                config=self.config, start_rank=len(self.llm_server_manager.rollout_replicas)
            )
            engine = omega_conf_to_dataclass(
                self.config.actor_rollout_ref.rollout.checkpoint_engine
            )
            self.serving_checkpoints = CheckpointEngineManager(
                config=engine,
                actor_wg=self.actor_rollout_wg,
                replicas=self.serving_manager.get_replicas(),
            )
        self._open_endpoint()

    def _open_endpoint(self) -> None:
        import ray

        endpoint = self.shop.endpoint
        addresses = list(self.serving_manager.server_addresses)
        port = None if endpoint.port is None else int(endpoint.port)
        if port is not None:
            self.relay = PortRelay(str(endpoint.listen_host), port, addresses).start()
        elif len(addresses) > 1:
            logger.warning(
                "webshop.endpoint.port is unset: workers reach only the first of %d vLLM "
                "replicas (%s); set it to spread them over all",
                len(addresses),
                addresses[0],
            )
        advertise = str(endpoint.advertise_host) if endpoint.advertise_host else None
        self.base_url = published_base_url(
            addresses[0], advertise, port, ray.util.get_node_ip_address()
        )
        logger.info("workers are sent to %s (vLLM servers %s)", self.base_url, addresses)

    # --- one step ------------------------------------------------------------------------
    def _batch(
        self, records: Sequence[RolloutRecord], returns: Mapping[str, float]
    ) -> tuple[DataProto | None, dict]:
        """The ``DataProto`` of the selected groups (the replaced generation); None when no
        sample fits.

        Over-long samples are dropped one by one (``batch/dropped_overlong``); the batch is
        padded to a multiple of verl's mini-batch (``batch/padding_rows``); advantages are
        computed over rollouts from the loop's ``returns`` (rollout id -> discounted
        return, :func:`trainer.loop.episode_returns`), each turn-sample carrying its
        rollout's; the return is also the sample's score (``rm_scores``).
        """
        if not records:
            return None, {}
        rollout = self.config.actor_rollout_ref.rollout
        n = int(rollout.n)
        rewards = {r.rollout_id: float(returns[r.rollout_id]) for r in records}
        max_tokens = int(self.config.data.max_prompt_length + self.config.data.max_response_length)
        samples, stats = build_samples(records, rewards, self.run.algorithm.sample_mode, max_tokens)
        if any(s.constraints for s in samples):
            logger.warning(
                "replies decoded under structured_outputs: the verl backend computes their "
                "logprobs without the masks (the local backend replays them; decision 0015)"
            )
        samples, dropped = fitting_samples(samples, rollout.prompt_length, rollout.response_length)
        metrics = {**stats.as_metrics(), "batch/dropped_overlong": float(dropped)}
        if not samples:
            logger.warning(
                "every sample of this batch is longer than actor_rollout_ref.rollout."
                "prompt_length=%s / response_length=%s; raise them or lower WSRL_MAX_STEPS",
                rollout.prompt_length,
                rollout.response_length,
            )
            return None, metrics
        batch = build_dataproto(
            samples,
            rewards,
            self.tokenizer.pad_token_id,
            rollout.prompt_length,
            rollout.response_length,
        )
        mini_batch = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * n
        batch, padding = pad_to_multiple(batch, mini_batch)
        algo = self.config.algorithm
        groups = {r.rollout_id: r.group_id for r in records}
        ids = sorted(rewards)  # every rollout of the groups, those dropped as too long too
        computed = rollout_advantages(
            [rewards[i] for i in ids],
            [groups[i] for i in ids],
            str(algo.adv_estimator),
            bool(algo.get("norm_adv_by_std_in_grpo", True)),
            algo,
        )
        batch = with_rollout_advantages(batch, ids, computed)
        return batch, {**metrics, "batch/padding_rows": float(padding)}

    def _train_on(self, batch: DataProto, metrics: dict[str, float]) -> None:
        """verl's own old-logprob, reference and actor update on ``batch``."""
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        batch.meta_info["images_seqlens"] = []
        if self.config.trainer.balance_batch:
            self._balance_batch(batch, metrics=metrics)
        started = time.perf_counter()
        old_log_prob, _ = self._compute_old_log_prob(batch)
        metrics["timing_s/old_log_prob"] = time.perf_counter() - started
        old_log_prob.batch.pop("entropys", None)
        batch = batch.union(old_log_prob)
        metrics.update(served_vs_trainer(batch))
        if self.use_reference_policy:
            batch = batch.union(self._compute_ref_log_prob(batch))
        reward_tensor, _ = extract_reward(batch)
        batch.batch["token_level_scores"] = reward_tensor
        batch.batch["token_level_rewards"] = reward_tensor
        # Advantages were computed over rollouts in _batch (trainer.advantages).
        started = time.perf_counter()
        output = self._update_actor(batch)
        metrics["timing_s/update_actor"] = time.perf_counter() - started
        for key, values in output.meta_info["metrics"].items():
            metrics[key] = reduce_metric(key, values)

    # --- the run -------------------------------------------------------------------------
    def _restore(self, done: int) -> Path | None:
        """Loads the newest committed checkpoint (``trainer.resume_mode=disable``: none)."""
        if self.config.trainer.resume_mode == "disable":
            return None
        folder = committed_checkpoint(Path(str(self.config.trainer.default_local_dir)), done)
        if folder is None:
            return None
        with open_dict(self.config.trainer):
            self.config.trainer.resume_mode = "resume_path"
            self.config.trainer.resume_from_path = str(folder.resolve())
        self._load_checkpoint()
        return folder

    def fit(self) -> None:
        """Trains until ``trainer.total_training_steps`` steps are committed, in the shared
        loop: resume from Postgres, serve the restored weights, then step by step."""
        engine = make_engine(self.settings, pool_size=4)
        sessions = make_sessionmaker(engine)
        redis = connect_redis(self.settings)
        try:
            loop = self._loop(sessions, redis)
            loop.run(
                steps=max(int(self.total_training_steps) - loop.step, 0), finish_evaluation=True
            )
        finally:
            if self.metrics is not None:
                self.metrics.close()
            if self.relay is not None:
                self.relay.stop()
            redis.close()
            engine.dispose()

    def _loop(self, sessions: Any, redis: Redis) -> TrainLoop:
        """The shared loop with this trainer as its backend, its weights served and published."""
        schedule = self.run.schedule
        with session_scope(sessions) as session:
            ensure_goals(session, self.settings, schedule.split)
            if schedule.eval_every:
                ensure_goals(session, self.settings, "test")
            done = committed_step(session)
        folder = self._restore(done)
        step, version = resume(sessions, checkpoint_version(folder) if folder else None)
        logger.info("verl trainer starts after step %d as policy version %d", step, version)
        self.global_steps = step
        backend = VerlBackend(self)
        backend.swap(version)
        loop = build_loop(
            self.run,
            self.settings,
            sessions,
            redis,
            backend,
            loop_options(self.config),
            step=step,
            version=version,
            endpoint=(self.base_url, str(self.shop.served_model_name)),
            protocol=agent_protocol_of(self.config, self.settings),
            base_model=lora_base_model(self.config),
            metrics=self.metrics,
        )
        loop.publish_current(str(folder) if folder else None)
        return loop


class VerlBackend:
    """:class:`WebShopPPOTrainer` as the shared loop's backend (:class:`trainer.loop.TrainBackend`).

    verl keeps what is verl's: the ``DataProto``, old/reference log-probs, its advantage
    estimator over rollouts, the actor update, its checkpoints, sleeping the colocated
    replicas and syncing weights into them. verl's metrics are also returned under the
    local backend's names (:func:`trainer.tracking.shared_names`), so curves overlay.
    """

    def __init__(self, trainer: WebShopPPOTrainer) -> None:
        self.trainer = trainer
        self.pauses_serving = trainer.shop.mode == "colocated"

    def prepare(
        self, records: Sequence[RolloutRecord], returns: Mapping[str, float]
    ) -> tuple[DataProto | None, dict]:
        return self.trainer._batch(records, returns)

    def update(self, batch: DataProto, step: int, version: int) -> dict[str, float]:
        self.trainer.global_steps = step
        if self.pauses_serving:  # the loop has published "paused"
            self.trainer.checkpoint_manager.sleep_replicas()
        metrics: dict[str, float] = {}
        self.trainer._train_on(batch, metrics)
        return shared_names(metrics)

    def save(self, step: int, version: int) -> str | None:
        """verl's checkpoint every ``trainer.save_freq`` steps, with our step and version."""
        freq = self.trainer.config.trainer.save_freq
        if freq is None or freq <= 0 or step % freq:
            return None
        self.trainer.global_steps = step
        self.trainer._save_checkpoint()
        folder = Path(str(self.trainer.config.trainer.default_local_dir)) / f"global_step_{step}"
        (folder / STATE_FILE).write_text(json.dumps({"step": step, "version": version}))
        return str(folder)

    def swap(self, version: int) -> None:
        """Wake the replicas (colocated) and push the actor's weights into them."""
        self.trainer.serving_checkpoints.update_weights(self.trainer.global_steps)
