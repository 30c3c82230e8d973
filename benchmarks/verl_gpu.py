"""The GPU path's trainer side on one GPU, without vLLM, a Ray cluster or Docker.

verl's FSDP actor (``ActorRolloutRefWorker`` with its FSDP engine) runs in this process
in a one-rank ``torch.distributed`` group; :class:`WebShopPPOTrainer` uses it through
:class:`InProcessGroup`, which stands where Ray's worker group would and calls the
worker's own methods. What runs is the project's code (``_batch``, ``_train_on``,
``VerlBackend.save``, ``_restore``) and verl's (``_compute_old_log_prob``,
``_update_actor``, the FSDP engine, its checkpoints). Needs an NVIDIA GPU and verl 0.9.1
(the trainer image, or ``pip install '.[verl]'`` beside a CUDA torch); Ray is imported by
verl but no cluster is started.

    python benchmarks/verl_gpu.py check                   # exit 1 when a check fails
    python benchmarks/verl_gpu.py memory --config fast    # fast | qwen | qwen3b; --save
    python benchmarks/verl_gpu.py shape --config fast --out DIR   # a checkpoint for vLLM

``check``, on the tiny policy's architecture (random weights, a tokenizer trained on a few
lines; nothing downloaded), with multi-turn rollouts sampled by the policy server's
sampler (:func:`trainer.generation.generate_batch`) on the GPU:

- verl's old log-probs of our batch (one sample dropped as over-long, zero rows padding it
  to the mini-batch) against a plain transformers forward, with padding removal on and
  off, fp32 and verl's default bf16 mixed precision; then one update through
  ``_train_on``;
- ``VerlBackend.save`` then ``_restore`` into a fresh actor: the restored weights give the
  trained ones' log-probs;
- the local backend on ``cuda``: the sampler's recorded log-probs against the trainer's
  forward, before an update and after the weights are swapped into the policy server.

``memory`` builds the config's Qwen2.5 model from its published shape (random bf16
weights, no download), loads it through verl as the config does, and runs one step on
``rollout.n`` samples of the config's full prompt + response length: the peak GPU memory
of that step, against the config's ``webshop.gpu_memory_estimate_gib``; with ``--save``
also the size of verl's checkpoint of it (``VerlBackend.save``) against
``webshop.checkpoint_gib``.

``shape`` writes the config's Qwen2.5 shape with random bf16 weights and the shipped tiny
policy's tokenizer (so its vocabulary: 9,552 ids where Qwen's has 151,936) to ``--out``:
a checkpoint the whole GPU path (vLLM, verl through Ray, weight sync) runs at that size,
``first-run.sh`` with ``CONFIG=fast MODEL=DIR`` and the tiny policy's text protocol. Only
transformers and torch are needed (a bare GPU host has both); its ``config.json`` keeps
the tiny policy's keys, which the kit's older transformers reads.

``attn_implementation`` is ``sdpa`` unless ``--attn flash_attention_2`` (flash-attn
installed): the figures of docs/benchmarks.md were taken with sdpa.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

# Qwen2.5-{0.5B,1.5B,3B}-Instruct's config.json, as published (the model each config names).
QWEN_SHAPES = {
    "fast": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2),
    "qwen": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2),
    "qwen3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                   num_attention_heads=16, num_key_value_heads=2),
}  # fmt: skip
TEXTS = [
    "i need a red cotton shirt for men, and price lower than 30.00 dollars",
    "search[red cotton shirt] click[b00abc123] click[buy now] click[< prev]",
    "Instruction: buy a blue ceramic mug under 20 dollars. Current observation: results",
] * 30
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def tiny_checkpoint(folder: Path) -> Path:
    """The tiny policy's architecture with random weights and a small tokenizer."""
    from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer

    tokenizer = train_tokenizer(TEXTS, 400)
    build_model(tokenizer, TinySize(vocab_size=400), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def qwen_checkpoint(name: str, folder: Path, tokenizer_from: Path) -> int:
    """Config ``name``'s model shape with random bf16 weights; returns its parameters."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
        **QWEN_SHAPES[name],
    )
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    del model
    AutoTokenizer.from_pretrained(str(tokenizer_from)).save_pretrained(folder)
    return params


def shape_checkpoint(name: str, folder: Path, tokenizer_from: Path, device: str = "cuda") -> int:
    """Config ``name``'s shape, random bf16 weights, ``tokenizer_from``'s tokenizer and
    vocabulary; returns its parameters."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = json.loads((tokenizer_from / "config.json").read_text())
    layers = QWEN_SHAPES[name]["num_hidden_layers"]
    config.update(QWEN_SHAPES[name], dtype="bfloat16", layer_types=["full_attention"] * layers)
    config["rope_parameters"]["rope_theta"] = 1000000.0
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config.from_dict(config)).to(torch.bfloat16)
    model.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    # save_pretrained wrote this transformers' serialisation of it; keep the tiny's keys.
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):  # fmt: skip
        shutil.copy(tokenizer_from / file, folder / file)
    return params


