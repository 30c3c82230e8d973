"""Contract: our DataProto is what verl's own agent-loop post-processing builds.

verl's ``AgentLoopWorker._agent_loop_postprocess`` (pads one AgentLoopOutput) and
``_postprocess`` (stacks them into a DataProto) run on the same token sequences as
``build_dataproto``; every tensor verl produces must match ours key for key, shape for
shape and value for value. The worker is created without its Ray/vLLM set-up: only the
attributes these two methods read are set (the rollout widths and a real tokenizer).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from transformers import AutoTokenizer
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
)
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.reward import extract_reward

from trainer.backends.verl.dataproto import build_dataproto, split_sample
from trainer.samples import CallRecord, RolloutRecord, Sample, build_samples

PROMPT_LEN, RESPONSE_LEN = 12, 16


def _rollouts() -> list[RolloutRecord]:
    """Two groups; multi-turn episodes whose later prompts extend earlier ones (one that
    does not, to get a split sample), with distinct rewards."""

    def call(prompt: list[int], response: list[int], version: int = 3) -> CallRecord:
        logprobs = [-0.1 * (k + 1) for k in range(len(response))]
        return CallRecord(prompt, response, logprobs, version)

    turn1 = [5, 6, 7, 8]
    return [
        RolloutRecord(
            "r0",
            "g0",
            1.0,
            [call(turn1, [20, 21, 22]), call([*turn1, 20, 21, 22, 30, 31], [23, 24])],
        ),
        RolloutRecord("r1", "g0", 0.0, [call([5, 6, 9], [25, 26, 27, 28, 29])]),
        RolloutRecord("r2", "g1", 0.5, [call([10, 11], [40]), call([12, 13, 14], [41, 42])]),
        RolloutRecord("r3", "g1", 0.25, [call([10, 11, 15, 16, 17, 18], [43, 44, 45, 46])]),
    ]


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: Path):
    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    # verl pads with the tokenizer's pad id; a non-zero one shows that both sides use it.
    tok.add_special_tokens({"pad_token": "<|test-pad|>"})
    assert tok.pad_token_id not in (None, 0), "the test needs a non-zero pad id to be sharp"
    return tok


@pytest.fixture(scope="module")
def samples_and_rewards() -> tuple[list[Sample], dict[str, float]]:
    rollouts = _rollouts()
    rewards = {r.rollout_id: r.reward for r in rollouts}
    samples, stats = build_samples(rollouts, rewards, "trajectory", max_tokens=64)
    assert stats.prefix_mismatches == 1 and len(samples) == 5
    return samples, rewards


def _verl_dataproto(tokenizer, samples: list[Sample], rewards: dict[str, float]):
    """verl's agent loop post-processing of the same samples."""
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.rollout_config = SimpleNamespace(prompt_length=PROMPT_LEN, response_length=RESPONSE_LEN)
    worker.tokenizer = tokenizer
    worker.processor = None
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False

    async def one(sample: Sample):
        part = split_sample(sample)
        output = AgentLoopOutput(
            prompt_ids=part.prompt_ids,
            response_ids=part.response_ids,
            response_mask=part.response_mask,
            response_logprobs=part.response_logprobs,
            reward_score=rewards[sample.rollout_id],
            num_turns=2,
            metrics=AgentLoopMetrics(),
        )
        return await worker._agent_loop_postprocess(output, validate=False, raw_prompt=[])

    async def all_samples():
        return [await one(s) for s in samples]

    return worker._postprocess(asyncio.run(all_samples()), input_non_tensor_batch=None)


def test_dataproto_matches_verl_agent_loop_key_for_key(tokenizer, samples_and_rewards) -> None:
    samples, rewards = samples_and_rewards
    ours = build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, RESPONSE_LEN)
    theirs = _verl_dataproto(tokenizer, samples, rewards)
    their_keys = set(theirs.batch.keys())
    assert their_keys <= set(ours.batch.keys()), their_keys - set(ours.batch.keys())
    assert set(ours.batch.keys()) - their_keys == {"token_level_scores"}
    for key in sorted(their_keys):
        assert ours.batch[key].shape == theirs.batch[key].shape, key
        assert ours.batch[key].dtype == theirs.batch[key].dtype, key
        assert torch.equal(ours.batch[key], theirs.batch[key]), key
    assert torch.equal(ours.batch["token_level_scores"], theirs.batch["rm_scores"])


