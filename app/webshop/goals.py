"""Shopping goals: synthetic (one per option combination) and human-written, seeded.

Facts from docs/webshop.md ("Goals"): a synthetic goal reads
``"<instruction> with <name>: <value>, and <name2>: <value2><price text>"`` (option
names sorted); the price text comes from the grid 10, 20, ..., 990; weights are 1 for
human goals and, for a synthetic goal, the mean over its attributes of
1 / (number of synthetic goals with that attribute). The goal list is shuffled with a
fixed seed; the position in the shuffled list is the goal id, and test = ids 0-499,
eval = 500-1499, train = the rest. Unlike the original, the price draws are seeded, so
instructions are the same in every run.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.webshop.loader import InstructionInfo, Product

PRICE_GRID = tuple(range(10, 1000, 10))
NO_PRICE_LIMIT = 1_000_000.0
SPLIT_SEED = 233
TEST_SIZE = 500
EVAL_SIZE = 1000
SPLITS = ("test", "eval", "train")


@dataclass(frozen=True)
class Goal:
    """One shopping task. ``index`` is its id: the position in the env's goal list."""

    index: int
    split: str
    asin: str
    instruction: str
    attributes: list[str]
    goal_options: dict[str, str] | list[str]
    price_upper: float
    weight: float
    name: str
    query: str
    category: str
    product_category: str


def split_of(index: int) -> str:
    if index < TEST_SIZE:
        return "test"
    if index < TEST_SIZE + EVAL_SIZE:
        return "eval"
    return "train"


def split_range(split: str, num_goals: int) -> range:
    """The goal ids of one split (``test``, ``eval`` or ``train``)."""
    bounds = {
        "test": (0, TEST_SIZE),
        "eval": (TEST_SIZE, TEST_SIZE + EVAL_SIZE),
        "train": (TEST_SIZE + EVAL_SIZE, num_goals),
    }
    if split not in bounds:
        raise ValueError(f"Unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    start, stop = bounds[split]
    return range(min(start, num_goals), min(stop, num_goals))


def price_limit(price: float, rng: random.Random) -> tuple[float, str]:
    """(price_upper, price text) for a product costing ``price``."""
    above = [p for p in PRICE_GRID if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_LIMIT, ""
    upper = float(max(rng.sample(above, 2)))
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(
    product: Product, info: InstructionInfo | None, rng: random.Random
) -> list[dict[str, Any]]:
    """The synthetic goals of one product, as records (weights filled in later)."""
    if info is None or not info.instruction or not info.instruction_attributes:
        return []
    names = sorted(name for name, _ in product.options)
    values_by_name = dict(product.options)
    combos = itertools.product(*(values_by_name[n] for n in names)) if names else [()]
    goals = []
    for combo in combos:
        options = dict(zip(names, combo, strict=True))
        text = info.instruction
        if options:
            text += " with " + ", and ".join(f"{n}: {v}" for n, v in options.items())
        upper, price_text = price_limit(product.price, rng)
        goals.append(
            _record(product, text + price_text, list(info.instruction_attributes), options, upper)
        )
    return goals


def human_goal(product: Product, entry: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A goal from one written instruction of ``items_human_ins.json``."""
    upper, price_text = price_limit(product.price, rng)
    text = str(entry["instruction"]).strip() + price_text
    attributes = [str(a) for a in entry.get("instruction_attributes") or ()]
    options = [str(o) for o in entry.get("instruction_options") or ()]
    record = _record(product, text, attributes, options, upper)
    record["weight"] = 1.0
    return record


def _record(
    product: Product,
    instruction: str,
    attributes: list[str],
    options: dict[str, str] | list[str],
    price_upper: float,
) -> dict[str, Any]:
    return {
        "asin": product.asin,
        "instruction": instruction,
        "attributes": attributes,
        "goal_options": options,
        "price_upper": price_upper,
        "weight": 0.0,
        "name": product.name,
        "query": product.query,
        "category": product.category,
        "product_category": product.product_category,
    }


def synthetic_weights(attribute_lists: Sequence[Sequence[str]]) -> list[float]:
    """Rare attributes weigh more: mean over a goal's attributes of 1/count(attribute)."""
    counts = Counter(a for attrs in attribute_lists for a in attrs)
    return [
        sum(1.0 / counts[a] for a in attrs) / len(attrs) if attrs else 0.0
        for attrs in attribute_lists
    ]


def shuffled_order(num_goals: int, seed: int = SPLIT_SEED) -> list[int]:
    """Goal id -> position in generation order; fixed for a given number of goals."""
    order = list(range(num_goals))
    random.Random(seed).shuffle(order)
    return order


def goal_from_record(index: int, record: dict[str, Any]) -> Goal:
    return Goal(
        index=index,
        split=split_of(index),
        asin=record["asin"],
        instruction=record["instruction"],
        attributes=list(record["attributes"]),
        goal_options=record["goal_options"],
        price_upper=float(record["price_upper"]),
        weight=float(record["weight"]),
        name=record["name"],
        query=record["query"],
        category=record["category"],
        product_category=record["product_category"],
    )
