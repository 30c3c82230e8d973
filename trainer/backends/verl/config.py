"""Loading the verl configs (smoke, fast, qwen, qwen3b, smollm2) through hydra, as verl does.

Each YAML under ``configs/`` puts verl's ``ppo_trainer.yaml`` first in its defaults list,
then ``run_defaults``: the keys that mean a field of the run configuration
(:data:`VERL_KEYS`), filled from :class:`trainer.config.RunConfig`'s defaults, so a default
is written once, and ``agent_defaults``: the agent protocol's keys at its defaults
(:func:`agent_defaults`). The YAML files then override what this project needs on GPUs, plus a
``webshop`` section for our loop (mode, turns, the endpoint). :func:`load_config` composes
one, resolves it, reads the mapped keys back into the run configuration's classes (their
validation, with the verl key named) and checks what verl's ``validate_config`` does not
know about, with messages that say how to fix the config.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from app.core.agent import (
    DEFAULT_PROTOCOL,
    AgentProtocol,
    AgentProtocolMismatch,
    agent_protocol,
)
from trainer.backends.verl.keys import OPTION_KEYS, VERL_KEYS
from trainer.checkpoint_protocol import BOOTSTRAP_MANIFEST, bootstrapped_protocol
from trainer.config import Lora, RunConfig, Sampling, Schedule, TrainerConfig
from trainer.loop import LoopOptions
from trainer.models import refuse_tools_unrendered

logger = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).parent / "configs"
CONFIG_NAMES = ("smoke", "fast", "qwen", "qwen3b", "smollm2")
MODES = ("colocated", "async")


def _value(run: RunConfig, path: str) -> Any:
    if path == "lora.target_modules":  # peft's form: the string all-linear, or names
        return run.lora.peft_target_modules
    value: Any = run
    for part in path.split("."):
        value = getattr(value, part)
    return list(value) if isinstance(value, tuple) else value


def run_defaults(run: RunConfig | None = None) -> dict[str, Any]:
    """The ``run_defaults`` config node: every :data:`VERL_KEYS` key at ``run``'s value."""
    run = run or RunConfig()
    node: dict[str, Any] = {}
    for path, key in VERL_KEYS.items():
        *parents, leaf = key.split(".")
        target = node
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = _value(run, path)
    return node


def agent_defaults() -> dict[str, Any]:
    """The ``agent_defaults`` config node: the agent protocol's ``webshop`` keys at its
    defaults (:data:`app.core.agent.DEFAULT_PROTOCOL`); a config trained for another
    protocol says so in its ``webshop`` section."""
    protocol = DEFAULT_PROTOCOL
    return {
        "webshop": {
            "agent_mode": str(protocol.mode),
            "history_steps": protocol.history_steps,
            "max_turns": protocol.max_steps,
            "result_refs": str(protocol.result_refs),
        }
    }


def run_overrides(run: RunConfig, paths: set[str]) -> list[str]:
    """Hydra overrides that set the verl keys of the run configuration fields ``paths``."""
    keys = {**VERL_KEYS, **OPTION_KEYS}
    out = []
    for path in sorted(paths):
        if path not in keys:
            continue
        value = _value(run, path)
        if isinstance(value, list):  # Hydra's list syntax; YAML would write a block
            text = "[" + ",".join(str(v) for v in value) + "]"
        elif value is None:
            text = "null"
        else:
            text = OmegaConf.to_yaml({"v": value}).split(":", 1)[1]
        out.append(f"{keys[path]}={text.strip()}")
        if path == "algorithm.batch_groups":  # verl asserts mini-batches divide the batch
            out.append(f"actor_rollout_ref.actor.ppo_mini_batch_size={value}")
    return out


