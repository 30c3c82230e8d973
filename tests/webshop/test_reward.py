"""Reward cases worked by hand from docs/webshop.md."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.webshop.goals import Goal
from app.webshop.loader import Product
from app.webshop.nouns import fallback_nouns
from app.webshop.reward import (
    compute_reward,
    goal_option_strings,
    normalize_color,
    token_set_ratio,
    type_match,
)

PRODUCT = Product(
    asin="B0TEST0001",
    name="Women's Yoga Pants High Waist",
    description="Soft stretchy leggings with a hidden pocket.",
    bullets=("Machine wash", "Tummy control fabric"),
    price=25.0,
    price_text="$25.0",
    product_category="Clothing › Women › Pants › Yoga",
    category="fashion",
    query="yoga pants",
    options=(("color", ("black", "navy blue")), ("size", ("small", "large"))),
    attributes=("high waist", "machine wash"),
)
GOAL = Goal(
    index=0,
    split="test",
    asin="B0TEST0001",
    instruction="x",
    attributes=["high waist"],
    goal_options={"color": "black", "size": "large"},
    price_upper=30.0,
    weight=1.0,
    name=PRODUCT.name,
    query="yoga pants",
    category="fashion",
    product_category=PRODUCT.product_category,
)


def nouns(text: str) -> tuple[str, ...]:
    """A deterministic tagger for the cases: every word of 4+ letters is a noun."""
    return tuple(w.lower() for w in text.replace("'", " ").split() if len(w) >= 4)


def reward(goal: Goal = GOAL, product: Product = PRODUCT, chosen=None) -> tuple[float, dict]:
    return compute_reward(goal, product, chosen or {}, nouns)


def test_perfect_purchase_scores_one() -> None:
    r, parts = reward(chosen={"color": "black", "size": "large"})
    assert r == 1.0
    assert parts["r_type"] == 1.0 and parts["r_att"] == 1.0 and parts["r_option"] == 1.0
    assert parts["r_price"] == 1.0 and parts["query_match"] and parts["category_match"]
    assert parts["title_score"] == 1.0


def test_nothing_preselected_options_count_zero() -> None:
    r, parts = reward()
    assert r == pytest.approx(2 / 4) and parts["n_option"] == 0


def test_dict_goal_options_compare_as_pair_strings() -> None:
    assert goal_option_strings({"size": "large"}) == ["('size', 'large')"]
    # "large" is a token subset of "size large": token_set_ratio is 100.
    assert token_set_ratio("large", "('size', 'large')") == 100
    r, parts = reward(goal=replace(GOAL, goal_options={"size": "large"}), chosen={"size": "large"})
    assert parts["n_option"] == 1 and r == 1.0


def test_list_goal_options_compare_directly() -> None:
    goal = replace(GOAL, goal_options=["large", "black"])
    r, parts = reward(goal=goal, chosen={"size": "large"})
    assert parts["n_option"] == 1 and r == pytest.approx(3 / 4)


def test_normalize_color_first_listed_colour_wins() -> None:
    assert normalize_color("navy blue") == "blue"  # "blue" is listed before "navy"
    assert normalize_color("dark red") == "dark"
    assert normalize_color("('color', 'black')") == "black"
    assert normalize_color("large") == "large"
    # "washed" contains "ash": the original's substring rule, kept on purpose.
    assert normalize_color("stonewashed") == "ash"


def test_colour_normalised_option_matches_other_shade() -> None:
    goal = replace(GOAL, goal_options={"color": "navy blue"})
    _, parts = reward(goal=goal, chosen={"color": "sky blue"})
    assert parts["n_option"] == 1


def test_fuzzy_attribute_match_above_85() -> None:
    product = replace(
        PRODUCT, attributes=("waist high",), name="Yoga Pants", description="", bullets=()
    )
    assert token_set_ratio("waist high", "high waist") == 100
    _, parts = reward(product=product)
    assert parts["n_att"] == 1


def test_attribute_not_matched_at_or_below_85() -> None:
    # ratio("high waisted", "high waist") = 91 > 85; ("highly wasted") is far below.
    product = replace(
        PRODUCT, attributes=("highly wasted",), name="Yoga Pants", description="", bullets=()
    )
    assert token_set_ratio("highly wasted", "high waist") <= 85
    _, parts = reward(product=product)
    assert parts["n_att"] == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "Yoga Pants HIGH WAIST"),
        ("bullets", ("Fabric", "High waist design")),
        ("description", "A pant with a High Waist."),
    ],
)
def test_attribute_substring_of_title_bullets_or_description(field: str, value) -> None:
    base = replace(PRODUCT, attributes=(), name="Yoga Pants", description="", bullets=())
    _, parts = reward(product=replace(base, **{field: value}))
    assert parts["n_att"] == 1


def test_product_without_attributes_uses_dummy() -> None:
    product = replace(PRODUCT, attributes=(), name="Yoga Pants", description="", bullets=())
    _, parts = reward(goal=replace(GOAL, attributes=["dummy attr"]), product=product)
    # "DUMMY_ATTR" is processed to "dummy attr": a fuzzy match, as in the original.
    assert parts["n_att"] == 1


def test_price_above_upper_bound_scores_zero_price() -> None:
    r, parts = reward(
        product=replace(PRODUCT, price=30.01), chosen={"color": "black", "size": "large"}
    )
    assert parts["r_price"] == 0.0 and r == pytest.approx(3 / 4)
    _, parts = reward(product=replace(PRODUCT, price=30.0))
    assert parts["r_price"] == 1.0


def test_r_type_half_when_no_query_category_or_title_signal() -> None:
    # Title shares 1 of 5 goal nouns (0.2, not > 0.2), other query, one category part.
    product = replace(
        PRODUCT,
        name="Pants for Dogs",
        query="dog clothes",
        product_category="Pet Supplies › Dogs › Apparel › Yoga",
    )
    tm = type_match(GOAL, product, nouns)
    assert tm.title_score == pytest.approx(0.2)
    assert not tm.query_match and not tm.category_match and tm.r_type == 0.5


def test_r_type_tenth_when_title_score_below_0_1() -> None:
    goal = replace(
        GOAL, name="alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo pants"
    )
    product = replace(PRODUCT, name="Pants")
    tm = type_match(goal, product, nouns)
    assert 0 < tm.title_score < 0.1 and tm.query_match and tm.r_type == 0.1


def test_r_type_zero_when_no_shared_noun() -> None:
    product = replace(PRODUCT, name="Garden Hose")
    tm = type_match(GOAL, product, nouns)
    assert tm.title_score == 0 and tm.r_type == 0.0
    r, _ = reward(product=product, chosen={"color": "black", "size": "large"})
    assert r == 0.0


def test_title_score_is_0_2_when_goal_name_has_no_nouns() -> None:
    tm = type_match(replace(GOAL, name="a b c"), PRODUCT, nouns)
    assert tm.title_score == 0.2 and tm.r_type == 1.0


def test_title_score_divides_by_goal_nouns_with_repeats() -> None:
    goal = replace(GOAL, name="pants pants shorts")
    tm = type_match(goal, replace(PRODUCT, name="pants"), nouns)
    assert tm.title_score == pytest.approx(1 / 3)


def test_category_match_needs_two_shared_parts() -> None:
    product = replace(
        PRODUCT,
        query="other",
        name="Garden Yoga Pants",
        product_category="Clothing ›  Women  › Dresses",
    )
    assert type_match(GOAL, product, nouns).category_match


def test_fallback_nouns_keep_capitalised_words_drop_function_words_and_numbers() -> None:
    assert fallback_nouns("Organic Green Tea Bags, 100 Count") == (
        "organic", "green", "tea", "bags", "count",
    )  # fmt: skip
    assert fallback_nouns("Men's Running Shoes for the Beach | Individually Wrapped") == (
        "men", "running", "shoes", "beach", "|",
    )  # fmt: skip


def test_fallback_nouns_drop_lowercase_adjectives() -> None:
    assert fallback_nouns("long-lasting soft waterproof cotton towel") == ("cotton", "towel")
