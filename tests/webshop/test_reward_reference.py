"""The reward against the original's: 2,000 purchases scored by the original ``get_reward``.

``../shared/webshop-reference/reward-cases.jsonl`` holds, one a line, the inputs of the
original reward (goal, purchased product fields, price, chosen options) and what it
returned with ``verbose=True``, computed with spaCy's ``en_core_web_sm`` 3.8. Every case
must give the same reward and the same parts (within 1e-9) with the default tagger.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests_paths import REFERENCE_DIR

from app.webshop.goals import Goal
from app.webshop.loader import Product
from app.webshop.nouns import DEFAULT_TAGGER, get_tagger
from app.webshop.reward import compute_reward

CASES = REFERENCE_DIR / "reward-cases.jsonl"
TOLERANCE = 1e-9
SHOWN = 5

pytestmark = pytest.mark.skipif(
    not REFERENCE_DIR.is_dir(), reason=f"{REFERENCE_DIR} is absent (shared reference data)"
)


def _goal(raw: dict[str, Any]) -> Goal:
    return Goal(
        index=0,
        split="test",
        asin=raw["asin"],
        instruction=raw["instruction"],
        attributes=list(raw["attributes"]),
        goal_options=raw["goal_options"],
        price_upper=float(raw["price_upper"]),
        weight=1.0,
        name=raw["name"],
        query=raw["query"],
        category="",
        product_category=raw["product_category"],
    )


def _product(raw: dict[str, Any], price: float) -> Product:
    return Product(
        asin=raw["asin"],
        name=raw["Title"],
        description=raw["Description"],
        bullets=tuple(raw["BulletPoints"]),
        price=price,
        price_text=f"${price}",
        product_category=raw["product_category"],
        category="",
        query=raw["query"],
        options=(),
        attributes=tuple(raw["Attributes"]),
    )


def _differences(case: dict[str, Any], reward: float, parts: dict[str, Any]) -> list[str]:
    """What differs from the original's answer: ``name: ours != original``."""
    out = []
    if abs(reward - case["reward"]) > TOLERANCE:
        out.append(f"reward: {reward!r} != {case['reward']!r}")
    expected = case["parts"]
    for name in sorted(set(expected) | {"r_option", "w_option"}):
        want = expected.get(name)  # the original leaves r_option, w_option out: no options
        got = parts.get(name)
        if isinstance(want, bool):
            same = bool(got) == want and got is not None
        elif want is None or got is None:
            same = want is None and got is None
        else:
            same = abs(float(got) - float(want)) <= TOLERANCE
        if not same:
            out.append(f"{name}: {got!r} != {want!r}")
    return out


def test_reward_matches_the_original_on_every_reference_case() -> None:
    assert DEFAULT_TAGGER == "spacy"
    nouns = get_tagger(DEFAULT_TAGGER)
    lines = CASES.read_text().splitlines()
    assert len(lines) == 2000, f"{CASES}: {len(lines)} cases, expected 2,000"
    mismatches = []
    for number, line in enumerate(lines, 1):
        case = json.loads(line)
        reward, parts = compute_reward(
            _goal(case["goal"]),
            _product(case["purchased"], float(case["price"])),
            case["options"],
            nouns,
        )
        diff = _differences(case, reward, parts)
        if diff:
            mismatches.append((number, case, diff))
    shown = "\n\n".join(
        f"case {number} ({'; '.join(diff)}):\n"
        f"  goal={json.dumps(case['goal'])}\n  purchased={json.dumps(case['purchased'])}\n"
        f"  price={case['price']!r} options={json.dumps(case['options'])}"
        for number, case, diff in mismatches[:SHOWN]
    )
    assert not mismatches, (
        f"{len(mismatches)} of {len(lines)} cases differ from the original "
        f"(ours != original); the first {min(SHOWN, len(mismatches))}:\n\n{shown}"
    )
