"""Loading the verl configs (smoke, fast, qwen, qwen3b) through hydra, as verl does.

Each YAML under ``configs/`` puts verl's ``ppo_trainer.yaml`` first in its defaults list and
overrides the fields this project needs, plus a ``webshop`` section for our loop (mode,
staleness, turns). :func:`load_config` composes one, resolves it and checks what verl's
``validate_config`` does not know about, with messages that say how to fix the config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from app.core.opening import parse_starts
from trainer.config import TrainerConfig
from trainer.loop import LoopOptions

CONFIG_DIR = Path(__file__).parent / "configs"
CONFIG_NAMES = ("smoke", "fast", "qwen", "qwen3b")
MODES = ("colocated", "async")


def load_config(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The resolved config ``name`` with hydra-style ``overrides`` (``key=value``)."""
    if name not in CONFIG_NAMES:
        raise ValueError(f"unknown verl config {name!r}: use one of {', '.join(CONFIG_NAMES)}.")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose(config_name=name, overrides=list(overrides))
    OmegaConf.resolve(config)
    check_config(config)
    return config


def check_config(config: DictConfig) -> None:
    """Our invariants: a GRPO group needs >= 2 rollouts, async needs its own rollout GPUs."""
    shop = config.webshop
    rollout = config.actor_rollout_ref.rollout
    if shop.mode not in MODES:
        raise ValueError(f"webshop.mode={shop.mode!r}: use one of {', '.join(MODES)}.")
    if shop.max_staleness < 0:
        raise ValueError(f"webshop.max_staleness={shop.max_staleness} must be >= 0.")
    if rollout.n < 2 and config.algorithm.adv_estimator in ("grpo", "rloo"):
        raise ValueError(
            f"actor_rollout_ref.rollout.n={rollout.n} is the GRPO group size; "
            f"{config.algorithm.adv_estimator} needs >= 2 rollouts per goal."
        )
    if not 2 <= shop.min_group_rollouts <= rollout.n:
        raise ValueError(
            f"webshop.min_group_rollouts={shop.min_group_rollouts} must lie in "
            f"[2, rollout.n={rollout.n}]."
        )
    if shop.eval_every < 0 or shop.eval_goals < 1:
        raise ValueError(
            f"webshop.eval_every={shop.eval_every} must be >= 0 (0: never) and "
            f"webshop.eval_goals={shop.eval_goals} >= 1."
        )
    try:
        parse_starts(",".join(shop.train_starts))
    except ValueError as exc:
        raise ValueError(f"webshop.train_starts: {exc}") from None
    if shop.sample_mode not in ("trajectory", "transition"):
        raise ValueError(f"webshop.sample_mode={shop.sample_mode!r}: trajectory or transition.")
    port = shop.endpoint.port
    if port is not None and not (isinstance(port, int) and 1 <= port <= 65535):
        raise ValueError(
            f"webshop.endpoint.port={port!r}: a port in 1-65535 the workers can reach "
            "(Compose publishes TRAINER_POLICY_PORT), or null for verl's random one."
        )
    if shop.mode == "async":
        _check_async(config)


def _check_async(config: DictConfig) -> None:
    rollout = config.actor_rollout_ref.rollout
    if rollout.nnodes < 1 or rollout.n_gpus_per_node < 1:
        raise ValueError(
            "webshop.mode=async serves rollouts from GPUs of their own: set "
            "actor_rollout_ref.rollout.nnodes>=1 and actor_rollout_ref.rollout.n_gpus_per_node>=1."
        )
    if rollout.checkpoint_engine.backend == "naive":
        raise ValueError(
            "webshop.mode=async syncs weights across GPUs: set "
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl."
        )
    if not rollout.free_cache_engine:
        raise ValueError(
            "webshop.mode=async with actor_rollout_ref.rollout.free_cache_engine=false: verl's "
            "classic trainer also starts a vLLM replica on the training GPUs, which then never "
            "releases its weights and KV cache. Leave free_cache_engine=true (the standalone "
            "replicas skip sleep; that one sleeps from start-up on)."
        )
    if config.webshop.max_staleness < 1:
        raise ValueError(
            "webshop.mode=async keeps generating with the previous policy during an update; "
            "with webshop.max_staleness=0 those rollouts would all be discarded. Set it >= 1 "
            "or use webshop.mode=colocated."
        )


def trainer_config(config: DictConfig) -> TrainerConfig:
    """What the shared loop (:mod:`trainer.loop`) and its scheduler read, from the verl
    config: groups of ``rollout.n``, ``data.train_batch_size`` of them per update, the
    ``webshop`` selection rules. The update itself follows verl's own keys."""
    actor = config.actor_rollout_ref.actor
    return TrainerConfig(
        group_size=int(config.actor_rollout_ref.rollout.n),
        batch_groups=int(config.data.train_batch_size),
        max_staleness=int(config.webshop.max_staleness),
        min_group_rollouts=int(config.webshop.min_group_rollouts),
        sample_mode=str(config.webshop.sample_mode),
        adv_estimator=str(config.algorithm.adv_estimator),
        kl_coef=float(actor.kl_loss_coef) if actor.use_kl_loss else 0.0,
        entropy_coef=float(actor.entropy_coeff),
        seed=int(config.data.get("seed") or 0),
    )


def loop_options(config: DictConfig) -> LoopOptions:
    """The shared loop's options: verl's checkpoint folder, the ``webshop`` polling and
    evaluation cadence."""
    shop = config.webshop
    return LoopOptions(
        checkpoint_dir=Path(str(config.trainer.default_local_dir)),
        keep_checkpoints=int(config.trainer.max_actor_ckpt_to_keep or 1),
        poll_s=float(shop.poll_interval_s),
        skip_zero_variance=bool(shop.skip_zero_variance),
        eval_every=int(shop.eval_every),
    )


def check_checkpoint_disk(config: DictConfig, free_bytes: int | None = None) -> None:
    """Refuse to start when the checkpoint folder's disk cannot hold the checkpoints kept
    plus the one being written (``webshop.checkpoint_gib`` each); says what to change."""
    import shutil

    trainer = config.trainer
    if trainer.save_freq is None or trainer.save_freq <= 0:
        return
    folder = Path(str(trainer.default_local_dir))
    probe = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(probe).free if free_bytes is None else free_bytes
    keep = trainer.max_actor_ckpt_to_keep or 1
    needed = (keep + 1) * float(config.webshop.checkpoint_gib) * 2**30
    if free < needed:
        raise ValueError(
            f"{folder} has {free / 2**30:.0f} GiB free; {keep} kept checkpoint(s) plus the one "
            f"being written need about {needed / 2**30:.0f} GiB "
            f"({config.webshop.checkpoint_gib} GiB each). Free disk, point WSRL_DATA_DIR at a "
            "larger volume, lower trainer.max_actor_ckpt_to_keep or raise trainer.save_freq."
        )


ASYNC_OVERRIDES = (
    "webshop.mode=async",
    "webshop.max_staleness=1",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
)
"""Overrides that turn a colocated config into the separate-GPU async one (1 + 1 GPUs).

``free_cache_engine`` stays true: verl's classic trainer always starts a colocated
(hybrid) replica beside the actor and puts it to sleep at the end of ``init_workers``;
sleeping frees its memory only with ``free_cache_engine`` on, and this loop never wakes it
in async mode. The standalone replicas skip sleep and wake-up whatever it says."""
