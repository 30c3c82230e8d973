"""The WebShop reward at ``buy now``, exactly as docs/webshop.md states it.

    reward = (n_att + n_opt + r_price) / (len(attributes) + len(goal_options) + 1) * r_type

Fuzzy matches use thefuzz's ``token_set_ratio`` semantics (default processing,
ASCII-only, rounded to an integer) through rapidfuzz, and count when > 85.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz, utils

from app.webshop.goals import Goal
from app.webshop.loader import Product
from app.webshop.nouns import NounFn

MATCH_THRESHOLD = 85
DUMMY_ATTR = "DUMMY_ATTR"
_COLORS_WORDS = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux "
    "bronze brown burgundy camel camo caramel champagne charcoal cheetah chestnut "
    "chocolate christmas coffee cognac copper coral cranberry cream crystal dark denim "
    "eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey "
    "heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta "
    "maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural navy "
    "nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand "
    "sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal "
    "tiger turquoise violet walnut wheat white wine yellow"
)
COLORS = tuple(_COLORS_WORDS.split())


def _process(s: str) -> str:
    return utils.default_process(s.encode("ascii", "ignore").decode())


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio``: processed, ASCII-only, rounded."""
    return round(fuzz.token_set_ratio(_process(a), _process(b)))


def normalize_color(value: str) -> str:
    """The first listed colour contained in ``value`` replaces it; else unchanged."""
    for color in COLORS:
        if color in value:
            return color
    return value


def goal_option_strings(goal_options: Mapping[str, str] | list[str]) -> list[str]:
    """Dict goal options compare as the string of the (name, value) pair."""
    if isinstance(goal_options, Mapping):
        return [str((name, value)) for name, value in goal_options.items()]
    return list(goal_options)


def attribute_matches(goal: Goal, product: Product) -> int:
    attrs = list(product.attributes) or [DUMMY_ATTR]
    title = product.name.lower()
    bullets = " ".join(product.bullets).lower()
    description = product.description.lower()
    n = 0
    for g in goal.attributes:
        if (
            any(token_set_ratio(p, g) > MATCH_THRESHOLD for p in attrs)
            or g in title
            or g in bullets
            or g in description
        ):
            n += 1
    return n


def option_matches(goal: Goal, chosen: Mapping[str, str]) -> int:
    picked = [normalize_color(v) for v in chosen.values()]
    n = 0
    for g in goal_option_strings(goal.goal_options):
        g = normalize_color(g)
        if any(token_set_ratio(c, g) > MATCH_THRESHOLD for c in picked):
            n += 1
    return n


def _category_parts(product_category: str) -> set[str]:
    return {part.strip() for part in product_category.split("›")}


def title_score(goal_name: str, bought_name: str, nouns: NounFn) -> float:
    goal_nouns = nouns(goal_name)
    if not goal_nouns:
        return 0.2
    return len(set(nouns(bought_name)) & set(goal_nouns)) / len(goal_nouns)


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_match(goal: Goal, product: Product, nouns: NounFn) -> TypeMatch:
    query_match = product.query == goal.query
    category_match = (
        len(_category_parts(product.product_category) & _category_parts(goal.product_category)) >= 2
    )
    score = title_score(goal.name, product.name, nouns)
    r_type = 1.0
    if not (query_match or category_match or score > 0.2):
        r_type = 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, score)


def compute_reward(
    goal: Goal, product: Product, chosen: Mapping[str, str], nouns: NounFn
) -> tuple[float, dict[str, Any]]:
    """(reward, parts). Parts say why: r_type and its three signals, r_att / r_option as
    fractions (None when the goal has none), the counts, r_price, and the weights of
    attributes, options and price in the total (the original's ``w_att``, ``w_option``,
    ``w_price``; ``w_option`` is None when the goal has no options)."""
    tm = type_match(goal, product, nouns)
    n_att = attribute_matches(goal, product)
    n_opt = option_matches(goal, chosen)
    r_price = 1.0 if product.price <= goal.price_upper else 0.0
    n_goal_att = len(goal.attributes)
    n_goal_opt = len(goal.goal_options)
    parts_count = n_goal_att + n_goal_opt + 1
    total = (n_att + n_opt + r_price) / parts_count
    reward = total * tm.r_type
    parts = {
        "r_type": tm.r_type,
        "r_att": n_att / n_goal_att if n_goal_att else None,
        "r_option": n_opt / n_goal_opt if n_goal_opt else None,
        "r_price": r_price,
        "query_match": tm.query_match,
        "category_match": tm.category_match,
        "title_score": tm.title_score,
        "n_att": n_att,
        "n_option": n_opt,
        "n_goal_att": n_goal_att,
        "n_goal_option": n_goal_opt,
        "w_att": n_goal_att / parts_count,
        "w_option": n_goal_opt / parts_count if n_goal_opt else None,
        "w_price": 1 / parts_count,
    }
    return reward, parts
