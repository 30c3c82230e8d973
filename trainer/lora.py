"""LoRA: a low-rank adapter trained on frozen base weights (peft), and synced alone.

A LoRA checkpoint is peft's adapter folder (``adapter_config.json`` naming the base
model's folder, ``adapter_model.safetensors``) plus the tokenizer: a few MB where the
whole model is hundreds. A weight sync copies only the adapter's tensors into the server's
copy of the model (:func:`adapter_state`, :func:`load_adapter_state`); vLLM reloads the
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


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors by parameter name (what a sync sends: the base stays where it
    is). Views of the live tensors: load them (:func:`load_adapter_state`) before the
    model trains again."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def load_adapter_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (from :func:`adapter_state` of a model of the same shape) into
    ``model``'s adapter, in place: each tensor once, nothing else touched."""
    params = dict(model.named_parameters())
    unknown = [name for name in state if name not in params or "lora_" not in name]
    if unknown:
        raise LoraError(f"the adapter state does not fit the served model: {unknown[:3]}")
    import torch

    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


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
