"""Trainer checkpoints: one folder per train step, written atomically.

A checkpoint is ``<dir>/step-<N>/`` holding the Hugging Face model + tokenizer, the
optimizer state and ``trainer_state.json`` (step, policy version, and the agent protocol
the trainer published, which :mod:`trainer.checkpoint_protocol` reads). It is written under a
temporary name and renamed into place, so a folder named ``step-<N>`` is always whole;
leftovers of a crash (``.tmp-*``) are removed on the next start.

The loop saves step N's checkpoint *before* it commits step N to Postgres. A checkpoint
newer than the last committed step therefore holds an update whose rollouts are not
marked as trained; :func:`usable_checkpoint` discards it, so the restarted trainer
redoes that step from the previous weights and no group is ever applied twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint_protocol import STATE_FILE

logger = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"
PREFIX = "step-"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and what it holds."""

    path: Path
    step: int
    version: int

    def load_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        state = torch.load(self.path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
        optimizer.load_state_dict(state)


def weights_sha256(model: torch.nn.Module) -> str:
    """A digest of ``model``'s weights (every tensor's name, dtype, shape and bytes): the
    same for the model a checkpoint loads as for the one its trainer served."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return digest.hexdigest()


def save_checkpoint(
    directory: Path, step: int, version: int, learner: Any, extra: dict[str, Any] | None = None
) -> Checkpoint:
    """Write ``learner`` (a :class:`~trainer.backends.local.learner.Learner`: ``save`` +
    ``optimizer``) as step ``step``."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{PREFIX}{step:06d}"
    tmp = directory / f".tmp-{PREFIX}{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    learner.save(tmp)
    torch.save(learner.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    state = {"step": step, "version": version, "saved_at": time.time(), **(extra or {})}
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2))
    if final.exists():  # a previous attempt of this step that was never committed
        shutil.rmtree(final)
    os.replace(tmp, final)
    return Checkpoint(final, step, version)


def list_checkpoints(directory: Path) -> list[Checkpoint]:
    """Complete checkpoints, oldest first (temporary leftovers are ignored)."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.glob(f"{PREFIX}*"):
        state_file = path / STATE_FILE
        if not state_file.is_file():
            continue
        state = json.loads(state_file.read_text())
        found.append(Checkpoint(path, int(state["step"]), int(state["version"])))
    return sorted(found, key=lambda c: c.step)


def remove_leftovers(directory: Path) -> None:
    """Delete temporary folders of writes that a crash interrupted."""
    if directory.is_dir():
        for path in directory.glob(f".tmp-{PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)


def usable_checkpoint(directory: Path, committed_step: int) -> Checkpoint | None:
    """The newest checkpoint whose step was committed; newer ones are deleted (see module)."""
    remove_leftovers(directory)
    usable = None
    for checkpoint in list_checkpoints(directory):
        if checkpoint.step <= committed_step:
            usable = checkpoint
            continue
        logger.warning(
            "discarding checkpoint of step %d: the step was never committed (last committed "
            "step %d); it will be trained again from the previous weights",
            checkpoint.step,
            committed_step,
        )
        shutil.rmtree(checkpoint.path, ignore_errors=True)
    return usable


def prune(directory: Path, keep: int) -> None:
    """Keep the ``keep`` newest checkpoints (at least one)."""
    for checkpoint in list_checkpoints(directory)[: -max(keep, 1)]:
        shutil.rmtree(checkpoint.path, ignore_errors=True)
