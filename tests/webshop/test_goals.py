"""Goals: synthetic text, seeded price text, weights, splits, human goals, sampling."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from app.webshop.env import WebShopEnv
from app.webshop.goals import (
    price_limit,
    shuffled_order,
    split_of,
    split_range,
    synthetic_weights,
)


def test_one_synthetic_goal_per_option_combination(fixture_env: WebShopEnv) -> None:
    counts = Counter(g.asin for g in fixture_env.goals)
    # tea 2x2, shoes 2x3, moisturizer 2, headphones 2, bottle (no options) 1;
    # matcha has no instruction and the sampler packs no items_ins entry.
    assert counts == {
        "B000000001": 4,
        "B000000002": 6,
        "B000000005": 2,
        "B000000006": 2,
        "B000000003": 1,
    }


def test_synthetic_instruction_text(fixture_env: WebShopEnv, goal_for) -> None:
    g = fixture_env.goals[goal_for(fixture_env, "B000000002", color="navy blue", size="9")]
    assert g.instruction.startswith(
        "Find me men's running shoes with a rubber sole with color: navy blue, and size: 9, "
        "and price lower than "
    )
    assert g.instruction.endswith(f"{g.price_upper:.2f} dollars")
    assert g.attributes == ["rubber sole", "lace up"]
    assert g.goal_options == {"color": "navy blue", "size": "9"}
    assert g.name == "Men's Running Shoes Lightweight Sneakers" and g.query == "men's running shoes"


def test_goal_without_options_has_plain_instruction(fixture_env: WebShopEnv, goal_for) -> None:
    g = fixture_env.goals[goal_for(fixture_env, "B000000003")]
    assert g.goal_options == {}
    assert (
        g.instruction
        == f"Find me a leak proof water bottle, and price lower than {g.price_upper:.2f} dollars"
    )


def test_price_text_from_grid_above_price() -> None:
    for seed in range(20):
        upper, text = price_limit(12.99, random.Random(seed))
        assert upper in (30.0, 40.0, 50.0)  # max of 2 drawn from 20, 30, 40, 50
        assert text == f", and price lower than {upper:.2f} dollars"
    assert price_limit(985.0, random.Random(0)) == (1_000_000.0, "")
    upper, _ = price_limit(975.0, random.Random(0))
    assert upper == 990.0


def test_no_price_text_when_price_near_grid_top(fixture_env: WebShopEnv, goal_for) -> None:
    g = fixture_env.goals[goal_for(fixture_env, "B000000006", color="black")]
    assert g.price_upper == 1_000_000.0
    assert g.instruction == "Find me noise cancelling headphones with color: black"


def test_goals_are_stable_across_loads(fixture_env: WebShopEnv, tmp_path) -> None:
    from tests_paths import FIXTURE_CATALOG

    again = WebShopEnv.load(FIXTURE_CATALOG, cache_dir=tmp_path, noun_tagger="rules")
    assert [g.instruction for g in again.goals] == [g.instruction for g in fixture_env.goals]


def test_weights_are_mean_inverse_attribute_counts() -> None:
    w = synthetic_weights([["a", "b"], ["a"], ["c"]])
    assert w == [pytest.approx((1 / 2 + 1) / 2), 0.5, 1.0]


def test_fixture_goal_weights(fixture_env: WebShopEnv, goal_for) -> None:
    tea = fixture_env.goals[
        goal_for(fixture_env, "B000000001", **{"flavor name": "plain", "size": "50 count"})
    ]
    assert tea.weight == pytest.approx(1 / 4)  # "caffeinated" appears in 4 goals
    bottle = fixture_env.goals[goal_for(fixture_env, "B000000003")]
    assert bottle.weight == 1.0


def test_splits_by_position() -> None:
    assert split_of(0) == "test" and split_of(499) == "test"
    assert split_of(500) == "eval" and split_of(1499) == "eval" and split_of(1500) == "train"
    assert split_range("test", 3000) == range(0, 500)
    assert split_range("eval", 3000) == range(500, 1500)
    assert split_range("train", 3000) == range(1500, 3000)
    assert split_range("eval", 100) == range(100, 100)
    with pytest.raises(ValueError, match="Unknown split"):
        split_range("dev", 10)


def test_shuffle_is_fixed() -> None:
    assert shuffled_order(50) == shuffled_order(50)
    assert shuffled_order(50) != list(range(50))


def test_goal_ids_and_indices_agree(fixture_env: WebShopEnv) -> None:
    assert fixture_env.goal_ids("test") == list(range(len(fixture_env.goals)))
    assert fixture_env.goal_ids("train") == []
    assert all(fixture_env.goals[i].index == i for i in range(len(fixture_env.goals)))


def test_weighted_sampling_prefers_heavy_goals(fixture_env: WebShopEnv) -> None:
    rng = random.Random(0)
    draws = Counter(fixture_env.sample_goal(rng).asin for _ in range(4000))
    total_w = sum(g.weight for g in fixture_env.goals)
    bottle_share = 1.0 / total_w
    assert draws["B000000003"] / 4000 == pytest.approx(bottle_share, abs=0.03)


def test_new_session_without_goal_is_seeded(fixture_env: WebShopEnv) -> None:
    a = fixture_env.new_session(seed=5).goal.index
    assert a == fixture_env.new_session(seed=5).goal.index


def test_human_goals(human_env: WebShopEnv) -> None:
    goals = list(human_env.goals)
    assert len(goals) == 3  # the instruction for an asin outside the catalog is dropped
    shoes = next(g for g in goals if g.asin == "B000000002")
    assert shoes.goal_options == ["black", "10"] and shoes.weight == 1.0
    assert shoes.attributes == ["running shoes"]
    assert shoes.instruction.startswith("i need black running shoes for men in size 10, and price")


def test_unknown_goal_set_rejected(tmp_path) -> None:
    with pytest.raises(ValueError, match="Unknown goal set"):
        WebShopEnv.load(tmp_path, goals="mixed", cache_dir=tmp_path)
