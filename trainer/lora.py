"""LoRA: a low-rank adapter trained on frozen base weights (peft), and synced alone.

A LoRA checkpoint is peft's adapter folder (``adapter_config.json`` naming the base
model's folder, ``adapter_model.safetensors``) plus the tokenizer: a few MB where the
whole model is hundreds. A weight sync copies only the adapter's tensors into the server's
copy of the model (:class:`AdapterCopy`); vLLM reloads the
adapter folder in place (``/v1/load_lora_adapter``). ``wsrl policy merge`` folds an
adapter into its base for tools that take plain checkpoints (:func:`merge`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.config import Lora

if TYPE_CHECKING:  # torch, transformers and peft load when a model does
    import torch
    from transformers import PreTrainedModel

ADAPTER_CONFIG = "adapter_config.json"


class LoraError(ValueError):
    """A LoRA checkpoint or setting that cannot be used as asked (the message says why)."""


def is_adapter(folder: str | Path) -> bool:
    """Whether ``folder`` holds a LoRA adapter rather than whole weights."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def adapter_base(folder: str | Path) -> Path:
    """The base model folder the adapter in ``folder`` was trained on."""
    config = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    base = Path(str(config.get("base_model_name_or_path") or ""))
    if not (base / "config.json").is_file():
        raise LoraError(
            f"{folder} is a LoRA adapter over {str(base)!r}, which is not a checkpoint folder "
            "here: put the base model back at that path (or edit base_model_name_or_path in "
            f"{Path(folder) / ADAPTER_CONFIG})."
        )
    return base


def adapter_rank(folder: str | Path) -> int:
    return int(json.loads((Path(folder) / ADAPTER_CONFIG).read_text())["r"])


def load_policy(
    path: str | Path, lora: Lora, device: torch.device | str = "cpu", trainable: bool = True
) -> PreTrainedModel:
    """The model at ``path`` in float32, as ``lora`` says to train it: whole weights
    as they are (rank 0), whole weights with a fresh adapter, or an adapter checkpoint on
    its base (the same rank only: resuming with another one is refused)."""
    from peft import PeftModel

    if is_adapter(path):
        rank = adapter_rank(path)
        if rank != lora.rank:
            raise LoraError(
                f"{path} holds a LoRA adapter of rank {rank}: resume it with --lora-rank "
                f"{rank}, or merge it first (wsrl policy merge) to train the whole model."
            )
        base = _load(adapter_base(path), device)
        model = PeftModel.from_pretrained(base, str(path), is_trainable=trainable)
        return model.to(device).eval()
    model = _load(path, device)
    return wrap(model, lora) if lora.enabled else model


def wrap(model: PreTrainedModel, lora: Lora) -> Any:
    """``model`` with a fresh adapter (its B matrices zero: the same outputs as before);
    only the adapter's parameters require gradients."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=lora.peft_target_modules,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # peft: target modules not found in the base model
        raise LoraError(f"--lora-target-modules {','.join(lora.target_modules)}: {exc}") from exc


class AdapterCopy:
    """Copies a trained model's adapter into another copy of the same model, in place.

    The pairs of tensors are found once (a look-up by name costs more than the copy); the
    trained side is held as views of its parameters, which the optimizer updates in place,
    so each call copies the current adapter. The base weights are never touched."""

    def __init__(self, trained: Any, served: Any) -> None:
        sources = {n: p.detach() for n, p in trained.named_parameters() if p.requires_grad}
        targets = dict(served.named_parameters())
        unknown = [n for n in sources if n not in targets or "lora_" not in n]
        if not sources or unknown:
            raise LoraError(f"the trained adapter does not fit the served model: {unknown[:3]}")
        self.names = list(sources)
        self._sources = [sources[n] for n in self.names]
        self._targets = [targets[n] for n in self.names]

    @property
    def numel(self) -> int:
        return sum(t.numel() for t in self._sources)

    def __call__(self) -> None:
        import torch

        with torch.no_grad():
            for target, source in zip(self._targets, self._sources, strict=True):
                target.copy_(source)


def merge(adapter: str | Path, out: str | Path) -> Path:
    """The adapter at ``adapter`` folded into its base, written to ``out`` as a plain
    checkpoint (with the tokenizer)."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    if not is_adapter(adapter):
        raise LoraError(f"{adapter} holds no LoRA adapter ({ADAPTER_CONFIG} missing).")
    base = _load(adapter_base(adapter), "cpu")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    target = Path(out)
    partial = target.with_name(f".{target.name}.partial")  # renamed once whole
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(partial)
    AutoTokenizer.from_pretrained(str(adapter)).save_pretrained(partial)
    os.replace(partial, target)
    return target


def _load(path: str | Path, device: torch.device | str) -> PreTrainedModel:
    import torch
    from transformers import AutoModelForCausalLM

    # the absolute path: peft records it as the adapter's base
    folder = str(Path(path).resolve())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.to(device).eval()
