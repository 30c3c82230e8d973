"""Tiny-policy bootstrap smoke test: fair demonstrations -> SFT -> HF checkpoint."""

import json
import re
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.core.agent import DEFAULT_PROTOCOL
from app.environments.webshop.agent import parse_action
from app.webshop.env import WebShopEnv
from trainer.bootstrap import demonstrations
from trainer.bootstrap.build import (
    BootstrapConfig,
    _drills,
    action_nll,
    bootstrap,
    cached_manifest,
    gather,
)
from trainer.bootstrap.copy_pretraining import CopyTask
from trainer.bootstrap.inprocess_eval import evaluate
from trainer.bootstrap.shipped import MANIFEST, SHIPPED, file_hashes, fingerprint, shipped_manifest
from trainer.bootstrap.tiny_policy import TinySize, train_tokenizer
from trainer.samples import Sample
from trainer.tensors import collate, token_logprobs

IDS = replace(DEFAULT_PROTOCOL, max_steps=15, result_refs="ids")
"""The demonstrations' protocol in these tests unless they say otherwise: results by id."""
HISTORY_1 = replace(IDS, history_steps=1)
NUMBERED = replace(HISTORY_1, result_refs="numbers")
TWO_STEPS = replace(DEFAULT_PROTOCOL, max_steps=2)
TINY = BootstrapConfig(
    seed=3,
    episodes=3,
    epochs=1,
    batch_size=4,
    search_goals=6,
    result_goals=3,
    option_goals=2,
    copy=CopyTask(steps=3, batch_size=2),
    size=TinySize(vocab_size=500, hidden_size=32, layers=2, heads=2, intermediate_size=64),
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    return WebShopEnv.load(cache_dir=tmp_path_factory.mktemp("catalog"))


@pytest.fixture(scope="module")
def progress_calls() -> list[tuple]:
    return []


@pytest.fixture(scope="module")
def built(
    env: WebShopEnv, tmp_path_factory: pytest.TempPathFactory, progress_calls: list[tuple]
) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("tiny") / "a"
    return out, bootstrap(env, out, TINY, progress=lambda *call: progress_calls.append(call))


def test_bootstrap_reports_phase_and_epoch_progress(built, progress_calls: list[tuple]) -> None:
    phases = list(dict.fromkeys(phase for phase, *_ in progress_calls))
    assert phases == ["demonstrations", "tokenizer", "copy pretraining", "imitation"]
    for phase in phases:
        last = [call for call in progress_calls if call[0] == phase][-1]
        assert last[1] == last[2], last  # every phase ends complete
    imitation = [call for call in progress_calls if call[0] == "imitation"]
    assert [call[1] for call in imitation] == list(range(1, len(imitation) + 1))
    assert imitation[-1][3].startswith("epoch 1/1, loss ")


def test_too_many_episodes_is_a_clear_error(env: WebShopEnv, tmp_path: Path) -> None:
    config = BootstrapConfig(episodes=len(env.goal_ids("train")) + 1)
    with pytest.raises(ValueError, match="lower --episodes"):
        bootstrap(env, tmp_path / "x", config)


def test_demonstrations_are_parseable_agent_prompts(env: WebShopEnv) -> None:
    goal = env.goal_ids("train")[0]
    demos = demonstrations.episode(env, goal, HISTORY_1)
    assert demos[0].action.startswith("search[")
    assert demos[-1].action == "click[buy now]"
    assert all(parse_action(d.action) == d.action for d in demos)
    assert demos[0].messages[1]["content"].startswith("Instruction:")
    assert "(the last 1 of 2)" in demos[2].messages[1]["content"]


def test_demonstrations_act_only_on_what_the_policy_sees(env: WebShopEnv) -> None:
    """The search is the instruction's own words (never the hidden title), and every
    click is one of the listed actions of its prompt."""
    for goal_id in env.goal_ids("train")[:20]:
        demos = demonstrations.episode(env, goal_id, HISTORY_1)
        keywords = demos[0].action.removeprefix("search[").removesuffix("]")
        assert env.goals[goal_id].instruction.lower().startswith(keywords)
        for demo in demos[1:]:
            assert demo.action in demo.messages[1]["content"].split("Available actions:")[1]


def test_demonstrations_succeed_on_most_goals(env: WebShopEnv) -> None:
    """Imitating them is worth it: clicking the best-ranked result and the instruction's
    options buys the right product on about 59 % of test goals (55 % of targets rank
    first)."""
    goals = env.goal_ids("test")[:40]
    rewards = []
    for goal_id in goals:
        session = env.new_session(goal_id)
        for _ in range(15):
            action = demonstrations.fair_action(
                session.goal, session.available_actions(), session.history
            )
            result = session.step(action)
            if result.done:
                rewards.append(result.reward)
                break
    assert sum(r == 1.0 for r in rewards) >= 0.45 * len(goals)
    assert sum(rewards) / len(goals) >= 0.75


def test_numbered_demonstrations_open_a_listed_place_drawn_per_goal(env: WebShopEnv) -> None:
    """The random build's demonstrator (results by number, a result drawn at random):
    every reply is one of its prompt's listed actions, a result is named by its place and
    opens the product listed there, and the places spread over the page, the same ones on
    every build."""
    places = []
    for goal_id in env.goal_ids("train")[:30]:
        demos = demonstrations.episode(env, goal_id, NUMBERED, "random")
        again = demonstrations.episode(env, goal_id, NUMBERED, "random")
        assert [d.reply for d in demos] == [d.reply for d in again]
        for demo in demos[1:]:
            listed = demo.messages[1]["content"].split("Available actions:\n")[1].split("\n")
            assert parse_action(demo.reply) in listed, demo.reply
            if demonstrations.action_kind(demo.action) == "item":
                assert re.fullmatch(r"click\[\d+\]", demo.reply) and demo.action != demo.reply
                places.append(demo.reply)
    assert len(places) >= 30 and len(set(places)) >= 6
    assert BootstrapConfig().result_refs == "numbers"
    assert BootstrapConfig().result_choice == "first"  # the default: docs/decisions/0039


def test_tokenizer_makes_product_ids_single_tokens_and_decodes_exactly(
    env: WebShopEnv, built
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(built[0]))
    asin = env.product(7).asin
    ids = tokenizer.encode(f"click[{asin.lower()}]", add_special_tokens=False)
    assert len(ids) == 4  # "click", "[", the id, "]"
    assert tokenizer.decode(ids) == f"click[{asin.lower()}]"
    text = f"Step 2: click[pack of 1]\nObservation: {asin} [SEP] $10.97  two  spaces ~"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_demonstration_sample_masks_only_the_reply(env: WebShopEnv, built) -> None:
    out, manifest = built
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    demo = demonstrations.episode(env, env.goal_ids("train")[1], IDS)[0]
    sample = demonstrations.to_sample(demo, tokenizer)
    generated = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    assert tokenizer.decode(generated, skip_special_tokens=True) == demo.reply
    assert parse_action(demo.reply) == demo.action
    assert generated[-1] == tokenizer.eos_token_id
    assert manifest["demonstrations"] >= 3


def test_replies_repeat_the_tokens_of_the_prompt(env: WebShopEnv, built) -> None:
    """A search or option reply's words are the same tokens as in the instruction (the
    space after the bracket); a product id is written as listed."""
    tokenizer = AutoTokenizer.from_pretrained(str(built[0]))
    for demo in demonstrations.episode(env, env.goal_ids("train")[1], IDS):
        if demonstrations.action_kind(demo.action) not in ("search", "item", "option"):
            continue
        prompt = tokenizer.encode(demo.messages[-1]["content"], add_special_tokens=False)
        argument = tokenizer.encode(demo.reply, add_special_tokens=False)[2:-1]
        assert set(argument) <= set(prompt), demo.reply
    assert demonstrations.Demonstration(0, [], "click[b0a1b2c3d4]").reply == "click[b0a1b2c3d4]"
    assert demonstrations.Demonstration(0, [], "click[buy now]").reply == "click[ buy now]"


def test_bootstrap_writes_loadable_cached_reproducible_checkpoint(
    env: WebShopEnv, built, tmp_path: Path
) -> None:
    out, first = built
    assert first["cached"] is False and first["shipped"] is False and first["parameters"] > 0
    assert first["files"] == file_hashes(out) and "model.safetensors" in first["files"]
    assert first["built_with"]["torch"] == torch.__version__
    assert first["built_with"]["torch_threads"] == torch.get_num_threads()
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
    result = evaluate(
        model, tokenizer, env, goals, protocol=TWO_STEPS, temperature=1.0, max_tokens=8
    )
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


def test_loaded_tokenizer_encodes_as_the_one_trained_on(
    env: WebShopEnv, built, tmp_path: Path
) -> None:
    """AutoTokenizer rebuilds a qwen2 checkpoint's tokenizer pipeline; the prompts the
    policy was trained on must encode to the same ids after loading."""
    out, _ = built
    loaded = AutoTokenizer.from_pretrained(str(out))
    texts = [m["content"] for d in demonstrations.episode(env, 11, IDS) for m in d.messages]
    trained = train_tokenizer(texts, 500, [env.product(i).asin.lower() for i in range(20)])
    trained.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((out / "config.json").read_text())  # model_type qwen2
    reloaded = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in texts:
        assert reloaded.encode(text) == trained.encode(text)
    assert type(loaded) is type(reloaded)


def test_action_kinds_name_each_decision(env: WebShopEnv) -> None:
    goal_id = next(
        g for g in env.goal_ids("train") if len(demonstrations.episode(env, g, HISTORY_1)) >= 4
    )
    kinds = [
        demonstrations.action_kind(d.action) for d in demonstrations.episode(env, goal_id, IDS)
    ]
    assert kinds[:2] == ["search", "item"] and kinds[-1] == "buy"
    assert set(kinds[2:-1]) == {"option"}
    assert demonstrations.action_kind("click[next >]") == "other"
    assert demonstrations.action_kind("click[b0a1b2c3d4]") == "item"


def test_drills_keep_only_the_practised_decision(env: WebShopEnv) -> None:
    goals = env.goal_ids("train")[:8]
    items = _drills(env, goals, 2, ("item",), TINY)
    item_page = _drills(env, goals, 15, ("option", "buy"), TINY)
    assert len(items) == len(goals)  # every search lists results; one first-result click each
    assert {demonstrations.action_kind(d.action) for d in items} == {"item"}
    assert {demonstrations.action_kind(d.action) for d in item_page} == {"option", "buy"}


REBUILD = "wsrl policy bootstrap --force --out trainer/bootstrap/tiny-0"


@pytest.fixture(scope="module")
def todays_digest(env: WebShopEnv) -> str:
    """The fingerprint of what the default configuration would build today."""
    return fingerprint(gather(env, BootstrapConfig()), BootstrapConfig())


def test_the_shipped_tiny_policy_is_built_from_todays_inputs_and_intact(todays_digest: str) -> None:
    """The repository's tiny policy stands for what the bootstrap would build today: the
    same configuration, demonstrations, tokenizer texts and code. A change to any of
    them fails here until the policy is rebuilt and committed."""
    manifest = json.loads((SHIPPED / MANIFEST).read_text())
    assert manifest["config"] == json.loads(json.dumps(asdict(BootstrapConfig())))
    assert manifest["fingerprint"] == todays_digest, (
        f"the bootstrap's inputs or code changed since trainer/bootstrap/tiny-0 was built: "
        f"rebuild it ({REBUILD}, about 8 minutes) and commit it"
    )
    assert file_hashes(SHIPPED) == manifest["files"], "trainer/bootstrap/tiny-0 was altered"


def test_a_fresh_data_folder_gets_the_shipped_policy_in_seconds(
    env: WebShopEnv, todays_digest: str, tmp_path: Path
) -> None:
    assert shipped_manifest(todays_digest) is not None, f"out of date: {REBUILD}"  # else 8 min
    started = time.perf_counter()
    out = tmp_path / "policy" / "tiny-0"
    first = bootstrap(env, out, BootstrapConfig())
    assert first["shipped"] is True and first["cached"] is False
    assert time.perf_counter() - started < 60  # a build takes 8 minutes
    assert file_hashes(out) == file_hashes(SHIPPED)
    assert bootstrap(env, out, BootstrapConfig())["cached"] is True
    assert AutoModelForCausalLM.from_pretrained(str(out)).num_parameters() > 1_000_000


def test_a_shipped_policy_built_from_other_inputs_is_not_used(
    env: WebShopEnv, built, tmp_path: Path
) -> None:
    """A config other than the shipped one's, or the same config after its demonstrations
    or code changed, builds: the fingerprints differ."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / MANIFEST).write_text(json.dumps({"fingerprint": "0" * 64}))
    digest = fingerprint(gather(env, TINY), TINY)
    assert shipped_manifest(digest, shipped) is None
    assert shipped_manifest(digest, built[0])["fingerprint"] == digest  # a build records its own
    out = tmp_path / "out"
    assert bootstrap(env, out, TINY, shipped=shipped)["shipped"] is False
    assert bootstrap(env, tmp_path / "again", TINY, shipped=built[0])["shipped"] is True
