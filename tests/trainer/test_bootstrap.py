"""Tiny-policy bootstrap smoke test: oracle demonstrations -> SFT -> HF checkpoint."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.webshop.env import WebShopEnv
from trainer import demonstrations
from trainer.bootstrap import BootstrapConfig, action_nll, bootstrap, cached_manifest
from trainer.inprocess_eval import evaluate
from trainer.samples import Sample
from trainer.tensors import collate, token_logprobs
from trainer.tiny_policy import TinySize
from workers.agent import parse_action

TINY = BootstrapConfig(
    seed=3,
    episodes=3,
    epochs=1,
    batch_size=4,
    size=TinySize(vocab_size=500, hidden_size=32, layers=2, heads=2, intermediate_size=64),
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    return WebShopEnv.load(cache_dir=tmp_path_factory.mktemp("catalog"))


@pytest.fixture(scope="module")
def built(env: WebShopEnv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("tiny") / "a"
    return out, bootstrap(env, out, TINY)


def test_too_many_episodes_is_a_clear_error(env: WebShopEnv, tmp_path: Path) -> None:
    config = BootstrapConfig(episodes=len(env.goal_ids("train")) + 1)
    with pytest.raises(ValueError, match="lower --episodes"):
        bootstrap(env, tmp_path / "x", config)


def test_oracle_demonstrations_are_parseable_agent_prompts(env: WebShopEnv) -> None:
    goal = env.goal_ids("train")[0]
    demos = demonstrations.oracle_episode(env, goal, max_steps=15)
    assert demos[0].action.startswith("search[")
    assert demos[-1].action == "click[buy now]"
    assert all(parse_action(d.action) == d.action for d in demos)
    assert demos[0].messages[1]["content"].startswith("Instruction:")


def test_demonstration_sample_masks_only_the_action(env: WebShopEnv, built) -> None:
    out, manifest = built
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    demo = demonstrations.oracle_episode(env, env.goal_ids("train")[1], 15)[0]
    sample = demonstrations.to_sample(demo, tokenizer)
    generated = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    assert tokenizer.decode(generated, skip_special_tokens=True) == demo.action
    assert generated[-1] == tokenizer.eos_token_id
    assert manifest["demonstrations"] >= 3


def test_bootstrap_writes_loadable_cached_reproducible_checkpoint(
    env: WebShopEnv, built, tmp_path: Path
) -> None:
    out, first = built
    assert first["cached"] is False and first["parameters"] > 0
    assert bootstrap(env, out, TINY)["cached"] is True
    bootstrap(env, tmp_path / "b", TINY)
    a = AutoModelForCausalLM.from_pretrained(str(out))
    b = AutoModelForCausalLM.from_pretrained(str(tmp_path / "b"))
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|><|user|>\nhi<|im_end|>\n<|im_start|><|assistant|>\n"
    assert cached_manifest(out, replace(TINY, seed=4)) is None


def test_inprocess_evaluation_plays_episodes(env: WebShopEnv, built) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(built[0]))
    tokenizer = AutoTokenizer.from_pretrained(str(built[0]))
    goals = env.goal_ids("test")[:2]
    result = evaluate(model, tokenizer, env, goals, temperature=1.0, max_steps=2, max_tokens=8)
    assert len(result.rewards) == 2
    assert 2 <= result.steps <= 4
    assert 0.0 <= result.success_rate <= 1.0


def test_action_nll_equals_masked_mean_of_token_logprobs(tiny_checkpoint) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint))
    samples = [
        Sample("a", "g", [1, 5, 6, 7, 8], [0, 0, 0, 1, 1], [0.0] * 5, 1.0, 0),
        Sample("b", "g", [1, 9, 10], [0, 0, 1], [0.0] * 3, 1.0, 0),
    ]
    batch = collate(samples, pad_id=0)
    with torch.no_grad():
        lp = token_logprobs(
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
            batch.input_ids,
        )
        expected = -(lp * batch.loss_mask).sum() / batch.loss_mask.sum()
        assert torch.allclose(action_nll(model, batch), expected, atol=1e-5)
        context = batch.attention_mask[:, 1:] * (1 - batch.loss_mask)  # (B, T-1)
        with_context = expected - 0.5 * (lp * context).sum() / context.sum()
        assert torch.allclose(action_nll(model, batch, 0.5), with_context, atol=1e-5)