def episodes(model: Any, tokenizer: Any, groups: int, n: int, seed: int, long_prompt: int = 0):
    """Multi-turn rollouts sampled by the policy server's sampler, ids and logprobs as
    recorded. A turn's prompt extends the previous prompt + reply with observation tokens;
    every third rollout's third turn starts afresh (a second sample). ``long_prompt``: the
    first rollout's first prompt has that many tokens."""
    from trainer.generation import GenerationRequest, generate_batch
    from trainer.samples import CallRecord, RolloutRecord

    rng = random.Random(seed)
    specials = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in specials]

    def ids(k: int) -> list[int]:
        return [rng.choice(vocab) for _ in range(k)]

    runs = []
    for g in range(groups):
        for r in range(n):
            size = long_prompt if long_prompt and g == r == 0 else rng.randint(20, 60)
            runs.append({"id": f"g{g}r{r}", "group": f"g{g}", "turns": rng.randint(1, 4),
                         "prompt": ids(size), "calls": [], "fresh": r % 3 == 0})  # fmt: skip
    while live := [x for x in runs if len(x["calls"]) < x["turns"]]:
        requests = [
            GenerationRequest(x["prompt"], max_tokens=12, seed=rng.randrange(2**31)) for x in live
        ]
        for x, gen in zip(live, generate_batch(model, tokenizer, requests), strict=True):
            x["calls"].append(CallRecord(list(x["prompt"]), gen.token_ids, gen.logprobs, 0))
            if len(x["calls"]) == 2 and x["fresh"]:
                x["prompt"] = ids(rng.randint(20, 40))
            else:
                x["prompt"] = [*x["prompt"], *gen.token_ids, *ids(rng.randint(3, 10))]
    rewards = (0.0, 0.25, 0.5, 1.0)
    return [RolloutRecord(x["id"], x["group"], rng.choice(rewards), x["calls"]) for x in runs]


# --- verl's actor in this process -------------------------------------------------------------


class InProcessGroup:
    """What Ray's worker group does for one rank, without Ray: the worker's own methods."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self._dispatch_info = {"actor": [0]}  # read by RayPPOTrainer._get_dp_size

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self.worker, name)


def trainer_shell(config: Any) -> Any:
    """A :class:`WebShopPPOTrainer` for ``config`` with the parts of
    ``RayPPOTrainer.__init__`` that ``_batch``, ``_train_on``, ``_save_checkpoint`` and
    ``_load_checkpoint`` read (its ``__init__`` would build Ray resource pools), and no
    actor yet: batches are built on any machine."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from transformers import AutoTokenizer

    from trainer.backends.verl.config import run_config
    from trainer.backends.verl.trainer import GoalSlots, WebShopPPOTrainer

    trainer = object.__new__(WebShopPPOTrainer)
    trainer.config, trainer.shop = config, config.webshop
    trainer.run = run_config(config)
    trainer.tokenizer = AutoTokenizer.from_pretrained(str(config.actor_rollout_ref.model.path))
    trainer.use_reference_policy = trainer.ref_in_actor = trainer.use_critic = False
    trainer.train_dataloader = StatefulDataLoader(GoalSlots(2), batch_size=1, collate_fn=list)
    trainer.global_steps = 0
    return trainer


def inprocess_trainer(name: str, overrides: Sequence[str], attn: str, mixed_precision=None):
    """(WebShopPPOTrainer, worker) for verl config ``name``, its actor on this GPU."""
    from omegaconf import open_dict
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from trainer.backends.verl.config import load_config

    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                       ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", str(29500 + os.getpid() % 1000))):  # fmt: skip
        os.environ.setdefault(key, value)
    config = load_config(name, overrides)
    with open_dict(config):
        config.actor_rollout_ref.model.override_config.attn_implementation = attn
        if mixed_precision is not None:
            config.actor_rollout_ref.actor.fsdp_config.mixed_precision = mixed_precision
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
    worker.init_model()
    trainer = trainer_shell(config)
    trainer.actor_rollout_wg = InProcessGroup(worker)
    return trainer, worker


