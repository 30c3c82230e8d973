"""The synthetic catalog: original file formats, consistency, determinism, size, speed."""

from __future__ import annotations

import collections
import itertools
import json
import math
import re
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests_paths import REFERENCE_DIR

from app.webshop import catalog_gen
from app.webshop.catalog_data import CATEGORIES
from app.webshop.catalog_gen import (
    DEFAULT_CATALOG,
    MAX_COMBINATIONS,
    GeneratedProduct,
    make_asin,
    write_catalog,
)

PRODUCT_KEYS = {
    "asin",
    "name",
    "full_description",
    "small_description",
    "pricing",
    "product_category",
    "category",
    "query",
    "customization_options",
    "images",
}
CATEGORY_NAMES = {"beauty", "fashion", "garden", "grocery", "electronics"}
PRICE = re.compile(r"^\$\d+\.\d{2}$")
PRICE_RANGE = re.compile(r"^\$(\d+\.\d{2})\$(\d+\.\d{2})$")


def _load(paths: dict[str, Path]) -> tuple[list[dict], dict[str, dict], dict[str, list[dict]]]:
    products = json.loads(paths["items_shuffle"].read_bytes())
    ins = json.loads(paths["items_ins_v2"].read_bytes())
    human = json.loads(paths["items_human_ins"].read_bytes()) if "items_human_ins" in paths else {}
    return products, ins, human


def _options(product: dict[str, Any]) -> dict[str, list[str]]:
    raw = product["customization_options"]
    return {name: [v["value"] for v in values] for name, values in (raw or {}).items()}


def _synthetic_goal_count(products: list[dict], ins: dict[str, dict]) -> int:
    """One goal per combination of option values of each product with an instruction,
    counted the way the original goal generator enumerates them."""
    total = 0
    for product in products:
        entry = ins[product["asin"]]
        if entry.get("instruction") and entry.get("instruction_attributes"):
            options = _options(product)
            total += len(list(itertools.product(*(options[n] for n in sorted(options)))))
    return total


@pytest.fixture(scope="module")
def default_catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_catalog(tmp_path_factory.mktemp("catalog"), **DEFAULT_CATALOG)


@pytest.fixture(scope="module")
def loaded(default_catalog: dict[str, Path]) -> tuple[list[dict], dict, dict]:
    return _load(default_catalog)


def test_write_catalog_returns_the_three_original_file_names(
    default_catalog: dict[str, Path],
) -> None:
    assert {k: p.name for k, p in default_catalog.items()} == {
        "items_shuffle": "items_shuffle.json",
        "items_ins_v2": "items_ins_v2.json",
        "items_human_ins": "items_human_ins.json",
    }
    assert not list(default_catalog["items_shuffle"].parent.glob("*.tmp"))


def test_same_arguments_give_byte_identical_files(tmp_path: Path) -> None:
    first = write_catalog(tmp_path / "a", 300, seed=7)
    second = write_catalog(tmp_path / "b", 300, seed=7)
    for kind, path in first.items():
        assert path.read_bytes() == second[kind].read_bytes(), kind


def test_other_seed_gives_another_catalog(tmp_path: Path) -> None:
    first = write_catalog(tmp_path / "a", 100, seed=1)
    second = write_catalog(tmp_path / "b", 100, seed=2)
    names_a = {p["name"] for p in _load(first)[0]}
    names_b = {p["name"] for p in _load(second)[0]}
    assert len(names_a & names_b) < 10


def test_smaller_catalog_is_prefix_of_larger_one(tmp_path: Path) -> None:
    small, _, _ = _load(write_catalog(tmp_path / "s", 50, seed=3))
    large, _, _ = _load(write_catalog(tmp_path / "l", 120, seed=3))
    assert small == large[:50]


def test_products_have_exactly_the_original_keys_and_types(loaded: tuple) -> None:
    products, _, _ = loaded
    assert len(products) == DEFAULT_CATALOG["num_products"]
    for product in products:
        assert set(product) == PRODUCT_KEYS
        for key in ("asin", "name", "full_description", "pricing", "product_category", "query"):
            assert isinstance(product[key], str), key
        assert product["name"] and product["full_description"] and product["query"]
        assert product["category"] in CATEGORY_NAMES
        bullets = product["small_description"]
        assert isinstance(bullets, list) and 3 <= len(bullets) <= 6
        assert all(isinstance(b, str) and b for b in bullets)
        parts = [p.strip() for p in product["product_category"].split("›")]
        assert len(parts) >= 3 and all(parts)


