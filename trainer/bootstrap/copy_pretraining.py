"""Copy pretraining: teach a from-scratch model to repeat what it has seen, before it imitates.

Every WebShop action copies something from the prompt: instruction words into a search,
a product id from the result list, an option value from the item page. A transformer
copies with induction heads (attend to the token after an earlier occurrence of the current
token, and repeat it), and from scratch those form late: 400 steps of supervised learning
on demonstrations taught the tiny policy no copying at all. Trained on random token spans
that repeat after some filler, the same model forms them in about 150 steps of short
sequences (a minute on a CPU), and the demonstrations then only teach *what* to copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CopyTask:
    """Shape of the synthetic sequences: ``span`` random tokens, ``filler`` random tokens,
    then the span again (the loss is on the repeat)."""

    steps: int = 250
    batch_size: int = 16
    span: int = 24
    filler: int = 20
    lr: float = 1e-3


def copy_batch(
    vocab: tuple[int, int], task: CopyTask, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids (B, 2 * span + filler) and the span to repeat (B, span), tokens drawn
    uniformly from ``[vocab[0], vocab[1])``."""
    low, high = vocab
    b = task.batch_size
    span = torch.randint(low, high, (b, task.span), generator=generator)
    filler = torch.randint(low, high, (b, task.filler), generator=generator)
    return torch.cat([span, filler, span], dim=1), span


def copy_pretrain(
    model: torch.nn.Module,
    vocab: tuple[int, int],
    task: CopyTask,
    seed: int,
    on_step: Callable[[int], None] | None = None,
) -> float:
    """Trains ``model`` to predict each repeated token; returns the copy accuracy (greedy) of
    the last batch. ``on_step`` gets the number of steps done after each."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=task.lr, weight_decay=0.01)
    model.train()
    accuracy = 0.0
    for step in range(task.steps):
        input_ids, span = copy_batch(vocab, task, generator)
        hidden = model.model(input_ids=input_ids).last_hidden_state  # (B, T, H)
        # Position t predicts token t + 1: the repeat's tokens come from the positions
        # just before them (the last span token of the filler predicts the first repeat).
        logits = model.lm_head(hidden[:, -task.span - 1 : -1])  # (B, span, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), span.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        accuracy = (logits.argmax(-1) == span).float().mean().item()
        if on_step is not None:
            on_step(step + 1)
    model.eval()
    return accuracy
