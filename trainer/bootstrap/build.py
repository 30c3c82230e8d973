"""``wsrl policy bootstrap``: build the tiny policy and warm-start it on fair demonstrations.

Deterministic per configuration (seeded goal order, initialisation and batching; torch
runs single-process on CPU). The checkpoint folder is cached: a folder whose
``bootstrap.json`` records the same configuration is reused as is. The default
configuration's checkpoint is kept in the repository (:mod:`trainer.bootstrap.shipped`)
and copied instead of built when it was built from the same inputs.
"""

from __future__ import annotations

import json
import logging
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import tokenizers
import torch
import transformers

from app.core.agent import AgentMode, AgentProtocol
from app.webshop.env import WebShopEnv
from trainer.bootstrap import demonstrations
from trainer.bootstrap.copy_pretraining import CopyTask, copy_pretrain
from trainer.bootstrap.shipped import (
    MANIFEST,
    SHIPPED,
    copy,
    file_hashes,
    fingerprint,
    shipped_manifest,
)
from trainer.bootstrap.tiny_policy import (
    SPECIAL_TOKENS,
    TinySize,
    build_model,
    count_parameters,
    train_tokenizer,
)
from trainer.checkpoint_protocol import TINY_HISTORY_STEPS, TINY_RESULT_REFS
from trainer.samples import Sample
from trainer.tensors import TrainBatch, collate

logger = logging.getLogger(__name__)


Progress = Callable[[str, int, int, str], None]
"""``(phase, done, total, detail)``, called as the bootstrap goes: phases
``demonstrations``, ``tokenizer``, ``copy pretraining``, ``imitation`` (detail: epoch and
loss). The CLI draws it (:class:`app.work_progress.WorkProgress`)."""


def _no_progress(phase: str, done: int, total: int, detail: str) -> None:
    """The default :data:`Progress`: nothing shown."""


@dataclass(frozen=True)
class BootstrapConfig:
    """How the tiny policy is built and warm-started."""

    seed: int = 0
    """Seeds goal sampling, initialisation and batch order."""
    episodes: int = 200
    """Demonstration episodes (train goals); about 4.1 steps each."""
    epochs: int = 6
    """Passes over the demonstrations. Pointing at the first listed id forms late: held-out
    item clicks 1/50 and 0/50 after 3 epochs (seeds 0, 1), 7/50 after 4, 9/50 and 16/50
    after 6 (about 10 minutes on one thread here)."""
    batch_size: int = 8
    """Demonstration steps per optimizer step."""
    lr: float = 1e-3
    """Peak AdamW learning rate (linear warm-up over 20 steps, then cosine decay)."""
    max_steps: int = 15
    """Step limit of a demonstration episode."""
    history_steps: int = TINY_HISTORY_STEPS
    """Previous steps shown in the demonstrations' prompts; run the policy with the same
    (``agent_history_steps``). One is enough to know which option was clicked last, and
    keeps prompts short."""
    context_weight: float = 0.0
    """Weight of the next-token loss on prompt tokens. Zero: the replies now repeat prompt
    tokens (see :mod:`trainer.bootstrap.demonstrations`), so the action loss alone teaches copying,
    and the vocabulary projection over every prompt token cost 2.5 times the transformer
    itself (held-out exact searches 34/50 at 0 in 195 s, against 0/50 at 1 with the
    tokens the replies had before, in 300 s)."""
    search_goals: int = 3000
    """Further train goals whose first step (the search) is added to the demonstrations.
    Those prompts are short, so they are a cheap way to practise the hardest copy (the
    instruction's description into the query) on many more instructions."""
    result_goals: int = 800
    """Further train goals whose results-page step (clicking the first listed id) is added.
    Pointing at the first of ten listed ids is a position rule learned from examples, and
    an episode gives one. Held-out item clicks: 0/50 without these in every run; with them
    26/50 in one run, 0-1/50 in two others (same data, other order), 7/50 with 4 epochs:
    a circuit that forms late."""
    option_goals: int = 800
    """Further train goals whose item-page steps (clicking the instruction's option values,
    then buying) are added. Choosing the option whose value the instruction names is
    learned from many examples: held-out option clicks 2-3/57 without these, 29/57 with
    800 goals' option steps (6 epochs)."""
    copy: CopyTask = field(default_factory=CopyTask)
    """Copy pretraining before the demonstrations (:mod:`trainer.bootstrap.copy_pretraining`)."""
    tokenizer_goals: int = 400
    """Goals whose instructions and demonstration pages train the tokenizer (with every
    product title; every product id is a token of its own)."""
    size: TinySize = field(default_factory=TinySize)
    """Shape of the model."""
    result_refs: str = TINY_RESULT_REFS
    """How the prompts name a results page's products (:class:`app.core.agent.ResultRefs`);
    recorded in the manifest, and the policy is played so. By number, the first result is
    the same reply on every page, where a product id must be copied from its place in the
    list (docs/decisions/0030)."""
    result_choice: str = "first"
    """Which result the demonstrator opens: ``first`` (the best-ranked: the strongest
    imitation, which RL starts from, docs/decisions/0039) or ``random`` (one of the page's,
    drawn per goal: the mechanics without the choice, left to RL, docs/decisions/0030)."""


