"""``wsrl train --backend verl``: compose the config, start Ray, run the trainer in a task actor.

Mirrors verl's ``main_ppo_v0``: ``run_ppo`` starts Ray and a task-runner actor whose
``run`` builds the workers and the trainer. Ours builds :class:`WebShopPPOTrainer` with the
settings and the metrics logger; its ``fit`` opens the Postgres and Redis connections of
the shared loop inside the actor, since connections do not cross process boundaries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from trainer.backends.verl.config import agent_protocol_of, check_checkpoint_disk, load_config

logger = logging.getLogger(__name__)


def make_metrics_logger(config: DictConfig) -> Any:
    """The metrics logger of the local backend too (:mod:`trainer.tracking`): the backends
    of ``WSRL_METRICS_LOGGERS`` plus those of verl's ``trainer.logger`` (console aside:
    the step line is logged anyway)."""
    from omegaconf import OmegaConf

    from app.config import get_settings
    from trainer.tracking import MetricsLogger, metrics_dir, parse_backends, run_name

    settings = get_settings()
    names = parse_backends(settings.metrics_loggers)
    names += [str(n) for n in config.trainer.logger if n != "console" and n not in names]
    return MetricsLogger(
        names,
        metrics_dir(settings),
        run_name(f"verl-{config.trainer.experiment_name}"),
        config=OmegaConf.to_container(config, resolve=True),
    )


def _runner_class() -> Any:
    """The Ray task runner (defined lazily: importing ray and verl's workers is slow)."""
    import ray
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from trainer.backends.verl.trainer import WebShopPPOTrainer

    @ray.remote
    class WebShopTaskRunner(BaseTaskRunner):
        def run(self, config: DictConfig) -> None:
            # A Ray actor is a process of its own: without this, its INFO lines (steps,
            # publications) are never printed.
            from app.config import get_settings
            from app.logging import setup_logging

            setup_logging()
            _, worker_group_cls = self.add_actor_rollout_worker(config)
            validate_config(
                config=config,
                use_reference_policy=need_reference_policy(config),
                use_critic=need_critic(config),
            )
            model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
            trainer = WebShopPPOTrainer(
                config=config,
                tokenizer=model.tokenizer,
                processor=model.processor,
                role_worker_mapping=self.role_worker_mapping,
                resource_pool_manager=self.init_resource_pool_mgr(config),
                ray_worker_group_cls=worker_group_cls,
                settings=get_settings(),
                metrics=make_metrics_logger(config),
            )
            trainer.init_workers()
            trainer.fit()

    return WebShopTaskRunner


def train(config_name: str, overrides: Sequence[str] = ()) -> None:
    """Trains with verl on GPUs until ``trainer.total_training_steps``."""
    import torch

    from app.config import get_settings

    config = load_config(config_name, overrides)
    agent_protocol_of(config, get_settings(), config_name)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "the verl backend needs NVIDIA GPUs (vLLM + FSDP); none is visible. Use "
            "`wsrl train --backend local` on CPU, or the compose profile `gpu`."
        )
    check_checkpoint_disk(config)
    from verl.trainer.main_ppo import run_ppo

    logger.info("verl config %s: model %s", config_name, config.actor_rollout_ref.model.path)
    run_ppo(config, task_runner_class=_runner_class())