def test_dataproto_layout_left_prompt_right_response(tokenizer, samples_and_rewards) -> None:
    samples, rewards = samples_and_rewards
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id)
    first = samples[0]  # r0: prompt [5,6,7,8], then 3 generated, 2 observation, 2 generated
    assert data.batch["prompts"].shape[1] == max(len(split_sample(s).prompt_ids) for s in samples)
    row = data.batch["input_ids"][0].tolist()
    width = data.batch["prompts"].shape[1]
    assert row[width - 4 : width] == [5, 6, 7, 8]
    assert data.batch["response_mask"][0, :7].tolist() == [1, 1, 1, 0, 0, 1, 1]
    assert data.batch["token_level_scores"][0].nonzero().flatten().tolist() == [6]
    assert data.batch["rollout_log_probs"][0, 3:5].tolist() == [0.0, 0.0]
    assert list(data.non_tensor_batch["uid"]) == [s.group_id for s in samples]
    assert first.group_id == "g0"


def test_compute_advantage_grpo_runs_on_dataproto(tokenizer, samples_and_rewards) -> None:
    samples, rewards = samples_and_rewards
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, RESPONSE_LEN)
    reward_tensor, _ = extract_reward(data)
    data.batch["token_level_rewards"] = reward_tensor
    out = compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO, num_repeat=4)
    adv = out.batch["advantages"]  # (B, R), the sample's advantage on its generated tokens
    mask = out.batch["response_mask"].bool()
    assert adv.shape == mask.shape
    assert torch.all(adv[~mask] == 0)
    per_sample = [adv[i][mask[i]].unique() for i in range(len(samples))]
    assert all(len(u) == 1 for u in per_sample)
    # group g0 = samples of r0 (reward 1) and r1 (0): r0 above the mean, r1 below
    values = [float(u[0]) for u in per_sample]
    assert values[0] > 0 > values[1]
    assert np.isclose(values[2] + values[3] + values[4], 0.0, atol=1e-4)  # g1 zero mean


def test_overlong_response_names_the_config_key(tokenizer, samples_and_rewards) -> None:
    samples, rewards = samples_and_rewards
    with pytest.raises(ValueError, match="response_length"):
        build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, response_length=3)


def test_missing_reward_is_an_error(tokenizer, samples_and_rewards) -> None:
    samples, _ = samples_and_rewards
    with pytest.raises(ValueError, match="no reward for rollout"):
        build_dataproto(samples, {"r0": 1.0}, tokenizer.pad_token_id)


def test_sample_without_generated_tokens_is_an_error() -> None:
    sample = Sample("rx", "g", [1, 2, 3], [0, 0, 0], [0.0] * 3, 0.0, 0)
    with pytest.raises(ValueError, match="no generated token"):
        split_sample(sample)


def test_verl_no_padding_conversion_accepts_our_batch(tokenizer, samples_and_rewards) -> None:
    """The first step of verl's ``_compute_old_log_prob`` / ``_update_actor``."""
    from verl.workers.utils.padding import left_right_2_no_padding

    samples, rewards = samples_and_rewards
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, RESPONSE_LEN)
    packed = left_right_2_no_padding(data.to_tensordict())
    lengths = [len(s) for s in samples]
    assert packed["input_ids"].offsets().diff().tolist() == lengths
    flat = packed["input_ids"].values().tolist()
    assert flat == [t for s in samples for t in s.input_ids]


# --- what verl's update needs: mini-batch multiples, fitting samples, rollout-level GRPO ---