def batch_of(trainer: Any, records: Sequence[Any]) -> tuple[Any, dict]:
    """verl's batch of ``records`` as the shared loop builds it: the loop's returns
    (:func:`trainer.loop.episode_returns` under the config's run configuration), then
    ``VerlBackend.prepare`` (``_batch``)."""
    from trainer.backends.verl.trainer import VerlBackend
    from trainer.loop import episode_returns

    returns = episode_returns(records, trainer.run.algorithm)
    return VerlBackend(trainer).prepare(records, returns)


def check_batch(checks: Checks, label: str, trainer: Any, batch: Any, metrics: dict) -> None:
    """``check``'s batch: a multiple of the mini-batch, padded, the long prompt dropped."""
    from trainer.backends.verl.dataproto import PAD_ID

    mini = int(trainer.config.actor_rollout_ref.actor.ppo_mini_batch_size) * int(
        trainer.config.actor_rollout_ref.rollout.n
    )
    pads = list(batch.non_tensor_batch["rollout_id"]).count(PAD_ID)
    checks.expect(
        f"batch [{label}]",
        len(batch) % mini == 0 and metrics["batch/dropped_overlong"] == 1 and pads > 0,
        f"{len(batch)} rows ({pads} padding, mini-batch {mini}), "
        f"{metrics['batch/dropped_overlong']:.0f} dropped as over-long",
    )


def old_log_probs(trainer: Any, batch: Any) -> torch.Tensor:
    """verl's ``_compute_old_log_prob`` on a copy of ``batch``, with ``_train_on``'s meta."""
    batch = copy.deepcopy(batch)
    batch.meta_info["temperature"] = trainer.config.actor_rollout_ref.rollout.temperature
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
    batch.meta_info["images_seqlens"] = []
    return trainer._compute_old_log_prob(batch)[0].batch["old_log_probs"]