def test_customization_options_are_value_lists_or_empty(loaded: tuple) -> None:
    products, _, _ = loaded
    kinds = collections.Counter()
    for product in products:
        raw = product["customization_options"]
        if raw in ("", None):
            kinds["none"] += 1
            continue
        assert isinstance(raw, dict) and 1 <= len(raw) <= 2
        kinds[len(raw)] += 1
        for name, values in raw.items():
            assert name == name.lower().strip() and name
            assert 2 <= len(values) <= 5
            for value in values:
                assert set(value) == {"value", "image"} and value["image"] is None
                assert value["value"] == value["value"].strip() and "/" not in value["value"]
            assert len({v["value"] for v in values}) == len(values)
    assert kinds["none"] and kinds[1] and kinds[2]
    names = {n for p in products for n in _options(p)}
    assert {"color", "size", "pack", "flavor", "style", "scent", "material"} <= names


def test_pricing_is_single_range_or_missing(loaded: tuple) -> None:
    products, _, _ = loaded
    kinds = collections.Counter()
    for product in products:
        pricing = product["pricing"]
        if pricing == "":
            kinds["missing"] += 1
        elif match := PRICE_RANGE.match(pricing):
            low, high = map(float, match.groups())
            assert 0 < low < high
            kinds["range"] += 1
        else:
            assert PRICE.match(pricing), pricing
            assert float(pricing[1:]) > 0
            kinds["single"] += 1
    assert kinds["single"] > kinds["range"] > kinds["missing"] > 0


def test_asins_are_unique_ten_characters_like_amazon(loaded: tuple) -> None:
    products, ins, _ = loaded
    asins = [p["asin"] for p in products]
    assert len(set(asins)) == len(asins)
    assert all(re.fullmatch(r"B0[0-9A-Z]{8}", a) for a in asins)
    assert set(ins) == set(asins)


def test_make_asin_is_injective_over_a_wide_index_range() -> None:
    indices = list(range(20_000)) + list(range(10**9, 10**9 + 20_000)) + [2**40 - 1]
    assert len({make_asin(i, seed=5) for i in indices}) == len(indices)


def test_ins_entries_have_attributes_and_subset_instruction_attributes(loaded: tuple) -> None:
    _, ins, _ = loaded
    with_instruction = 0
    for entry in ins.values():
        assert set(entry) in (
            {"attributes"},
            {"attributes", "instruction", "instruction_attributes"},
        )
        assert isinstance(entry["attributes"], list)
        assert len(set(entry["attributes"])) == len(entry["attributes"])
        if "instruction" in entry:
            with_instruction += 1
            assert entry["instruction"] == entry["instruction"].lower()
            assert entry["instruction_attributes"]
            assert set(entry["instruction_attributes"]) <= set(entry["attributes"])
            for attribute in entry["instruction_attributes"]:
                assert attribute in entry["instruction"]
    assert with_instruction >= 0.8 * len(ins)
    assert any(not e["attributes"] for e in ins.values())


def test_attributes_occur_in_title_bullets_or_description(loaded: tuple) -> None:
    products, ins, _ = loaded
    for product in products:
        text = " ".join(
            [product["name"], " ".join(product["small_description"]), product["full_description"]]
        ).lower()
        for attribute in ins[product["asin"]]["attributes"]:
            assert attribute in text, (product["asin"], attribute)


def test_instruction_names_the_product_type_seen_in_the_title(loaded: tuple) -> None:
    products, ins, _ = loaded
    shared = 0
    total = 0
    for product in products:
        entry = ins[product["asin"]]
        if "instruction" in entry:
            total += 1
            title_words = set(re.findall(r"\w+", product["name"].lower()))
            instruction_words = set(re.findall(r"\w+", entry["instruction"]))
            shared += len(title_words & instruction_words) >= 2
    assert shared >= 0.95 * total