def test_any_number_of_turn_samples_passes_verls_mini_batch_split(
    tokenizer, samples_and_rewards
) -> None:
    """verl's ``_update_actor`` splits the batch into ``ppo_mini_batch_size x n`` rows and
    ``make_iterator`` asserts they divide it: 5 turn-samples against a mini-batch of 4 is
    the 552 % 64 failure. Padding rows make it divide and carry no token into the loss."""
    from verl.workers.utils.padding import left_right_2_no_padding

    from trainer.backends.verl.dataproto import PAD_ID, pad_to_multiple

    samples, rewards = samples_and_rewards
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, RESPONSE_LEN)
    with pytest.raises(AssertionError, match="5 % 4"):
        next(iter(data.make_iterator(mini_batch_size=4, epochs=1)))
    padded, added = pad_to_multiple(data, 4)
    assert (len(padded), added) == (8, 3)
    batches = list(padded.make_iterator(mini_batch_size=4, epochs=1))
    assert [len(b) for b in batches] == [4, 4]
    assert padded.batch["response_mask"][5:].sum() == 0
    assert padded.batch["rm_scores"][5:].sum() == 0
    assert list(padded.non_tensor_batch["rollout_id"][5:]) == [PAD_ID] * 3
    assert torch.equal(padded.batch["response_mask"][:5], data.batch["response_mask"])
    packed = left_right_2_no_padding(padded.to_tensordict())
    assert len(packed["input_ids"].offsets().diff()) == 8
    assert pad_to_multiple(padded, 4)[1] == 0


def test_an_overlong_sample_is_dropped_alone(tokenizer, samples_and_rewards) -> None:
    from trainer.backends.verl.dataproto import fitting_samples

    samples, rewards = samples_and_rewards
    longest = max(len(split_sample(s).response_ids) for s in samples)
    kept, dropped = fitting_samples(samples, PROMPT_LEN, longest - 1)
    assert dropped >= 1 and len(kept) == len(samples) - dropped
    assert all(len(split_sample(s).response_ids) < longest for s in kept)
    build_dataproto(kept, rewards, tokenizer.pad_token_id, PROMPT_LEN, longest - 1)


def _turns(rollout_id: str, group: str, reward: float, turns: int) -> RolloutRecord:
    """A rollout of ``turns`` calls whose prompts do not extend each other: one sample a turn."""
    calls = [
        CallRecord([100 + t, 101 + t], [200 + t, 201 + t], [-0.5, -0.25], 1) for t in range(turns)
    ]
    return RolloutRecord(rollout_id, group, reward, calls)


def test_grpo_over_rollouts_of_2_and_10_turns_is_verls_grpo_on_their_rewards(tokenizer) -> None:
    """A group of a 2-turn success and a 10-turn failure (plus two more): each turn-sample
    carries its rollout's advantage, equal to verl's GRPO on one row per rollout. Per-turn
    rows would count the failure ten times in the group's mean and std."""
    from trainer.advantages import rollout_advantages
    from trainer.backends.verl.dataproto import pad_to_multiple, with_rollout_advantages

    rollouts = [
        _turns("a", "g", 1.0, 2),
        _turns("b", "g", 0.0, 10),
        _turns("c", "g", 0.5, 3),
        _turns("d", "g", 0.0, 1),
        _turns("e", "h", 1.0, 2),
        _turns("f", "h", 1.0, 4),
    ]
    rewards = {r.rollout_id: r.reward for r in rollouts}
    groups = {r.rollout_id: r.group_id for r in rollouts}
    samples, _ = build_samples(rollouts, rewards, "trajectory", max_tokens=64)
    assert len(samples) == 22  # one per turn
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id)
    data, _ = pad_to_multiple(data, 8)
    ids = sorted(rewards)
    computed = rollout_advantages([rewards[i] for i in ids], [groups[i] for i in ids], "grpo")
    out = with_rollout_advantages(data, ids, computed)
    # verl's own GRPO on the rollouts' rewards, one row each
    scores = torch.zeros((len(ids), 4))
    scores[:, -1] = torch.tensor([rewards[i] for i in ids])
    level = DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": torch.ones((len(ids), 4))},
        non_tensors={"uid": np.array([groups[i] for i in ids], dtype=object)},
    )
    expected = compute_advantage(level, adv_estimator=AdvantageEstimator.GRPO)
    per_rollout = dict(zip(ids, expected.batch["advantages"][:, 0].tolist(), strict=True))
    mask = out.batch["response_mask"].bool()
    for row, rollout in enumerate(out.non_tensor_batch["rollout_id"]):
        values = out.batch["advantages"][row][mask[row]]
        if rollout == "__pad__":
            assert mask[row].sum() == 0 and out.batch["advantages"][row].abs().sum() == 0
            continue
        assert torch.allclose(values, torch.full_like(values, per_rollout[rollout]), atol=1e-6)
    assert torch.all(out.batch["advantages"][~mask] == 0)
    # the 2-turn success is above its group's mean, the 10-turn failure below, and a group
    # whose rewards are all equal has no advantage at all
    assert per_rollout["a"] > 0 > per_rollout["b"]
    assert per_rollout["e"] == per_rollout["f"] == 0
    # per-turn GRPO (what verl does on these rows) weighs b ten times: another mean
    per_turn = build_dataproto(samples, rewards, tokenizer.pad_token_id)
    per_turn.batch["token_level_rewards"] = per_turn.batch["token_level_scores"]
    turn_level = compute_advantage(per_turn, adv_estimator=AdvantageEstimator.GRPO)
    first_of_a = next(i for i, s in enumerate(samples) if s.rollout_id == "a")
    turn_mask = turn_level.batch["response_mask"][first_of_a].bool()
    assert not np.isclose(
        float(turn_level.batch["advantages"][first_of_a][turn_mask][0]), per_rollout["a"]
    )


