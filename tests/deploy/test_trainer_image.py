"""The GPU trainer image matches the stack verl's own extras pin. Read from the installed
verl's metadata, so a verl upgrade that changes its pins fails this test until the image
follows. Building it (`make gpu-image`, a quarter of an hour) is not part of the suite;
that the image installs from the GPU lock, and the lock holds verl's pins:
tests/deploy/test_gpu_kit.py."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from helpers.verl_pins import verl_extra_pins

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "docker" / "Dockerfile.trainer").read_text()
LOCK = (ROOT / "docker" / "gpu" / "lock-cp312-cu130.txt").read_text()


def _locked(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)", LOCK, re.M)
    assert found, f"{name} is not in the GPU lock"
    return found.group(1)


def test_the_cuda_libraries_are_those_verls_wheels_are_built_for() -> None:
    # No CUDA base image: the CUDA runtime, cuBLAS, cuDNN and NCCL are the lock's wheels.
    pytest.importorskip("verl")
    extras = metadata.metadata("verl").get_all("Provides-Extra") or []
    cuda = {m.group(1) for e in extras if (m := re.search(r"cu(\d\d)\d", e))}
    assert cuda == {"13"}, extras
    for library in ("nvidia-cuda-runtime", "nvidia-cublas", "nvidia-nccl-cu13"):
        assert _locked(library).startswith("13.") or library.endswith("cu13"), library
    assert "nvidia/cuda" not in DOCKERFILE.split("FROM", 1)[1]


def test_the_base_images_python_is_the_locks() -> None:
    base = re.search(r"^ARG BASE_IMAGE=python:(\d+)\.(\d+)-", DOCKERFILE, re.M)
    assert base and f"cp{base.group(1)}{base.group(2)}" == "cp312"
    assert "for CPython 3.12" in LOCK
    compose = (ROOT / "docker-compose.yml").read_text()
    assert 'BASE_IMAGE: "${PYTHON312_IMAGE:-python:3.12-slim-bookworm}"' in compose


def test_flash_attn_is_optional_and_its_default_wheel_fits_torch_cuda_and_python() -> None:
    # verl routes its flash-attn pin to a prebuilt wheel through uv's sources only; pip
    # reads none of that and would build PyPI's sdist, which imports torch in pip's
    # isolated build: the image build fails. The wheel must match the pin and the image;
    # an empty FLASH_ATTN_WHEEL leaves flash-attn out (the trainer then runs sdpa).
    pytest.importorskip("verl")
    pins = {**verl_extra_pins("vllm"), **verl_extra_pins("fsdp")}
    assert 'if [ -n "$FLASH_ATTN_WHEEL" ]; then' in DOCKERFILE
    wheel = re.search(r"^ARG FLASH_ATTN_WHEEL=(https://\S+\.whl)$", DOCKERFILE, re.M)
    assert wheel, "FLASH_ATTN_WHEEL's default must name a prebuilt wheel"
    name = wheel.group(1).rsplit("/", 1)[1]
    tags = re.fullmatch(
        r"flash_attn-([\d.]+)\+cu(\d+)torch(\d+\.\d+)-(cp\d+)-cp\d+-linux_x86_64\.whl", name
    )
    assert tags, name
    version, cuda, torch, python = tags.groups()
    assert version == pins["flash-attn"]
    assert cuda.startswith(_locked("nvidia-cuda-runtime").split(".")[0])
    assert pins["torch"].startswith(torch + ".") and _locked("torch").startswith(torch + ".")
    assert python == "cp312"
