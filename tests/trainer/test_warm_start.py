"""``wsrl policy bootstrap --model``: SmolLM2 imitates the tiny policy's demonstrations in its
own chat template, and the folder is played with the protocol of those demonstrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.webshop.env import WebShopEnv
from trainer.bootstrap import demonstrations
from trainer.bootstrap.build import action_nll, gather
from trainer.bootstrap.shipped import MANIFEST, file_hashes
from trainer.bootstrap.warm_start import WarmStartConfig, warm_start
from trainer.checkpoint_protocol import policy_protocol
from trainer.tensors import collate

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow

# Two whole episodes (8 demonstrator steps), four optimiser steps at a step size that moves
# 135 M parameters visibly in so few.
SMALL = WarmStartConfig(
    episodes=2, search_goals=0, result_goals=0, option_goals=0, epochs=2, batch_size=4, lr=1e-4
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    return WebShopEnv.load(cache_dir=tmp_path_factory.mktemp("catalog"))


def reply_nll(folder: Path, env: WebShopEnv) -> float:
    """Mean loss of the demonstrations' replies under the weights in ``folder``."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    samples = [
        demonstrations.to_sample(d, tokenizer) for d in gather(env, SMALL.demonstrations()).demos
    ]
    with torch.no_grad():
        return action_nll(model, collate(samples, tokenizer.eos_token_id)).item()


def test_smollm2_learns_the_demonstrations_and_is_played_as_they_were(
    smollm2: Path, env: WebShopEnv, tmp_path: Path, test_settings
) -> None:
    base_files = file_hashes(smollm2)
    out = tmp_path / "warm"
    manifest = warm_start(env, smollm2, out, SMALL, device="cpu")
    assert not manifest["cached"] and manifest["demonstrations"] == 8
    written = json.loads((out / MANIFEST).read_text())
    assert written["base"] == str(smollm2.resolve()) and written["result_refs"] == "numbers"
    assert file_hashes(smollm2) == base_files  # the converted model is left as it was
    before, after = reply_nll(smollm2, env), reply_nll(out, env)
    assert after < 0.7 * before, (before, after)
    protocol = policy_protocol(test_settings, out)
    assert (str(protocol.mode), protocol.history_steps, str(protocol.result_refs)) == (
        "text",
        1,
        "numbers",
    )
    # What docker/gpu/first-run.sh gives verl for a warm start: its demonstrations' protocol.
    from trainer.backends.verl.config import agent_protocol_of, load_config

    overrides = [f"actor_rollout_ref.model.path={out}"]
    overrides += [f"webshop.history_steps={written['history_steps']}"]
    overrides += [f"webshop.result_refs={written['result_refs']}"]
    verl = agent_protocol_of(load_config("smollm2", overrides), test_settings, "smollm2")
    assert verl == replace(protocol, constrain_actions=False)
    again = warm_start(env, smollm2, out, SMALL, device="cpu")
    assert again["cached"] and again["files"] == manifest["files"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--model", "nowhere-model"], "neither a model `wsrl model get` converted"),
        (["--model", "smollm2-135m"], "is not converted yet: run `wsrl model get smollm2-135m`"),
        (["--model", "tiny", "--hidden", "64"], "a pretrained model has its own shape"),
        (["--device", "cuda"], "the tiny policy builds on the CPU"),
    ],
)
def test_a_bad_warm_start_is_refused_before_anything_loads(
    options: list[str], says: str, tmp_path: Path
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "app.cli", "policy", "bootstrap", *options],
        capture_output=True,
        text=True,
        env={**os.environ, "WSRL_DATA_DIR": str(tmp_path), "COLUMNS": "300"},
        timeout=120,
    )
    assert run.returncode == 2 and says in " ".join(run.stderr.split()), run.stderr
    assert not (tmp_path / "policy").exists()