def test_the_trainers_batch_is_padded_filtered_and_has_rollout_advantages(tokenizer) -> None:
    """``WebShopPPOTrainer._batch`` on the ``fast`` config (its GPU parts never start: the
    trainer is made with ``__new__`` and only the attributes ``_batch`` reads are set)."""
    from trainer.backends.verl.config import load_config, run_config
    from trainer.backends.verl.dataproto import PAD_ID
    from trainer.backends.verl.trainer import WebShopPPOTrainer

    config = load_config(
        "fast",
        [
            "actor_rollout_ref.rollout.prompt_length=12",
            "actor_rollout_ref.rollout.response_length=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "data.train_batch_size=2",
        ],
    )
    long_one = RolloutRecord(
        "x", "h", 1.0, [CallRecord(list(range(30, 50)), [60, 61], [-0.1, -0.1], 1)]
    )  # a 20-token prompt: over prompt_length 12
    rollouts = [
        _turns("a", "g", 1.0, 2),
        _turns("b", "g", 0.0, 3),
        long_one,
        _turns("y", "h", 0.0, 1),
    ]
    trainer = WebShopPPOTrainer.__new__(WebShopPPOTrainer)
    trainer.config, trainer.shop, trainer.tokenizer = config, config.webshop, tokenizer
    trainer.run = run_config(config)
    batch, metrics = trainer._batch(rollouts, {r.rollout_id: r.reward for r in rollouts})
    assert metrics["batch/dropped_overlong"] == 1.0
    assert len(batch) % 4 == 0 and metrics["batch/padding_rows"] == len(batch) - 6
    ids = list(batch.non_tensor_batch["rollout_id"])
    assert "x" not in ids and ids.count(PAD_ID) == metrics["batch/padding_rows"]
    # y's group still counts x's reward: y (0.0) is below its group's mean (0.5)
    y_row = ids.index("y")
    y_mask = batch.batch["response_mask"][y_row].bool()
    assert float(batch.batch["advantages"][y_row][y_mask][0]) < 0


def test_max_and_min_metrics_are_not_averaged() -> None:
    from trainer.backends.verl.trainer import reduce_metric

    assert reduce_metric("actor/grad_norm", [1.0, 3.0]) == 2.0
    assert reduce_metric("response_length/max", [10, 40, 20]) == 40.0
    assert reduce_metric("actor/pg_clipfrac_max", [0.1, 0.3]) == 0.3
    assert reduce_metric("response_length/min", [10, 40, 20]) == 10.0
    # verl 0.9.1's actor update reports its peak memory per mini-batch under these names
    # (seen on a GPU): the step's peak is the largest, not their mean.
    assert reduce_metric("actor/perf/max_memory_allocated_gb", [14.9, 5.6]) == 14.9
    assert reduce_metric("actor/perf/max_memory_reserved_gb", [21.0, 6.0]) == 21.0
    assert reduce_metric("actor/perf/cpu_memory_used_gb", [2.0, 4.0]) == 3.0