def load_config(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The resolved config ``name`` with hydra-style ``overrides`` (``key=value``)."""
    if name not in CONFIG_NAMES:
        raise ValueError(f"unknown verl config {name!r}: use one of {', '.join(CONFIG_NAMES)}.")
    GlobalHydra.instance().clear()
    ConfigStore.instance().store(name="run_defaults", node=run_defaults())
    ConfigStore.instance().store(name="agent_defaults", node=agent_defaults())
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose(config_name=name, overrides=list(overrides))
    OmegaConf.resolve(config)
    check_config(config)
    if not flash_attn_installed() and without_flash_attn(config):
        logger.info(
            "flash-attn is not installed: verl's actor runs with sdpa attention and padding "
            "kept (the trainer image built with FLASH_ATTN_WHEEL has it)"
        )
    return config


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def needs_flash_attn(config: DictConfig) -> bool:
    """Whether verl's actor loads flash-attn under ``config``: padding removal, or the
    attention it asks transformers for (verl's default: ``flash_attention_2``)."""
    model = config.actor_rollout_ref.model
    attn = (model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")
    return bool(model.get("use_remove_padding")) or attn == "flash_attention_2"


def without_flash_attn(config: DictConfig) -> bool:
    """Where flash-attn is missing, verl's actor runs with ``sdpa`` and padding kept, unless
    the config names an attention itself (then `wsrl doctor` fails on flash-attn with the
    fix). Returns whether ``config`` changed."""
    model = config.actor_rollout_ref.model
    if not needs_flash_attn(config) or "attn_implementation" in (
        model.get("override_config") or {}
    ):
        return False
    with open_dict(model):
        model.use_remove_padding = False
        model.override_config = {
            **(model.get("override_config") or {}),
            "attn_implementation": "sdpa",
        }
    return True


def check_config(config: DictConfig) -> None:
    """Our invariants: a GRPO group needs >= 2 rollouts, async needs its own rollout GPUs."""
    shop = config.webshop
    if shop.mode not in MODES:
        raise ValueError(f"webshop.mode={shop.mode!r}: use one of {', '.join(MODES)}.")
    run_config(config)
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


def run_config(config: DictConfig) -> RunConfig:
    """The run configuration a verl config means (:data:`VERL_KEYS`), validated by the same
    classes as ``wsrl train``'s options; an error names the verl key to change."""
    values: dict[str, dict[str, Any]] = {
        "algorithm": {},
        "sampling": {},
        "schedule": {},
        "lora": {},
    }
    for path, key in VERL_KEYS.items():
        section, name = path.split(".")
        value = OmegaConf.select(config, key)
        if isinstance(value, DictConfig | list) or OmegaConf.is_list(value):
            value = tuple(value)
        elif path == "lora.target_modules" and isinstance(value, str):
            value = (value,)
        values[section][name] = value
    actor = config.actor_rollout_ref.actor
    algorithm = values["algorithm"]
    algorithm["kl_coef"] = float(actor.kl_loss_coef) if actor.use_kl_loss else 0.0
    algorithm["seed"] = int(algorithm["seed"] or 0)
    try:
        return RunConfig(
            backend="verl",
            algorithm=TrainerConfig(**algorithm),
            sampling=Sampling(**values["sampling"]),
            schedule=Schedule(**values["schedule"]),
            lora=Lora(**values["lora"]),
        )
    except ValueError as exc:
        raise ValueError(_name_key(str(exc))) from None


def _name_key(message: str) -> str:
    """``group_size=1 ...`` -> ``actor_rollout_ref.rollout.n (group_size)=1 ...``."""
    names = {path.split(".")[1]: key for path, key in VERL_KEYS.items()}
    names["kl_coef"] = "actor_rollout_ref.actor.kl_loss_coef"
    for name in sorted((f.name for f in fields(TrainerConfig)), key=len, reverse=True):
        if name in names and name in message:
            return message.replace(name, f"{names[name]} ({name})", 1)
    others = (f.name for f in (*fields(Sampling), *fields(Schedule), *fields(Lora)))
    for name in sorted(others, key=len, reverse=True):  # eval_temperature before temperature
        if name in message:
            return message.replace(name, f"{names[name]} ({name})", 1)
    return message


def loop_options(config: DictConfig) -> LoopOptions:
    """The shared loop's options: verl's checkpoint folder, the ``webshop`` polling and
    evaluation cadence."""
    shop = config.webshop
    return LoopOptions(
        checkpoint_dir=Path(str(config.trainer.default_local_dir)),
        keep_checkpoints=int(config.trainer.max_actor_ckpt_to_keep or 1),
        poll_s=float(shop.poll_interval_s),
        eval_every=int(shop.eval_every),
        final_eval_wait_s=float(shop.final_eval_wait_s),
    )


def agent_protocol_of(config: DictConfig, settings: Any, name: str = "") -> AgentProtocol:
    """The agent protocol the config trains for, which the trainer publishes with every
    version: ``webshop.agent_mode``, ``webshop.history_steps``, ``webshop.max_turns``,
    ``webshop.result_refs``, and never constrained replies (verl computes logprobs
    without the decoding masks).

    Raises :class:`app.core.agent.AgentProtocolMismatch` when this host's explicit
    ``WSRL_AGENT_*`` / ``WSRL_MAX_STEPS`` settings contradict it (the workers no longer
    need them: they play the published protocol), or for tools mode with a model folder
    whose chat template renders no tools (:func:`trainer.models.refuse_tools_unrendered`)."""
    shop = config.webshop
    refuse_tools_unrendered(
        shop.agent_mode,
        Path(str(config.actor_rollout_ref.model.path)),
        "webshop.agent_mode=tools",
        "Use a text-mode config (smollm2 for SmolLM2) or --override webshop.agent_mode=text.",
    )
    source = f"the verl config {name!r}" if name else "the verl config"
    expected = {
        "mode": str(shop.agent_mode),
        "history_steps": int(shop.history_steps),
        "max_steps": int(shop.max_turns),
        "constrain_actions": False,
        "result_refs": str(shop.result_refs),
    }
    model = Path(str(config.actor_rollout_ref.model.path))
    bootstrapped = bootstrapped_protocol(model)
    keys = {"mode": "agent_mode", "history_steps": "history_steps", "result_refs": "result_refs"}
    for field_name, value in (bootstrapped or {}).items():
        if expected[field_name] != value:
            key = f"webshop.{keys[field_name]}"
            raise AgentProtocolMismatch(
                f"{source} plays {key}={expected[field_name]}, but {model} was bootstrapped "
                f"on {field_name}={value} (its {BOOTSTRAP_MANIFEST}): set {key}={value}."
            )
    return agent_protocol(
        settings,
        f"{source} (webshop.agent_mode, webshop.history_steps, webshop.max_turns, "
        "webshop.result_refs; verl "
        "computes logprobs without the decoding masks, so replies are not constrained)",
        expected,
    )


def lora_base_model(config: DictConfig) -> str | None:
    """The base weights a LoRA run's versions are adapters on (``model.lora_rank`` > 0),
    published with each version; None: whole weights."""
    model = config.actor_rollout_ref.model
    return str(model.path) if int(model.lora_rank or 0) > 0 else None


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
