"""Samples from recorded calls: masks, prefix-mismatch splits, over-length drops."""

import pytest

from trainer.samples import CallRecord, RolloutRecord, build_samples
from trainer.tensors import collate


def call(prompt: list[int], response: list[int], version: int = 3) -> CallRecord:
    logprobs = [-0.1 * (i + 1) for i in range(len(response))]
    return CallRecord(prompt, response, logprobs, version)


def rollout(calls: list[CallRecord], rid: str = "r1", reward: float = 1.0) -> RolloutRecord:
    return RolloutRecord(rollout_id=rid, group_id="g1", reward=reward, calls=calls)


def test_transition_mode_one_sample_per_call_with_response_mask() -> None:
    r = rollout([call([1, 2, 3], [4, 5]), call([1, 2, 3, 4, 5, 6], [7])])
    samples, stats = build_samples([r], {"r1": 0.5}, "transition", 100)
    assert [s.input_ids for s in samples] == [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7]]
    assert [s.loss_mask for s in samples] == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1]]
    assert samples[0].rollout_logprobs == [0.0, 0.0, 0.0, -0.1, -0.2]
    assert all(s.advantage == 0.5 for s in samples)
    assert stats.samples == 2 and stats.prefix_mismatches == 0 and stats.generated_tokens == 3


def test_trajectory_mode_concatenates_extending_turns() -> None:
    calls = [call([1, 2], [3, 4], version=5), call([1, 2, 3, 4, 9, 9], [7, 8], version=4)]
    samples, stats = build_samples([rollout(calls)], {"r1": -1.0}, "trajectory", 100)
    assert len(samples) == 1
    s = samples[0]
    assert s.input_ids == [1, 2, 3, 4, 9, 9, 7, 8]
    assert s.loss_mask == [0, 0, 1, 1, 0, 0, 1, 1]
    assert s.rollout_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.1, -0.2]
    assert s.policy_version_min == 4
    assert s.advantage == -1.0
    assert stats.prefix_mismatches == 0


def test_trajectory_mode_splits_on_prefix_mismatch_and_counts_it() -> None:
    # The second prompt rewrote history (e.g. a truncated window): not an extension.
    calls = [call([1, 2], [3]), call([1, 9, 3, 4], [5]), call([1, 9, 3, 4, 5, 6], [7])]
    samples, stats = build_samples([rollout(calls)], {"r1": 1.0}, "trajectory", 100)
    assert [s.input_ids for s in samples] == [[1, 2, 3], [1, 9, 3, 4, 5, 6, 7]]
    assert samples[1].loss_mask == [0, 0, 0, 0, 1, 0, 1]
    assert stats.prefix_mismatches == 1


def test_prompt_shorter_than_previous_sequence_is_a_mismatch() -> None:
    calls = [call([1, 2], [3, 4]), call([1, 2, 3], [4])]
    samples, stats = build_samples([rollout(calls)], {"r1": 1.0}, "trajectory", 100)
    assert len(samples) == 2 and stats.prefix_mismatches == 1


def test_overlength_samples_dropped_and_counted() -> None:
    r1 = rollout([call([1] * 8, [2, 3])], rid="r1")
    r2 = rollout([call([1] * 3, [2, 3])], rid="r2")
    samples, stats = build_samples([r1, r2], {"r1": 1.0, "r2": 0.0}, "transition", 9)
    assert [s.rollout_id for s in samples] == ["r2"]
    assert stats.dropped_overlength == 1 and stats.samples == 1


def test_overlength_trajectory_dropped_whole() -> None:
    calls = [call([1, 2], [3]), call([1, 2, 3, 4], [5, 6])]
    samples, stats = build_samples([rollout(calls)], {"r1": 1.0}, "trajectory", 5)
    assert samples == [] and stats.dropped_overlength == 1


def test_empty_response_calls_skipped_and_counted() -> None:
    calls = [call([1, 2], []), call([1, 2], [3])]
    samples, stats = build_samples([rollout(calls)], {"r1": 1.0}, "trajectory", 100)
    assert len(samples) == 1 and stats.skipped_empty_calls == 1


def test_logprob_count_mismatch_is_an_error() -> None:
    bad = CallRecord([1, 2], [3, 4], [-0.5], 0)
    with pytest.raises(ValueError, match="2 response tokens but 1 logprobs"):
        build_samples([rollout([bad])], {"r1": 1.0}, "transition", 100)


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="use 'transition' or 'trajectory'"):
        build_samples([], {}, "episode", 100)


def test_token_weighting_leaves_every_sample_at_one() -> None:
    long = rollout([call([1], [2, 3]), call([1, 9], [4, 5]), call([1, 8], [6, 7])], "long")
    samples, _ = build_samples([long], {"long": 1.0}, "transition", 100)
    assert [s.weight for s in samples] == [1.0, 1.0, 1.0]


def test_rollout_weighting_gives_every_rollout_the_same_total_weight() -> None:
    # A failure that wandered for three turns (6 tokens) and a success of one turn (2).
    long = rollout([call([1], [2, 3]), call([1, 9], [4, 5]), call([1, 8], [6, 7])], "long", 0.0)
    short = rollout([call([1], [2, 3])], "short", 1.0)
    samples, _ = build_samples(
        [long, short], {"long": -1.0, "short": 1.0}, "transition", 100, "rollout"
    )
    per_rollout = {"long": 0.0, "short": 0.0}
    for s in samples:
        per_rollout[s.rollout_id] += s.weight * s.num_generated
    assert per_rollout == {"long": 4.0, "short": 4.0}  # mean tokens per rollout: (6 + 2) / 2
    # The total weight is unchanged, so a token-mean loss keeps its scale.
    assert sum(per_rollout.values()) == sum(s.num_generated for s in samples)


def test_rollout_weighting_scales_the_collated_advantages() -> None:
    long = rollout([call([1], [2, 3]), call([1, 9], [4, 5])], "long", 0.0)
    short = rollout([call([1], [2, 3])], "short", 1.0)
    samples, _ = build_samples(
        [long, short], {"long": -1.0, "short": 1.0}, "transition", 100, "rollout"
    )
    batch = collate(samples, pad_id=0)
    per_token = batch.advantages[batch.loss_mask.bool()].tolist()
    assert per_token == pytest.approx([-0.75] * 4 + [1.5] * 2)  # weights 3/4 and 3/2


def test_unknown_weighting_is_an_error() -> None:
    with pytest.raises(ValueError, match="weighting"):
        build_samples([rollout([call([1], [2])])], {"r1": 1.0}, "transition", 100, "episode")