def test_both_backends_train_on_the_same_returns_and_advantages(tokenizer) -> None:
    """One objective: the same records through the shared loop's returns and each backend's
    batch builder give the same per-rollout return and advantage. Two rollouts that buy the
    same in 2 and 4 steps differ only by the discount, which the verl backend used to drop
    (it scored the raw reward)."""
    from trainer.backends.local.run import LocalBackend
    from trainer.backends.verl.config import load_config, run_config
    from trainer.backends.verl.trainer import VerlBackend, WebShopPPOTrainer
    from trainer.loop import episode_returns

    config = load_config(
        "fast",
        [
            "actor_rollout_ref.rollout.prompt_length=12",
            "actor_rollout_ref.rollout.response_length=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.rollout.n=3",
            "data.train_batch_size=2",
        ],
    )
    shared = run_config(config).algorithm
    assert shared.step_discount == 0.95  # the run configuration's, on both backends
    records = [
        _turns("straight", "g", 1.0, 2),
        _turns("detour", "g", 1.0, 4),
        _turns("none", "g", 0.0, 3),
        _turns("half", "h", 0.5, 1),
        _turns("half-late", "h", 0.5, 3),
        _turns("zero", "h", 0.0, 2),
    ]
    returns = episode_returns(records, shared)
    assert returns["straight"] > returns["detour"] > returns["none"] == 0.0

    local_samples, _ = LocalBackend(None, None, shared, None).prepare(records, returns)  # type: ignore[arg-type]
    local = {s.rollout_id: s.advantage for s in local_samples}

    trainer = WebShopPPOTrainer.__new__(WebShopPPOTrainer)
    trainer.config, trainer.shop, trainer.tokenizer = config, config.webshop, tokenizer
    trainer.run = run_config(config)
    backend = VerlBackend.__new__(VerlBackend)
    backend.trainer = trainer
    batch, _ = backend.prepare(records, returns)
    mask = batch.batch["response_mask"].bool()
    verl_adv: dict[str, float] = {}
    verl_score: dict[str, float] = {}
    for row, rollout in enumerate(batch.non_tensor_batch["rollout_id"]):
        if rollout == "__pad__":
            continue
        verl_adv[rollout] = float(batch.batch["advantages"][row][mask[row]][0])
        scores = batch.batch["rm_scores"][row]
        verl_score[rollout] = float(scores[scores != 0][0]) if scores.any() else 0.0
    assert set(verl_adv) == set(local) == {r.rollout_id for r in records}
    for rollout_id, advantage in local.items():
        assert verl_adv[rollout_id] == pytest.approx(advantage, abs=1e-5), rollout_id
        assert verl_score[rollout_id] == pytest.approx(returns[rollout_id], abs=1e-6)
    assert local["straight"] > local["detour"] > 0 > local["none"]


def test_the_served_and_the_trainers_logprobs_are_compared_on_our_batch(
    tokenizer, samples_and_rewards
) -> None:
    """verl's rollout-vs-actor metrics (what the GPU report gives per step) read our
    batch: the served logprobs against the trainer's, over generated tokens only."""
    from trainer.backends.verl.dataproto import served_vs_trainer

    samples, rewards = samples_and_rewards
    data = build_dataproto(samples, rewards, tokenizer.pad_token_id, PROMPT_LEN, RESPONSE_LEN)
    served = data.batch["rollout_log_probs"]
    mask = data.batch["response_mask"].bool()
    assert served_vs_trainer(data) == {}  # before the trainer's own forward
    data.batch["old_log_probs"] = served.clone()
    same = served_vs_trainer(data)
    assert same["training/rollout_probs_diff_valid"] == 1
    assert same["training/rollout_probs_diff_max"] == 0.0
    moved = served.clone()
    row, col = mask.nonzero()[0].tolist()  # one generated token, made 0.1 nats likelier
    moved[row, col] += 0.1
    moved[~mask] = 5.0  # off the mask: never counted
    data.batch["old_log_probs"] = moved
    diff = served_vs_trainer(data)
    expected = float(torch.exp(moved[row, col]) - torch.exp(served[row, col]))
    assert abs(diff["training/rollout_probs_diff_max"] - expected) < 1e-6
    assert 0 < diff["training/rollout_probs_diff_mean"] < expected
