"""``wsrl policy bootstrap --model NAME``: a real model warm-started on the fair demonstrations.

A pretrained instruct model plays WebShop zero-shot at 0 % with every reward 0
(SmolLM2-135M-Instruct, docs/benchmarks.md), so every group of a GRPO run has the same
reward and no advantage: RL has nothing to learn from. The tiny policy faces the same wall
and climbs it by imitating the demonstrator first (:mod:`trainer.bootstrap.build`); here a
converted model (``wsrl model get``) imitates the same demonstrations, rendered with its
own chat template, before RL starts from it. No tokenizer or copy pretraining: the model
has both.

The folder written is a Hugging Face checkpoint with the bootstrap's manifest, so it is
played with the protocol of its demonstrations (:mod:`trainer.checkpoint_protocol`), by
``wsrl policy eval``, the local backend and verl alike. A GPU is used when there is one;
on a CPU it is slow (seconds per demonstration step for SmolLM2) and meant for small runs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from app.webshop.env import WebShopEnv
from trainer.bootstrap import demonstrations
from trainer.bootstrap.build import (
    BootstrapConfig,
    Progress,
    _no_progress,
    built_with,
    gather,
    supervised,
)
from trainer.bootstrap.shipped import MANIFEST, file_hashes
from trainer.checkpoint_protocol import TINY_HISTORY_STEPS, TINY_RESULT_REFS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartConfig:
    """How a pretrained model imitates the demonstrations (the tiny policy's demonstrator:
    :mod:`trainer.bootstrap.demonstrations`)."""

    seed: int = 0
    episodes: int = 200
    """Whole demonstration episodes (train goals)."""
    search_goals: int = 1000
    """Further train goals whose first step (the search) is added."""
    result_goals: int = 400
    """Further train goals whose results-page step (opening the first result) is added."""
    option_goals: int = 400
    """Further train goals whose item-page steps (the options, then buy) are added."""
    epochs: int = 1
    batch_size: int = 8
    lr: float = 5e-5
    """Peak AdamW learning rate (warm-up, then cosine decay): a pretrained model's step,
    not the tiny policy's 1e-3."""
    max_steps: int = 15
    history_steps: int = TINY_HISTORY_STEPS
    result_refs: str = TINY_RESULT_REFS
    result_choice: str = "first"
    context_weight: float = 0.0

    def demonstrations(self) -> BootstrapConfig:
        """The bootstrap configuration whose demonstrations these are."""
        return BootstrapConfig(
            seed=self.seed,
            episodes=self.episodes,
            search_goals=self.search_goals,
            result_goals=self.result_goals,
            option_goals=self.option_goals,
            max_steps=self.max_steps,
            history_steps=self.history_steps,
            result_refs=self.result_refs,
            result_choice=self.result_choice,
            tokenizer_goals=0,
        )


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def cached(out: Path, base: Path, config: WarmStartConfig) -> dict[str, Any] | None:
    """The manifest of a warm start of ``base`` with ``config`` already in ``out``."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    same = manifest.get("config") == asdict(config) and manifest.get("base") == str(base.resolve())
    return manifest if same else None


def warm_start(
    env: WebShopEnv,
    base: Path,
    out: Path,
    config: WarmStartConfig,
    *,
    device: str | None = None,
    force: bool = False,
    progress: Progress = _no_progress,
) -> dict[str, Any]:
    """Trains the checkpoint ``base`` on the demonstrations of ``config`` and writes it to
    ``out`` with its manifest (``cached``: found there already); returns the manifest."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not force and (manifest := cached(out, base, config)) is not None:
        return {**manifest, "cached": True}
    started = time.perf_counter()
    device = device or default_device()
    inputs = gather(env, config.demonstrations(), progress)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    pad_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    samples = [demonstrations.to_sample(d, tokenizer) for d in inputs.demos]
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).to(device)
    loss = supervised(model, samples, config, pad_id, progress)
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    manifest = {
        "base": str(base.resolve()),
        "config": asdict(config),
        "demonstrations": len(samples),
        "demo_tokens": sum(len(s) for s in samples),
        "final_loss": loss,
        "history_steps": config.history_steps,
        "result_refs": config.result_refs,
        "device": device,
        "files": file_hashes(out),
        "built_with": built_with(),
        "seconds": time.perf_counter() - started,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    logger.info("warm start of %s in %s: loss %.3f", base, out, loss)
    return {**manifest, "cached": False}