def test_human_goals_options_are_values_the_product_offers(loaded: tuple) -> None:
    products, ins, human = loaded
    by_asin = {p["asin"]: p for p in products}
    count = 0
    for asin, goals in human.items():
        assert isinstance(goals, list) and goals
        offered = {v.lower() for values in _options(by_asin[asin]).values() for v in values}
        for goal in goals:
            count += 1
            assert set(goal) == {
                "asin",
                "instruction",
                "instruction_attributes",
                "instruction_options",
            }
            assert goal["asin"] == asin
            assert goal["instruction"] == goal["instruction"].lower()
            assert goal["instruction_attributes"]
            assert set(goal["instruction_attributes"]) <= set(ins[asin]["attributes"])
            assert isinstance(goal["instruction_options"], list)
            assert set(goal["instruction_options"]) <= offered
            for value in goal["instruction_options"]:
                assert value in goal["instruction"]
    assert count >= 1600


def test_default_catalog_yields_at_least_6000_synthetic_goals(loaded: tuple) -> None:
    products, ins, _ = loaded
    assert 6000 <= _synthetic_goal_count(products, ins) <= 16 * len(products)


def test_option_combinations_per_product_are_bounded(loaded: tuple) -> None:
    products, _, _ = loaded
    for product in products:
        assert math.prod(len(v) for v in _options(product).values()) <= MAX_COMBINATIONS


def test_all_five_categories_and_many_product_types_appear(loaded: tuple) -> None:
    products, _, _ = loaded
    by_category = collections.defaultdict(set)
    for product in products:
        by_category[product["category"]].add(product["product_category"])
    assert set(by_category) == CATEGORY_NAMES
    assert all(len(paths) >= 30 for paths in by_category.values())
    assert sum(len(paths) for paths in by_category.values()) >= 150
    assert all(len(c.types) >= 30 for c in CATEGORIES)


def test_same_type_products_compete_with_other_brands_and_attributes(loaded: tuple) -> None:
    products, ins, _ = loaded
    by_path = collections.defaultdict(list)
    for product in products:
        by_path[product["product_category"]].append(product)
    crowded = [group for group in by_path.values() if len(group) >= 5]
    assert len(crowded) >= 100
    for group in crowded:
        assert len({p["name"] for p in group}) == len(group)
        assert len({tuple(ins[p["asin"]]["attributes"]) for p in group}) >= 3


def _bm25_ranks(products: list[dict], queries: list[tuple[int, str]]) -> list[int]:
    """Rank of the target when searching its instruction with BM25 (k1=0.9, b=0.4) over
    title + description + first bullet + options, as WebShop's search indexes products."""
    tokenize = re.compile(r"\w+").findall
    docs = []
    for product in products:
        options = ", and ".join(f"{n}: {', '.join(v)}" for n, v in _options(product).items())
        first = (product["small_description"] or [""])[0]
        text = f"{product['name']} {product['full_description']} {first} {options}".lower()
        docs.append(collections.Counter(tokenize(text)))
    lengths = [sum(d.values()) for d in docs]
    avg = sum(lengths) / len(docs)
    df = collections.Counter(t for d in docs for t in d)
    n = len(docs)
    ranks = []
    for target, query in queries:
        terms = tokenize(query.lower())
        scores = []
        for doc, length in zip(docs, lengths, strict=True):
            score = 0.0
            for t in terms:
                if f := doc.get(t):
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    score += idf * f * 1.9 / (f + 0.9 * (0.6 + 0.4 * length / avg))
            scores.append(score)
        target_score = scores[target]
        ranks.append(1 + sum(s > target_score for s in scores))
    return ranks


def test_search_finds_most_targets_but_not_all_at_the_top(loaded: tuple) -> None:
    products, ins, _ = loaded
    queries = [
        (i, ins[p["asin"]]["instruction"])
        for i, p in enumerate(products[:250])
        if "instruction" in ins[p["asin"]]
    ]
    ranks = _bm25_ranks(products, queries)
    top10 = sum(r <= 10 for r in ranks) / len(ranks)
    top1 = sum(r == 1 for r in ranks) / len(ranks)
    assert top10 >= 0.85
    assert top1 <= 0.9


def test_default_catalog_is_a_few_megabytes(default_catalog: dict[str, Path]) -> None:
    total = sum(p.stat().st_size for p in default_catalog.values())
    assert 1_000_000 < total < 8_000_000


