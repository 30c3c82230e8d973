"""``wsrl train --backend verl`` and ``wsrl doctor --backend verl`` (its entry in
:data:`trainer.backends.BACKENDS`): compose the config, start Ray, run the trainer in a
task actor.

The options typed on ``wsrl train`` become Hydra overrides of the named config
(:func:`verl_overrides`), before the user's own ``--override`` (which win).

Mirrors verl's ``main_ppo_v0``: ``run_ppo`` starts Ray and a task-runner actor whose
``run`` builds the workers and the trainer. Ours builds :class:`WebShopPPOTrainer` with the
settings and the metrics logger; its ``fit`` opens the Postgres and Redis connections of
the shared loop inside the actor, since connections do not cross process boundaries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from app.config import Settings, get_settings
from app.core.preflight import Check
from trainer.backends import ConfigValue, StartError
from trainer.backends.verl.config import (
    VERL_KEYS,
    agent_protocol_of,
    check_checkpoint_disk,
    load_config,
    run_config,
    run_overrides,
)
from trainer.backends.verl.doctor import verl_checks
from trainer.config import TINY, RunConfig, tiny_policy_path
from trainer.models import ModelError, resolve_model

logger = logging.getLogger(__name__)


def make_metrics_logger(config: DictConfig) -> Any:
    """The metrics logger of the local backend too (:mod:`trainer.tracking`): the backends
    of ``WSRL_METRICS_LOGGERS`` plus those of verl's ``trainer.logger`` (console aside:
    the step line is logged anyway)."""
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


def _runner_class(run: RunConfig) -> Any:
    """The Ray task runner (defined lazily: importing ray and verl's workers is slow)."""
    import ray

    return ray.remote(task_runner(run))


def task_runner(run: RunConfig) -> type:
    """The task runner's class. It carries ``run``, the run configuration the verl config
    means, to the trainer's process as data: Ray pickles a class defined here by value,
    with what it closes over."""
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from trainer.backends.verl.trainer import WebShopPPOTrainer

    class WebShopTaskRunner(BaseTaskRunner):
        def run(self, config: DictConfig) -> None:
            # A Ray actor is a process of its own: without this, its INFO lines (steps,
            # publications) are never printed, and verl's import has given the root logger
            # verl's format (no logger names).
            from app.config import get_settings
            from app.logging import setup_logging

            setup_logging(replace=True)
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
                run=run,
                metrics=make_metrics_logger(config),
            )
            trainer.init_workers()
            trainer.fit()

    return WebShopTaskRunner


def verl_overrides(run: RunConfig, given: Mapping[str, str]) -> list[str]:
    """The Hydra overrides of the verl config that the fields the user set make (a preset's
    included), then the user's own ``--override`` (which win)."""
    if "model" in given:
        run = replace(run, model=model_path(run.model))
    return [*run_overrides(run, set(given)), *run.verl.overrides]


def model_path(model: str) -> str:
    """``--model`` as ``actor_rollout_ref.model.path``: the tiny policy's folder, a model
    ``wsrl model get`` converted (by name), else as typed (a folder, or a Hugging Face id:
    the preflight's model check says whether it can be had). A known model not converted
    yet stops the start with the command that converts it."""
    data_dir = get_settings().data_dir
    if model == TINY:
        return str(tiny_policy_path(data_dir))
    try:
        found = resolve_model(data_dir, model)
    except ModelError as exc:
        raise StartError(str(exc)) from exc
    return str(found) if found is not None else model


def _load(run: RunConfig, overrides: Sequence[str]) -> DictConfig:
    try:
        return load_config(run.verl.config, overrides)
    except ValueError as exc:  # an unknown or invalid config
        raise StartError(str(exc)) from exc


def resolved_config(run: RunConfig, given: Mapping[str, str]) -> list[ConfigValue]:
    config = _load(run, verl_overrides(run, given))
    user = {o.split("=", 1)[0] for o in run.verl.overrides}
    values = []
    for path, key in VERL_KEYS.items():
        value = OmegaConf.select(config, key)
        source = "--override" if key in user else given.get(path, f"config {run.verl.config}")
        values.append(ConfigValue(key, value, path, source))
    return values


def checks(settings: Settings, run: RunConfig, given: Mapping[str, str]) -> list[Check]:
    return verl_checks(settings, _load(run, verl_overrides(run, given)), run.verl.config)


def train(
    settings: Settings, run: RunConfig, given: Mapping[str, str], echo: Callable[[str], None]
) -> None:
    """`wsrl doctor`'s checks first (unless ``verl.preflight`` is off), before minutes of
    Ray, FSDP and vLLM start-up. Goals may be missing: the trainer loads them on its
    first request."""
    try:
        overrides = verl_overrides(run, given)
        if run.verl.preflight:
            found = [c for c in checks(settings, run, given) if c.name != "goals"]
            if not all(c.ok for c in found):
                raise StartError(
                    "the preflight failed: fix the above (wsrl doctor re-checks), or "
                    "--no-preflight",
                    found,
                )
        run_verl(settings, run.verl.config, overrides)
    except (ValueError, RuntimeError) as exc:
        raise StartError(str(exc)) from exc


def run_verl(settings: Settings, config_name: str, overrides: Sequence[str] = ()) -> None:
    """Trains with verl on GPUs until ``trainer.total_training_steps``."""
    import torch

    config = load_config(config_name, overrides)
    agent_protocol_of(config, settings, config_name)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "the verl backend needs NVIDIA GPUs (vLLM + FSDP); none is visible. Use "
            "`wsrl train --backend local` on CPU, or the compose profile `gpu`."
        )
    check_checkpoint_disk(config)
    from verl.trainer.main_ppo import run_ppo

    logger.info("verl config %s: model %s", config_name, config.actor_rollout_ref.model.path)
    run_ppo(config, task_runner_class=_runner_class(run_config(config)))