def hf_log_probs(model: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A plain transformers forward of each row's unpadded sequence: (B, R) log-probs of the
    response tokens, and the mask of real generated tokens (padding rows excluded)."""
    from trainer.backends.verl.dataproto import PAD_ID

    prompts = batch.batch["prompts"].shape[1]
    out = torch.zeros_like(batch.batch["rollout_log_probs"])
    mask = batch.batch["response_mask"].bool().clone()
    for i, rollout in enumerate(batch.non_tensor_batch["rollout_id"]):
        if rollout == PAD_ID:
            mask[i] = False
            continue
        attended = batch.batch["attention_mask"][i].bool()
        ids = batch.batch["input_ids"][i][attended].to(model.device)[None]
        n_p = int(attended[:prompts].sum())
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0][n_p - 1 :]
        out[i, : lp.shape[0]] = lp.cpu()
    return out, mask


def free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def expect(self, name: str, ok: bool, detail: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if not ok:
            self.failed.append(name)


def check_episodes(model: Any, tokenizer: Any) -> list[Any]:
    """``check``'s rollouts: 3 groups of 4, the first prompt 200 tokens long."""
    return episodes(model, tokenizer, groups=3, n=4, seed=3, long_prompt=200)


def check_overrides(tiny: Path) -> list[str]:
    """``check``'s overrides of the ``smoke`` config."""
    return [
        f"actor_rollout_ref.model.path={tiny}",
        "data.max_prompt_length=128",  # the 200-token prompt is dropped
        "data.max_response_length=256",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=512",  # several micro-batches
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "trainer.save_freq=1",
    ]


def check_verl(checks: Checks, tiny: Path, attn: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.verl.trainer import VerlBackend, checkpoint_version

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    model = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).cuda().eval()
    records = check_episodes(model, tokenizer)
    base = check_overrides(tiny)
    variants = [  # (name, use_remove_padding, mixed precision, tolerance vs fp32 forward)
        ("padding removal off, fp32", False, FP32, 1e-5),
        ("padding removal on, fp32", True, FP32, 1e-5),
        ("padding removal on, bf16 (verl's default)", True, None, 2e-2),
        ("padding removal off, bf16 (verl's default)", False, None, 2e-2),
    ]
    for label, rmpad, precision, tolerance in variants:
        overrides = [*base, f"actor_rollout_ref.model.use_remove_padding={str(rmpad).lower()}"]
        trainer, worker = inprocess_trainer("smoke", overrides, attn, precision)
        batch, metrics = batch_of(trainer, records)
        check_batch(checks, label, trainer, batch, metrics)
        old = old_log_probs(trainer, batch)
        reference, mask = hf_log_probs(model, batch)
        diff = (old - reference).abs()[mask]
        checks.expect(
            f"old log-probs = transformers forward [{label}]",
            float(diff.max()) < tolerance,
            f"max |diff| {float(diff.max()):.3g}, mean {float(diff.mean()):.3g} over "
            f"{int(mask.sum())} tokens (tolerance {tolerance:g})",
        )
        before = [p.detach().float().clone() for p in worker.actor.engine.module.parameters()]
        step: dict[str, float] = {}
        started = time.perf_counter()
        trainer._train_on(copy.deepcopy(batch), step)  # _balance_batch reorders its batch
        seconds = time.perf_counter() - started
        after = list(worker.actor.engine.module.parameters())
        changed = sum(
            not torch.equal(a, b.detach().float()) for a, b in zip(before, after, strict=True)
        )
        moved = (old_log_probs(trainer, batch) - old).abs()[mask]
        finite = all(v == v and abs(v) != float("inf") for v in step.values())
        checks.expect(
            f"update through _train_on [{label}]",
            changed == len(before) and float(moved.mean()) > 0 and finite,
            f"{seconds:.2f} s, {changed}/{len(before)} parameters changed, log-probs moved "
            f"{float(moved.mean()):.3g}; pg_loss {step['actor/pg_loss']:.4g}, "
            f"grad_norm {step['actor/grad_norm']:.4g}, ppo_kl {step['actor/ppo_kl']:.3g}",
        )
        if precision is FP32 and rmpad:
            trained = old_log_probs(trainer, batch)
            with tempfile.TemporaryDirectory() as data_dir:
                trainer.config.trainer.default_local_dir = f"{data_dir}/checkpoints"
                folder = VerlBackend(trainer).save(step=1, version=7)
                trainer = worker = None
                free()
                fresh, worker = inprocess_trainer("smoke", overrides, attn, precision)
                fresh.config.trainer.default_local_dir = f"{data_dir}/checkpoints"
                restored = fresh._restore(done=1)
                diff = (old_log_probs(fresh, batch) - trained).abs()[mask]
                checks.expect(
                    "VerlBackend.save then _restore into a fresh actor",
                    str(restored) == folder and checkpoint_version(restored) == 7
                    and float(diff.max()) < 1e-6,
                    f"{folder}: version {checkpoint_version(restored)}, restored vs trained "
                    f"log-probs max |diff| {float(diff.max()):.3g}",
                )  # fmt: skip
                fresh = None
        trainer = worker = None
        free()


def check_local(checks: Checks, tiny: Path, device: str = "cuda") -> None:
    """The local backend on ``device``: its forward against what the policy server recorded."""
    from trainer.backends.local.learner import Learner
    from trainer.backends.local.policy_server import PolicyServer
    from trainer.backends.local.run import LocalBackend
    from trainer.config import TrainerConfig
    from trainer.loop import LoopOptions

    config = TrainerConfig(group_size=4, batch_groups=3, device=device, lr=1e-3)
    learner = Learner(tiny, config)
    server = PolicyServer(copy.deepcopy(learner.model), learner.tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        backend = LocalBackend(learner, server, config, LoopOptions(checkpoint_dir=Path(folder)))

        def recorded_vs_forward(seed: int) -> torch.Tensor:
            records = episodes(server.model, learner.tokenizer, groups=2, n=4, seed=seed)
            samples, _ = backend.prepare(records)
            batch = learner.collate(samples)
            mask = batch.loss_mask.bool()
            return (learner.logprobs(batch) - batch.rollout_logprobs).abs()[mask], samples

        diff, samples = recorded_vs_forward(seed=1)
        checks.expect(
            f"local learner on {device}: recorded log-probs = trainer forward",
            float(diff.max()) < 1e-4,
            f"max |diff| {float(diff.max()):.3g} over {diff.numel()} tokens "
            f"({next(learner.model.parameters()).dtype})",
        )
        metrics = backend.update(samples, step=1, version=1)
        backend.swap(1)
        diff, _ = recorded_vs_forward(seed=2)
        checks.expect(
            f"local learner on {device}: update, swap, recorded = forward of the new weights",
            float(diff.max()) < 1e-4 and server.version == 1,
            f"update {metrics['perf/update_s']:.2f} s, grad_norm "
            f"{metrics['actor/grad_norm']:.3g}; max |diff| {float(diff.max()):.3g}",
        )


def memory(name: str, attn: str, work: Path, save: bool = False) -> None:
    from trainer.samples import CallRecord, RolloutRecord

    folder = work / f"qwen-{name}"
    params = qwen_checkpoint(name, folder, tiny_checkpoint(work / "tiny"))
    free()
    # One mini-batch (rollout.n samples): the peak of a step does not grow with the number of
    # mini-batches, only with the tokens of one micro-batch (ppo_max_token_len_per_gpu).
    overrides = [
        f"actor_rollout_ref.model.path={folder}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    ]
    trainer, _ = inprocess_trainer(name, overrides, attn)
    held = torch.cuda.memory_allocated() / 2**30
    rollout = trainer.config.actor_rollout_ref.rollout
    p_len, r_len, n = int(rollout.prompt_length), int(rollout.response_length), int(rollout.n)
    rng = random.Random(0)
    records = [
        RolloutRecord(f"r{r}", "g0", float(r % 2), [CallRecord(
            [rng.randrange(151000) for _ in range(p_len)],
            [rng.randrange(151000) for _ in range(r_len)], [-1.0] * r_len, 0)])
        for r in range(n)
    ]  # fmt: skip
    batch, _ = batch_of(trainer, records)
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer._train_on(batch, {})
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**30
    reserved = torch.cuda.max_memory_reserved() / 2**30
    print(
        f"{name}: {params / 1e9:.3f} B parameters; one step on {len(batch)} samples of "
        f"{p_len} + {r_len} tokens ({seconds:.1f} s): peak {peak:.1f} GiB allocated, "
        f"{reserved:.1f} GiB reserved ({held:.1f} GiB held before it, "
        f"{torch.cuda.memory_allocated() / 2**30:.1f} after); the config's estimate: "
        f"{trainer.config.webshop.gpu_memory_estimate_gib} GiB; {torch.cuda.get_device_name()}",
        flush=True,
    )
    if save:  # verl's checkpoint of this model after the step, against webshop.checkpoint_gib
        from trainer.backends.verl.trainer import VerlBackend

        trainer.config.trainer.save_freq = 1
        trainer.config.trainer.default_local_dir = str(work / "checkpoints")
        started = time.perf_counter()
        folder = Path(VerlBackend(trainer).save(step=1, version=1))
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**30
        print(
            f"{name}: checkpoint {size:.2f} GiB in {time.perf_counter() - started:.1f} s; the "
            f"config's estimate: {trainer.config.webshop.checkpoint_gib} GiB",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", choices=("check", "memory", "shape"))
    parser.add_argument("--config", choices=tuple(QWEN_SHAPES), default="fast")
    parser.add_argument("--attn", default="sdpa", help="sdpa or flash_attention_2")
    parser.add_argument("--save", action="store_true", help="memory: also save a checkpoint")
    parser.add_argument("--out", type=Path, help="shape: the checkpoint's folder")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    if args.what == "shape":
        if args.out is None:
            parser.error("shape needs --out")
        tiny = Path(__file__).resolve().parent.parent / "trainer" / "bootstrap" / "tiny-0"
        params = shape_checkpoint(args.config, args.out, tiny)
        print(f"{args.config} shape, {params / 1e6:.0f} M parameters: {args.out}")
        return
    with tempfile.TemporaryDirectory() as work:
        if args.what == "memory":
            memory(args.config, args.attn, Path(work), args.save)
            return
        checks = Checks()
        tiny = tiny_checkpoint(Path(work) / "tiny")
        for part in (
            lambda: check_verl(checks, tiny, args.attn),
            lambda: check_local(checks, tiny),
        ):
            try:
                part()
            except Exception:  # report it and go on to the next part
                traceback.print_exc()
                checks.failed.append("an exception")
        print("all checks passed" if not checks.failed else f"FAILED: {checks.failed}")
        sys.exit(1 if checks.failed else 0)


if __name__ == "__main__":
    main()
