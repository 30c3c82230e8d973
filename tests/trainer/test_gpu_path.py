"""The GPU path's trainer side on a real GPU, without vLLM, a Ray cluster or Docker.

Runs ``benchmarks/verl_gpu.py check``: verl's FSDP actor in this machine's GPU through
:class:`WebShopPPOTrainer` (our batch, verl's old log-probs against a transformers
forward, an update through ``_train_on``, ``VerlBackend.save`` then ``_restore``) and the
local backend on ``cuda`` against the policy server's recorded log-probs. Skipped without a
GPU (CI) or without verl; its batch-building part runs on CPU too, so it cannot rot unseen.
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


def test_the_checks_batch_is_built_on_cpu_as_the_loop_builds_it(tmp_path: Path) -> None:
    """The part of ``check`` that needs no GPU, run here: its rollouts sampled on CPU, the
    trainer without its actor, the batch through ``VerlBackend.prepare`` with the loop's
    returns, and the batch check. ``check`` and ``memory`` once stopped with a TypeError
    here (``_batch(records)`` after it took the returns too) on GPU hosts only."""
    pytest.importorskip("verl")
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.verl.config import load_config

    spec = importlib.util.spec_from_file_location("verl_gpu", ROOT / "benchmarks" / "verl_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tiny = bench.tiny_checkpoint(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    records = bench.check_episodes(model, AutoTokenizer.from_pretrained(tiny))
    trainer = bench.trainer_shell(load_config("smoke", bench.check_overrides(tiny)))
    batch, metrics = bench.batch_of(trainer, records)
    checks = bench.Checks()
    bench.check_batch(checks, "cpu", trainer, batch, metrics)
    assert checks.failed == []
    # each row scores its rollout's return, the reward discounted per turn after the first
    discount = trainer.config.webshop.step_discount
    assert discount < 1
    returns = {r.rollout_id: r.reward * discount ** (len(r.calls) - 1) for r in records}
    scores = batch.batch["token_level_scores"].sum(-1).tolist()
    rows = [(str(r), s) for r, s in zip(batch.non_tensor_batch["rollout_id"], scores, strict=True)]
    real = [(r, s) for r, s in rows if r in returns]
    assert len(real) > len(records) and any(returns[r] not in (0.0, 1.0) for r, _ in real)
    assert all(s == pytest.approx(returns[r]) for r, s in real)