def _tokenizer_texts(env: WebShopEnv, demos: list, goal_ids: list[int]) -> list[str]:
    texts = [m["content"] for d in demos for m in d.messages]
    texts += [env.goals[g].instruction for g in goal_ids]
    texts += [env.product(i).name for i in range(env.num_products)]
    return texts


def _product_ids(env: WebShopEnv) -> list[str]:
    """Every asin as clicked (lower case) and as shown on result pages (upper case)."""
    asins = [env.product(i).asin for i in range(env.num_products)]
    return [*(a.lower() for a in asins), *(a.upper() for a in asins)]


def _some(rng: random.Random, goal_ids: list[int], n: int) -> list[int]:
    return rng.sample(goal_ids, min(len(goal_ids), n))


def _drills(
    env: WebShopEnv,
    goal_ids: list[int],
    max_steps: int,
    kinds: tuple[str, ...],
    config: BootstrapConfig,
) -> list[demonstrations.Demonstration]:
    """The demonstrator's steps of some kinds of decision on ``goal_ids``: more practice on
    those decisions without the cost of whole episodes."""
    demos = demonstrations.collect(
        env, goal_ids, _protocol(config, max_steps), config.result_choice
    )
    return [d for d in demos if demonstrations.action_kind(d.action) in kinds]


def _protocol(config: BootstrapConfig, max_steps: int) -> AgentProtocol:
    """How the demonstrations are played: text mode, the configuration's history and
    result names, ``max_steps`` steps (fewer for a drill)."""
    return AgentProtocol(
        mode=AgentMode.TEXT,
        history_steps=config.history_steps,
        constrain_actions=False,
        max_steps=max_steps,
        result_refs=config.result_refs,
    )


