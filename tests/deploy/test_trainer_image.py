"""The GPU trainer image matches the stack verl's own extras pin (it cannot be built or
run here: no GPU, no CUDA base image). Read from the installed verl's metadata, so a verl
upgrade that changes its pins fails this test until the image follows. That the image
installs from the GPU lock, and the lock holds verl's pins: tests/deploy/test_gpu_kit.py."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from helpers.verl_pins import verl_extra_pins

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "docker" / "Dockerfile.trainer").read_text()


def test_the_cuda_base_matches_the_cuda_verls_wheels_are_built_for() -> None:
    pytest.importorskip("verl")
    extras = metadata.metadata("verl").get_all("Provides-Extra") or []
    cuda = {m.group(1) for e in extras if (m := re.search(r"cu(\d\d)\d", e))}
    assert cuda == {"13"}, extras
    base = re.search(r"ARG CUDA_IMAGE=nvidia/cuda:(\d+)\.", DOCKERFILE)
    assert base and base.group(1) == "13"


def test_flash_attn_comes_as_a_prebuilt_wheel_for_the_images_torch_cuda_and_python() -> None:
    # verl routes its flash-attn pin to a prebuilt wheel through uv's sources only; pip
    # reads none of that and would build PyPI's sdist, which imports torch in pip's
    # isolated build: the image build fails. The wheel must match the pin and the image.
    pytest.importorskip("verl")
    pins = {**verl_extra_pins("vllm"), **verl_extra_pins("fsdp")}
    assert '"flash-attn @ ${FLASH_ATTN_WHEEL}"' in DOCKERFILE
    wheel = re.search(r"^ARG FLASH_ATTN_WHEEL=(https://\S+\.whl)$", DOCKERFILE, re.M)
    assert wheel, "FLASH_ATTN_WHEEL must name a prebuilt wheel"
    name = wheel.group(1).rsplit("/", 1)[1]
    tags = re.fullmatch(
        r"flash_attn-([\d.]+)\+cu(\d+)torch(\d+\.\d+)-(cp\d+)-cp\d+-linux_x86_64\.whl", name
    )
    assert tags, name
    version, cuda, torch, python = tags.groups()
    assert version == pins["flash-attn"]
    assert cuda.startswith(re.search(r"ARG CUDA_IMAGE=nvidia/cuda:(\d+)\.", DOCKERFILE).group(1))
    assert pins["torch"].startswith(torch + ".")
    # the base image's Python (Ubuntu 24.04: 3.12)
    assert "ubuntu24.04" in DOCKERFILE and python == "cp312"
