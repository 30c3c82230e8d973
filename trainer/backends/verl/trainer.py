"""verl's classic ``RayPPOTrainer`` with its generation step replaced by Celery rollouts.

Why the classic trainer and not a v1 one: ``RayPPOTrainer`` hands ``DataProto`` batches
between plain methods (``_compute_old_log_prob``, ``_compute_ref_log_prob``,
``compute_advantage``, ``_update_actor``) and a ``CheckpointEngineManager`` that
sleeps/wakes vLLM and syncs weights. We keep all of them and only write the loop that
calls them (``fit``): one ``DataProto`` built from Postgres replaces one call to
``async_rollout_manager.generate_sequences``. The v1 trainers (``PPOTrainerSync``,
``PPOTrainerSeparateAsync``) move batches through TransferQueue as ``KVBatchMeta`` and
sample from their own ``ReplayBuffer`` fed by verl's agent loop; feeding them our rollouts
would mean writing a TransferQueue producer and a replay-buffer replacement, i.e. patching
more of verl. The cost: ``RayPPOTrainer`` is deprecated in 0.9; the methods we call are
the ones ``main_ppo_v0`` still uses, and the contract tests pin the batch layout.

Modes (``webshop.mode``):

colocated
    vLLM replicas share the training GPUs. Per step: publish ``serving`` -> rollouts run
    -> publish ``paused`` -> sleep replicas -> update -> wake + sync weights -> publish
    ``serving`` with version + 1. Workers wait while paused, so no call sees half-synced
    weights.
async
    Standalone vLLM replicas on their own GPUs keep serving version v while the trainer
    updates; only the weight sync itself is ``paused``. Rollouts that straddle an update
    carry mixed versions and ``webshop.max_staleness`` bounds how old a trained group may be.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage
from verl.trainer.ppo.reward import extract_reward
from verl.utils.config import omega_conf_to_dataclass

from app.core.endpoint import EndpointStatus, PolicyEndpoint
from trainer.backends.verl.dataproto import (
    build_dataproto,
    fitting_samples,
    pad_to_multiple,
    rollout_advantages,
)
from trainer.backends.verl.feed import ReadyBatch, RolloutFeed
from trainer.backends.verl.relay import PortRelay, published_base_url
from trainer.loop import batch_metrics
from trainer.samples import build_samples
from trainer.tracking import MetricsLogger, shared_names

logger = logging.getLogger(__name__)

Publish = Callable[[PolicyEndpoint], None]


def reduce_metric(key: str, values: Any) -> float:
    """One number for a metric verl reports per micro-batch: the maximum of a ``.../max``
    or ``..._max`` metric, the minimum of a ``min`` one, else the mean (averaging a
    maximum would hide the spike it is there to show)."""
    name = key.rsplit("/", 1)[-1]
    if name == "max" or name.endswith("_max"):
        return float(np.max(values))
    if name == "min" or name.endswith("_min"):
        return float(np.min(values))
    return float(np.mean(values))


class GoalSlots(Dataset):
    """A placeholder dataset: ``RayPPOTrainer`` builds dataloaders in ``__init__``, but our
    prompts are goals drawn by the feed, so the loaders are never iterated."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index}


class WebShopPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` whose rollouts come from a :class:`RolloutFeed`."""

    def __init__(
        self,
        *args: Any,
        feed: RolloutFeed,
        publish: Publish,
        metrics: MetricsLogger | None = None,
        **kwargs: Any,
    ) -> None:
        size = int(kwargs["config"].data.train_batch_size)
        kwargs.setdefault("train_dataset", GoalSlots(size))
        kwargs.setdefault("val_dataset", GoalSlots(1))
        kwargs.setdefault("collate_fn", lambda items: items)
        super().__init__(*args, **kwargs)
        self.feed = feed
        self.publish = publish
        self.metrics = metrics
        self.shop = self.config.webshop
        self.version = 0
        self.base_url = ""
        self.relay: PortRelay | None = None

    # --- serving -------------------------------------------------------------------------
    def init_workers(self) -> None:
        """verl's workers; in async mode also standalone vLLM replicas on their own GPUs.
        Then the address workers are given: a relay on ``webshop.endpoint.port`` in front of
        the first replica's server (verl picks that server's port at random)."""
        super().init_workers()
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
        address = self.serving_manager.server_addresses[0]
        port = None if endpoint.port is None else int(endpoint.port)
        if port is not None:
            self.relay = PortRelay(str(endpoint.listen_host), port, address).start()
        advertise = str(endpoint.advertise_host) if endpoint.advertise_host else None
        self.base_url = published_base_url(address, advertise, port, ray.util.get_node_ip_address())
        logger.info("workers are sent to %s (vLLM server %s)", self.base_url, address)

    def _endpoint(self, status: EndpointStatus) -> PolicyEndpoint:
        return PolicyEndpoint(
            base_url=self.base_url,
            model=str(self.shop.served_model_name),
            version=self.version,
            status=status,
        )

    def _sync_weights(self) -> None:
        """Push the actor's weights into the serving replicas, announced as ``paused``."""
        self.publish(self._endpoint(EndpointStatus.PAUSED))
        self.serving_checkpoints.update_weights(self.global_steps)
        self.publish(self._endpoint(EndpointStatus.SERVING))

    # --- one step ------------------------------------------------------------------------
    def _collect(self) -> tuple[DataProto, list[str], dict[str, float]]:
        """Waits for enough complete groups and builds the batch (the replaced generation).

        Over-long samples are dropped one by one (``batch/dropped_overlong``); the batch is
        padded to a multiple of verl's mini-batch (``batch/padding_rows``); advantages are
        computed over rollouts, each turn-sample carrying its rollout's.
        """
        groups = int(self.config.data.train_batch_size)
        rollout = self.config.actor_rollout_ref.rollout
        n = int(rollout.n)
        ready = self._wait_for_groups(groups, n)
        rewards = {r.rollout_id: r.reward for r in ready.rollouts}
        max_tokens = int(self.config.data.max_prompt_length + self.config.data.max_response_length)
        samples, stats = build_samples(
            ready.rollouts, rewards, str(self.shop.sample_mode), max_tokens
        )
        if any(s.constraints for s in samples):
            logger.warning(
                "replies decoded under structured_outputs: the verl backend computes their "
                "logprobs without the masks (the local backend replays them; decision 0015)"
            )
        samples, dropped = fitting_samples(samples, rollout.prompt_length, rollout.response_length)
        if not samples:
            raise ValueError(
                f"every sample of this batch is longer than actor_rollout_ref.rollout."
                f"prompt_length={rollout.prompt_length} / response_length="
                f"{rollout.response_length}; raise them or lower WSRL_MAX_STEPS."
            )
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
        batch = rollout_advantages(
            batch,
            rewards,
            {r.rollout_id: r.group_id for r in ready.rollouts},
            compute_advantage,
            adv_estimator=algo.adv_estimator,
            gamma=algo.gamma,
            lam=algo.lam,
            num_repeat=n,
            norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True),
            config=algo,
        )
        metrics = {
            **ready.metrics,
            **stats.as_metrics(),
            **batch_metrics(ready.rollouts),
            "batch/dropped_overlong": float(dropped),
            "batch/padding_rows": float(padding),
        }
        return batch, sorted(rewards), metrics

    def _wait_for_groups(self, groups: int, group_size: int) -> ReadyBatch:
        """Polls the feed until ``groups`` groups are ready, or fewer once nothing is still
        running (groups discarded as stale or failed are replaced by new requests)."""
        split = str(self.shop.goal_split)
        self.feed.request_groups(groups, group_size, split)
        while True:
            ready = self.feed.ready(
                self.version,
                int(self.shop.max_staleness),
                groups,
                int(self.shop.min_group_rollouts),
            )
            have = len({r.group_id for r in ready.rollouts})
            running = ready.metrics.get("batch/incomplete", 0.0) > 0
            if have >= groups or (have > 0 and not running):
                return ready
            if not running:
                self.feed.request_groups(groups - have, group_size, split)
            time.sleep(float(self.shop.poll_interval_s))

    def _train_on(self, batch: DataProto, metrics: dict[str, float]) -> None:
        """verl's own old-logprob, reference, advantage and actor update on ``batch``."""
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        batch.meta_info["images_seqlens"] = []
        if self.config.trainer.balance_batch:
            self._balance_batch(batch, metrics=metrics)
        old_log_prob, _ = self._compute_old_log_prob(batch)
        old_log_prob.batch.pop("entropys", None)
        batch = batch.union(old_log_prob)
        if self.use_reference_policy:
            batch = batch.union(self._compute_ref_log_prob(batch))
        reward_tensor, _ = extract_reward(batch)
        batch.batch["token_level_scores"] = reward_tensor
        batch.batch["token_level_rewards"] = reward_tensor
        # Advantages were computed over rollouts in _collect (rollout_advantages).
        output = self._update_actor(batch)
        for key, values in output.meta_info["metrics"].items():
            metrics[key] = reduce_metric(key, values)

    def fit(self) -> None:
        """Runs ``trainer.total_training_steps`` updates, publishing each new version."""
        self.global_steps = 0
        self._load_checkpoint()  # the checkpoint's step, 0 without one
        checkpoint = self.global_steps or None
        # Step and version come from Postgres: a restart between checkpoints (or in a new
        # container) continues after the last committed step, and versions only go up.
        self.global_steps, self.version = self.feed.resume(checkpoint)
        self.serving_checkpoints.update_weights(self.global_steps)
        self.publish(self._endpoint(EndpointStatus.SERVING))
        try:
            while self.global_steps < self.total_training_steps:
                self._step()
        finally:
            if self.metrics is not None:
                self.metrics.close()
            if self.relay is not None:
                self.relay.stop()

    def _step(self) -> None:
        self.global_steps += 1
        started = time.perf_counter()
        batch, rollout_ids, metrics = self._collect()
        metrics["time/wait_s"] = time.perf_counter() - started
        if self.shop.mode == "colocated":
            self.publish(self._endpoint(EndpointStatus.PAUSED))
            self.checkpoint_manager.sleep_replicas()
        self._train_on(batch, metrics)
        if (
            self.config.trainer.save_freq > 0
            and self.global_steps % self.config.trainer.save_freq == 0
        ):
            self._save_checkpoint()
        self.version += 1
        self._sync_weights()
        self._record(rollout_ids, metrics, time.perf_counter() - started)
        logger.info("step %d -> policy v%d %s", self.global_steps, self.version, _short(metrics))

    def _record(self, rollout_ids: list[str], metrics: dict[str, float], step_s: float) -> None:
        """The step's row and the metrics logger; verl's shared metrics are also written
        under the local backend's names (:mod:`trainer.tracking`), so curves compare."""
        metrics["perf/step_s"] = step_s
        metrics["time/step_s"] = step_s - metrics.get("time/wait_s", 0.0)  # as the local loop
        metrics["perf/episodes_per_s"] = len(rollout_ids) / max(step_s, 1e-9)
        metrics["policy/version"] = float(self.version)
        metrics.update(shared_names(metrics))
        self.feed.record_step(self.global_steps, self.version, rollout_ids, metrics)
        if self.metrics is not None:
            self.metrics.log(metrics, self.global_steps)


def _short(
    metrics: dict[str, float], keys: Sequence[str] = ("reward/mean", "reward/success")
) -> str:
    return " ".join(f"{k}={metrics[k]:.3f}" for k in keys if k in metrics)
