"""The verl backend's preflight: the GPU stack, the model, the checkpoint disk and the
agent settings the workers play with; :func:`verl_checks` adds the services every backend
needs (:mod:`app.core.preflight`).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from app.core.preflight import Check, check, service_checks
from app.environments import WEBSHOP
from trainer.backends.verl.config import (
    agent_protocol_of,
    check_checkpoint_disk,
    needs_flash_attn,
)
from trainer.models import KNOWN_MODELS, resolve_model


def gpu_checks(flash_attn: bool = True) -> list[Check]:
    """GPU visible, driver and CUDA versions, and the GPU stack's imports (flash-attn only
    where the config uses it: :func:`needs_flash_attn`)."""

    def gpu() -> str:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible: the verl backend needs NVIDIA GPUs")
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        return (
            f"{torch.cuda.device_count()} x {', '.join(sorted(names))}, CUDA {torch.version.cuda}"
        )

    def driver() -> str:
        if shutil.which("nvidia-smi") is None:
            raise RuntimeError(
                "nvidia-smi not found: no NVIDIA driver here (a container gets it from the "
                "NVIDIA Container Toolkit, with --gpus)"
            )
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        version = out.stdout.strip().splitlines()[0]
        if int(version.split(".")[0]) < 580:
            raise RuntimeError(f"driver {version} is older than R580, which CUDA 13 needs")
        return f"driver {version}"

    checks = [
        check(
            "GPU",
            gpu,
            "run on a machine with an NVIDIA GPU; in Compose the trainer-gpu service needs "
            "the NVIDIA Container Toolkit (docker run --gpus all nvidia/cuda:13.0.0-base "
            "nvidia-smi must work)",
        ),
        check(
            "NVIDIA driver",
            driver,
            "install driver R580 or newer (CUDA 13), or use CUDA forward compatibility",
        ),
    ]
    modules = [
        ("verl", "use the trainer image (docker/Dockerfile.trainer) or pip install verl==0.9.1"),
        ("vllm", "use the trainer image: vLLM as verl[vllm]==0.9.1 pins it"),
    ]
    if flash_attn:
        modules.append(
            (
                "flash_attn",
                "the config asks for flash_attention_2: build the trainer image with "
                "FLASH_ATTN_WHEEL (flash-attn for its torch and CUDA), or leave "
                "override_config.attn_implementation unset (sdpa without flash-attn)",
            )
        )
    for module, fix in modules:
        checks.append(check(f"import {module}", _importer(module), fix))
    return checks


def _importer(module: str) -> Callable[[], str]:
    def probe() -> str:
        imported = importlib.import_module(module)
        return f"{module} {getattr(imported, '__version__', '')}".strip()

    return probe


def model_check(path: str) -> Check:
    """A local checkpoint folder, or a Hub model in the cache (else it will be downloaded).
    The folder of a known model not converted yet (``<data_dir>/models/NAME``, as the
    ``smollm2`` config names it) fails with the command that converts it."""

    def probe() -> str:
        local = Path(path)
        if not local.exists() and local.parent.name == "models" and local.name in KNOWN_MODELS:
            resolve_model(local.parent.parent, local.name)  # raises ModelError with the fix
        if local.is_dir():
            if not (local / "config.json").is_file():
                raise FileNotFoundError(f"{local} has no config.json")
            return f"local checkpoint {local}"
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return f"{path} in the Hugging Face cache"
        if os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
            # Else vLLM and verl would each try the Hub minutes into the start, and fail.
            raise FileNotFoundError(
                f"{path} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: carry "
                "the model to this host and name its folder"
            )
        return f"{path} not cached: downloaded at start (needs network)"

    return check(
        "model",
        probe,
        "point actor_rollout_ref.model.path at a Hugging Face model id or a checkpoint "
        "folder with config.json; mount the cache at HF_HOME",
    )


def disk_check(config: Any, free_bytes: int | None = None) -> Check:
    def probe() -> str:
        check_checkpoint_disk(config, free_bytes)
        return f"room for the checkpoints in {config.trainer.default_local_dir}"

    return check("checkpoint disk", probe, "see the detail")


def settings_check(settings: Any, config: Any, config_name: str) -> Check:
    """No explicit agent setting of this host contradicts the protocol the config trains
    for (the trainer publishes it; workers play it)."""

    def probe() -> str:
        protocol = agent_protocol_of(config, settings, config_name)
        return f"published with each version: {protocol.describe()}"

    return check("agent settings", probe, "see the detail")


def verl_checks(settings: Any, config: DictConfig, config_name: str) -> list[Check]:
    """Every check of a verl run under ``config`` (named ``config_name``)."""
    return [
        *gpu_checks(flash_attn=needs_flash_attn(config)),
        model_check(str(config.actor_rollout_ref.model.path)),
        disk_check(config),
        settings_check(settings, config, config_name),
        *service_checks(
            settings,
            str(config.webshop.goal_split),
            environment=WEBSHOP.name,
            env_probe=WEBSHOP.env_probe(settings),
        ),
    ]
