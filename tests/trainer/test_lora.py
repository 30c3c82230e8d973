"""LoRA on the local backend: only the adapter trains, checkpoints hold the adapter, a sync
moves only the adapter into the served model, and a merge gives the same policy."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import openai
import pytest
import torch
from helpers.learner_samples import SAMPLES
from transformers import AutoModelForCausalLM

from trainer.backends.local.learner import Learner
from trainer.backends.local.policy_server import PolicyServer
from trainer.config import Lora, TrainerConfig
from trainer.lora import AdapterCopy, LoraError, is_adapter, merge
from trainer.samples import Sample
from trainer.tensors import collate

LORA = Lora(rank=4, alpha=8)


def response_logprobs(learner: Learner) -> torch.Tensor:
    return learner.logprobs(collate(SAMPLES, learner.pad_id))


def base_weights(model) -> dict[str, torch.Tensor]:
    """The base model's own tensors, by their names in a plain checkpoint."""
    return {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach().clone()
        for k, v in model.state_dict().items()
        if "lora_" not in k
    }


def test_an_update_trains_the_adapter_and_leaves_the_base_weights(tiny_checkpoint) -> None:
    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2), lora=LORA)
    before = response_logprobs(learner)
    trained = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    for _ in range(3):
        learner.update(SAMPLES)
    after = response_logprobs(learner)
    assert after[0].sum() > before[0].sum() and after[1].sum() < before[1].sum()
    original = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    expected = original.state_dict()
    for name, value in base_weights(learner.model).items():
        assert torch.equal(value, expected[name]), name


def test_a_checkpoint_holds_the_adapter_and_resumes_it(tiny_checkpoint, tmp_path: Path) -> None:
    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2), lora=LORA)
    learner.update(SAMPLES)
    saved = learner.save(tmp_path / "step-1")
    assert is_adapter(saved)
    adapter_bytes = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    full_bytes = sum(p.stat().st_size for p in Path(tiny_checkpoint).glob("*.safetensors"))
    assert adapter_bytes < full_bytes / 5, (adapter_bytes, full_bytes)
    resumed = Learner(saved, TrainerConfig(), lora=LORA)
    torch.testing.assert_close(response_logprobs(resumed), response_logprobs(learner))
    with pytest.raises(LoraError, match="rank 4: resume it with --lora-rank 4"):
        Learner(saved, TrainerConfig(), lora=Lora(rank=8))


def test_a_merged_adapter_is_the_same_policy(tiny_checkpoint, tmp_path: Path) -> None:
    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2), lora=LORA)
    learner.update(SAMPLES)
    merged = merge(learner.save(tmp_path / "adapter"), tmp_path / "merged")
    assert not is_adapter(merged)
    plain = Learner(merged, TrainerConfig())
    torch.testing.assert_close(
        response_logprobs(plain), response_logprobs(learner), atol=1e-5, rtol=0
    )
    with pytest.raises(LoraError, match="holds no LoRA adapter"):
        merge(merged, tmp_path / "again")


def test_unknown_target_modules_are_refused_by_name(tiny_checkpoint) -> None:
    with pytest.raises(LoraError, match="--lora-target-modules no_such_proj"):
        Learner(
            tiny_checkpoint, TrainerConfig(), lora=Lora(rank=4, target_modules=("no_such_proj",))
        )


def test_a_sync_moves_only_the_adapter_into_the_server(tiny_checkpoint) -> None:
    """The served model keeps its base tensors (the same storage) and serves the trained
    adapter; the adapter sync is measured against the whole-model copy it replaces."""
    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2), lora=LORA)
    server = PolicyServer(copy.deepcopy(learner.model), learner.tokenizer, version=0, gather_ms=1)
    base_storage = {n: p.data_ptr() for n, p in server.model.named_parameters() if "lora_" not in n}
    for _ in range(2):
        learner.update(SAMPLES)
    started = time.perf_counter()
    server.load_adapter(AdapterCopy(learner.model, server.model), version=2)
    adapter_s = time.perf_counter() - started
    started = time.perf_counter()
    copy.deepcopy(learner.model)
    full_s = time.perf_counter() - started
    assert server.version == 2
    assert {
        n: p.data_ptr() for n, p in server.model.named_parameters() if "lora_" not in n
    } == base_storage
    handle = server.start()
    try:
        client = openai.OpenAI(base_url=handle.base_url, api_key="EMPTY", max_retries=0)
        response = client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "Instruction: buy a red shirt"}],
            max_tokens=8,
            logprobs=True,
            extra_body={"return_token_ids": True},
        ).model_dump()
    finally:
        handle.stop()
    prompt, choice = response["prompt_token_ids"], response["choices"][0]
    served = torch.tensor([t["logprob"] for t in choice["logprobs"]["content"]])
    ids = prompt + choice["token_ids"]
    mask = [0] * len(prompt) + [1] * len(choice["token_ids"])
    call = Sample("r", "g", ids, mask, [0.0] * len(ids), 0.0, 0)
    ours = learner.logprobs(collate([call], learner.pad_id))[0, len(prompt) - 1 :]
    torch.testing.assert_close(ours, served, atol=1e-4, rtol=0)
    print(f"tiny policy sync: adapter {adapter_s * 1e3:.2f} ms, whole model {full_s * 1e3:.1f} ms")


def test_wsrl_policy_merge_writes_a_whole_checkpoint_or_nothing(
    tiny_checkpoint, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2), lora=LORA)
    learner.update(SAMPLES)
    adapter = learner.save(tmp_path / "step-1")
    runner = CliRunner()
    out = tmp_path / "merged"
    result = runner.invoke(cli, ["policy", "merge", str(adapter), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "config.json").is_file() and not is_adapter(out)
    torch.testing.assert_close(
        response_logprobs(Learner(out, TrainerConfig())),
        response_logprobs(learner),
        atol=1e-5,
        rtol=0,
    )
    again = runner.invoke(cli, ["policy", "merge", str(adapter), "--out", str(out)])
    assert again.exit_code == 1 and "exists; name a new folder" in again.output
    plain = runner.invoke(cli, ["policy", "merge", str(out), "--out", str(tmp_path / "x")])
    assert plain.exit_code == 1 and "holds no LoRA adapter" in plain.output
    assert not (tmp_path / "x").exists()


def test_the_kl_reference_of_an_adapter_is_its_base_with_no_second_copy(tiny_checkpoint) -> None:
    learner = Learner(tiny_checkpoint, TrainerConfig(lr=3e-2, kl_coef=0.1), lora=LORA)
    assert learner.reference is None  # the base under the adapter is the reference
    first = learner.update(SAMPLES)
    assert first["losses/kl"] == pytest.approx(0.0, abs=1e-9)  # a fresh adapter adds nothing
    later = [learner.update(SAMPLES)["losses/kl"] for _ in range(3)]
    assert later[-1] > 1e-6, later
