"""The GPU path's trainer side on a real GPU, without vLLM, a Ray cluster or Docker.

Runs ``benchmarks/verl_gpu.py check``: verl's FSDP actor in this machine's GPU through
:class:`WebShopPPOTrainer` (our batch, verl's old log-probs against a transformers
forward, an update through ``_train_on``, ``VerlBackend.save`` then ``_restore``) and the
local backend on ``cuda`` against the policy server's recorded log-probs. Skipped without a
GPU (CI) or without verl.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
@pytest.mark.slow
def test_verl_actor_and_local_backend_on_the_gpu() -> None:
    pytest.importorskip("verl")
    result = subprocess.run(
        [sys.executable, "benchmarks/verl_gpu.py", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "all checks passed" in result.stdout