def test_without_human_goals_two_files_and_a_stale_one_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / "items_human_ins.json"
    stale.write_text("{}")
    paths = write_catalog(tmp_path, 20, human_goals=False)
    assert set(paths) == {"items_shuffle", "items_ins_v2"}
    assert not stale.exists()
    assert len(json.loads(paths["items_shuffle"].read_bytes())) == 20


def test_single_product_catalog_is_valid_json(tmp_path: Path) -> None:
    products, ins, human = _load(write_catalog(tmp_path, 1))
    assert len(products) == 1 and list(ins) == [products[0]["asin"]]
    assert isinstance(human, dict)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_products": 0}, "num_products must be a positive integer"),
        ({"num_products": -5}, "num_products must be a positive integer"),
        ({"num_products": 2.5}, "num_products must be a positive integer"),
        ({"num_products": True}, "num_products must be a positive integer"),
        ({"num_products": 2**40}, "num_products must be below"),
        ({"num_products": 10, "seed": -1}, "seed must be an integer"),
        ({"num_products": 10, "seed": "1"}, "seed must be an integer"),
    ],
)
def test_invalid_arguments_are_rejected(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        write_catalog(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_failure_midway_leaves_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = catalog_gen.iter_products

    def failing(num_products: int, seed: int = 0) -> Iterator[GeneratedProduct]:
        for i, product in enumerate(real(num_products, seed)):
            if i == 5:
                raise OSError("disk full")
            yield product

    monkeypatch.setattr(catalog_gen, "iter_products", failing)
    with pytest.raises(OSError, match="disk full"):
        write_catalog(tmp_path, 10)
    assert not list(tmp_path.iterdir())


def test_memory_does_not_grow_with_the_catalog(tmp_path: Path) -> None:
    def peak(n: int) -> int:
        tracemalloc.start()
        write_catalog(tmp_path / str(n), n)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(500), peak(4000)
    assert large < small * 1.5 + 1_000_000


def test_generated_text_is_not_copied_from_the_reference(loaded: tuple) -> None:
    path = REFERENCE_DIR / "human_goals.json"
    if not path.exists():
        pytest.skip("reference data absent")
    reference = set(json.loads(path.read_text()))
    _, ins, human = loaded
    ours = {e["instruction"] for e in ins.values() if "instruction" in e}
    ours |= {g["instruction"] for goals in human.values() for g in goals}
    assert len(ours & reference) <= 2


def test_attribute_vocabulary_overlaps_webshop_reference() -> None:
    path = REFERENCE_DIR / "items_ins_v2_1000.json"
    if not path.exists():
        pytest.skip("reference data absent")
    reference = {a for v in json.loads(path.read_text()).values() for a in v["attributes"]}
    ours = {a.text for c in CATEGORIES for t in c.types for a in t.attributes}
    assert len(ours & reference) >= 100


def test_20k_products_generate_quickly(tmp_path: Path) -> None:
    started = time.perf_counter()
    paths = write_catalog(tmp_path, 20_000, seed=1)
    elapsed = time.perf_counter() - started
    assert elapsed < 30, f"20k products took {elapsed:.1f} s"
    with paths["items_ins_v2"].open("rb") as fh:
        assert len(json.load(fh)) == 20_000


def test_cli_catalog_has_what_the_originals_load_products_reads(tmp_path: Path) -> None:
    """Every product key and attribute entry that WebShop's ``load_products`` indexes."""
    out = tmp_path / "catalog"
    cmd = [sys.executable, "-m", "app.cli", "env", "catalog", "--products", "50", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    products = json.loads((out / "items_shuffle.json").read_text())
    attributes = json.loads((out / "items_ins_v2.json").read_text())
    json.loads((out / "items_human_ins.json").read_text())  # opened even for synthetic goals
    for p in products:
        for key in ("asin", "category", "query", "product_category", "name",
                    "full_description", "small_description", "customization_options"):  # fmt: skip
            assert key in p, key
        assert isinstance(p["images"], list) and len(p["images"]) >= 1  # images[0]
        assert p.get("pricing") is None or isinstance(p["pricing"], str)
        assert "attributes" in attributes[p["asin"]]  # attributes[asin].get(...) for every asin
