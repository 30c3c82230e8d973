"""The verl config's keys that hold run-configuration fields: the one table of them.

Read by the backend registry (what ``--backend verl`` honours: a field with a key here, or
of its own ``verl`` section), by the config loader (``config.py``: the defaults, the typed
options' overrides, the values read back) and by ``--print-config``. Imports nothing, so
the registry stays light.
"""

from __future__ import annotations

VERL_KEYS: dict[str, str] = {
    "algorithm.group_size": "actor_rollout_ref.rollout.n",
    "algorithm.batch_groups": "data.train_batch_size",
    "algorithm.max_staleness": "webshop.max_staleness",
    "algorithm.min_group_rollouts": "webshop.min_group_rollouts",
    "algorithm.skip_zero_variance": "webshop.skip_zero_variance",
    "algorithm.sample_mode": "webshop.sample_mode",
    "algorithm.step_discount": "webshop.step_discount",
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.norm_adv_by_std": "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.loss_mode": "actor_rollout_ref.actor.policy_loss.loss_mode",
    "algorithm.loss_agg_mode": "actor_rollout_ref.actor.loss_agg_mode",
    "algorithm.clip_ratio_low": "actor_rollout_ref.actor.clip_ratio_low",
    "algorithm.clip_ratio_high": "actor_rollout_ref.actor.clip_ratio_high",
    "algorithm.entropy_coef": "actor_rollout_ref.actor.entropy_coeff",
    "algorithm.lr": "actor_rollout_ref.actor.optim.lr",
    "algorithm.seed": "data.seed",
    "sampling.temperature": "actor_rollout_ref.rollout.temperature",
    "sampling.max_tokens": "webshop.max_tokens",
    "schedule.split": "webshop.goal_split",
    "schedule.train_starts": "webshop.train_starts",
    "schedule.eval_every": "webshop.eval_every",
    "schedule.eval_goals": "webshop.eval_goals",
    "schedule.eval_temperature": "webshop.eval_temperature",
    "lora.rank": "actor_rollout_ref.model.lora_rank",
    "lora.alpha": "actor_rollout_ref.model.lora_alpha",
    "lora.target_modules": "actor_rollout_ref.model.target_modules",
}
"""Run configuration field -> the verl config key that holds it. Their defaults come from
:class:`RunConfig` (the ``run_defaults`` node); ``wsrl train --backend verl`` writes the
options the user typed into them."""

OPTION_KEYS: dict[str, str] = {
    "model": "actor_rollout_ref.model.path",
    "steps": "trainer.total_training_steps",
    "local.poll_s": "webshop.poll_interval_s",
    "local.policy_port": "webshop.endpoint.port",
    "local.policy_host": "webshop.endpoint.listen_host",
    "local.advertise_host": "webshop.endpoint.advertise_host",
    "local.checkpoint_dir": "trainer.default_local_dir",
}
"""Options of ``wsrl train`` whose verl keys keep the named configs' values unless typed
(the local backend's defaults do not fit a GPU run: a model, a fixed relay port)."""


HONOURED = frozenset(VERL_KEYS) | frozenset(OPTION_KEYS)
"""The run-configuration paths (besides the top level and the ``verl`` section) that the
verl backend honours."""