def _lr(step: int, total: int, peak: float) -> float:
    warm = min(20, max(total // 10, 1))
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(total - warm, 1)
    return peak * 0.5 * (1 + torch.cos(torch.tensor(progress * torch.pi)).item())


def _batches(samples: list[Sample], size: int, rng: random.Random) -> list[list[Sample]]:
    """Batches of similar length (less padding), in random order."""
    ordered = sorted(samples, key=len)
    batches = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    rng.shuffle(batches)
    return batches


def action_nll(model: Any, batch: TrainBatch, context_weight: float = 0.0) -> torch.Tensor:
    """Mean negative log-likelihood of the masked (action) tokens, plus ``context_weight``
    times that of the other real tokens. The vocabulary projection runs only on the
    positions that count: prompts are long, actions short."""
    hidden = model.model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask
    ).last_hidden_state  # (B, T, H)
    targets = batch.input_ids[:, 1:]  # (B, T-1): position t predicts token t+1
    action = batch.loss_mask.bool()  # (B, T-1)
    loss = _nll(model, hidden[:, :-1][action], targets[action])
    if context_weight > 0:
        context = batch.attention_mask[:, 1:].bool() & ~action  # (B, T-1)
        loss = loss + context_weight * _nll(model, hidden[:, :-1][context], targets[context])
    return loss


def _nll(model: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model.lm_head(hidden)  # (N, V)
    return torch.nn.functional.cross_entropy(logits.float(), targets)


class Imitation(Protocol):
    """What :func:`supervised` reads of a configuration: :class:`BootstrapConfig` for the
    tiny policy, :class:`trainer.bootstrap.warm_start.WarmStartConfig` for a pretrained
    model."""

    @property
    def seed(self) -> int: ...
    @property
    def epochs(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def context_weight(self) -> float: ...


def supervised(
    model: Any,
    samples: list[Sample],
    config: Imitation,
    pad_id: int,
    progress: Progress = _no_progress,
) -> float:
    """Trains ``model`` on the masked tokens of ``samples`` on its device, in bfloat16
    autocast on a GPU (float32 weights and optimiser); returns the last epoch's loss. On a
    CPU the device move and the autocast are no-ops: the tiny policy's weights are the
    same as before either existed."""
    device = next(model.parameters()).device
    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    total = config.epochs * -(-len(samples) // config.batch_size)
    step, losses = 0, []
    model.train()
    for epoch in range(config.epochs):
        losses = []
        for chunk in _batches(samples, config.batch_size, rng):
            batch = collate(chunk, pad_id).to(device)
            with torch.autocast("cuda", torch.bfloat16, enabled=device.type == "cuda"):
                loss = action_nll(model, batch, config.context_weight)
            for group in optimizer.param_groups:
                group["lr"] = _lr(step, total, config.lr)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            detail = f"epoch {epoch + 1}/{config.epochs}, loss {sum(losses) / len(losses):.3f}"
            progress("imitation", step, total, detail)
        logger.info("epoch loss %.4f (%d steps)", sum(losses) / max(len(losses), 1), step)
    model.eval()
    return sum(losses) / max(len(losses), 1)


def cached_manifest(out: Path, config: BootstrapConfig) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("config") == json.loads(json.dumps(asdict(config))) else None


def built_with() -> dict[str, Any]:
    """What besides the configuration decides the weights: the numeric libraries, torch's
    thread count and the CPU (float sums are ordered by all three). The same command builds the same
    weights where these are equal; where they differ the build can differ too, as much as
    a retrained model does, so the manifest records them."""
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


@dataclass
class Inputs:
    """What a build trains on: the demonstrations and the tokenizer's texts."""

    demos: list[demonstrations.Demonstration]
    tokenizer_texts: list[str]
    product_ids: list[str]


def gather(env: WebShopEnv, config: BootstrapConfig, progress: Progress = _no_progress) -> Inputs:
    """The demonstrations and tokenizer texts of ``config`` (seconds, not minutes)."""
    torch.manual_seed(config.seed)
    train = env.goal_ids("train")
    if len(train) < config.episodes:
        raise ValueError(
            f"{config.episodes} episodes asked but the catalog has {len(train)} train goals; "
            "lower --episodes or use a larger catalog."
        )
    rng = random.Random(config.seed)
    goal_ids = rng.sample(train, config.episodes)
    progress("demonstrations", 0, 4, "episodes")
    demos = demonstrations.collect(
        env, goal_ids, _protocol(config, config.max_steps), config.result_choice
    )
    others = [g for g in train if g not in set(goal_ids)]
    progress("demonstrations", 1, 4, "search drills")
    demos += _drills(env, _some(rng, others, config.search_goals), 1, ("search",), config)
    progress("demonstrations", 2, 4, "result-page drills")
    demos += _drills(env, _some(rng, others, config.result_goals), 2, ("item",), config)
    progress("demonstrations", 3, 4, "item-page drills")
    item_page = ("option", "buy")
    demos += _drills(
        env, _some(rng, others, config.option_goals), config.max_steps, item_page, config
    )
    progress("demonstrations", 4, 4, f"{len(demos)} steps")
    texts = _tokenizer_texts(env, demos, goal_ids[: config.tokenizer_goals])
    return Inputs(demos, texts, _product_ids(env))


def bootstrap(
    env: WebShopEnv,
    out: Path,
    config: BootstrapConfig,
    force: bool = False,
    progress: Progress = _no_progress,
    shipped: Path = SHIPPED,
) -> dict:
    """Builds (or reuses) the warm-started tiny policy in ``out``; returns its manifest
    (``cached``: found in ``out``; ``shipped``: copied from ``shipped``). ``force`` builds
    even when either would do."""
    if not force and (manifest := cached_manifest(out, config)) is not None:
        logger.info("tiny policy cached in %s", out)
        return {**manifest, "cached": True, "shipped": False}
    started, cpu_started = time.perf_counter(), time.process_time()
    inputs = gather(env, config, progress)
    digest = fingerprint(inputs, config)
    manifest = None if force else shipped_manifest(digest, shipped)
    if manifest is not None and out.resolve() != shipped.resolve():
        copy(shipped, out)
        logger.info("tiny policy copied from %s", shipped)
        return {**manifest, "cached": False, "shipped": True}
    demos = inputs.demos
    progress("tokenizer", 0, 1, "")
    tokenizer = train_tokenizer(inputs.tokenizer_texts, config.size.vocab_size, inputs.product_ids)
    progress("tokenizer", 1, 1, f"{len(tokenizer)} tokens")
    model = build_model(tokenizer, config.size, config.seed)
    copy_accuracy = copy_pretrain(
        model,
        (len(SPECIAL_TOKENS), len(tokenizer)),
        config.copy,
        config.seed,
        on_step=lambda done: progress("copy pretraining", done, config.copy.steps, ""),
    )
    logger.info("copy pretraining: accuracy %.3f", copy_accuracy)
    samples = [demonstrations.to_sample(d, tokenizer) for d in demos]
    loss = supervised(model, samples, config, tokenizer.pad_token_id, progress)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    manifest = {
        "config": asdict(config),
        "parameters": count_parameters(model),
        "demonstrations": len(demos),
        "demo_tokens": sum(len(s) for s in samples),
        "copy_accuracy": copy_accuracy,
        "final_loss": loss,
        "history_steps": config.history_steps,
        "result_refs": config.result_refs,
        "fingerprint": digest,
        "files": file_hashes(out),
        "built_with": built_with(),
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return {**manifest, "cached": False, "shipped": False}
