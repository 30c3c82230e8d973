"""The streaming loader on files in the original formats."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests_paths import FIXTURE_CATALOG, REFERENCE_DIR

from app.webshop.loader import (
    find_file,
    iter_human_instructions,
    iter_products,
    parse_options,
    parse_pricing,
    read_instructions,
)


def load(seed: int = 0) -> dict:
    ins = read_instructions(FIXTURE_CATALOG / "items_ins_v2.json")
    return {p.asin: p for p, _ in iter_products(FIXTURE_CATALOG / "items_shuffle.json", ins, seed)}


def test_skips_nan_long_and_duplicate_asins() -> None:
    products = load()
    assert "nan" not in products and "B0000000041234" not in products
    assert len(products) == 28
    assert products["B000000001"].name == "Organic Green Tea Bags, 100 Count"  # first wins


def test_option_names_and_values_normalised() -> None:
    tea = load()["B000000001"]
    assert tea.options == (
        ("size", ("100 count", "50 count")),
        ("flavor name", ("mint | lemon", "plain")),
    )
    shoes = load()["B000000002"]
    assert shoes.options[0] == ("color", ("black | white", "navy blue"))


def test_null_and_empty_options_dropped() -> None:
    products = load()
    assert products["B000000005"].options == (("size", ("1.7 fl oz", "3.4 fl oz")),)
    assert products["B000000003"].options == ()


def test_missing_price_costs_100() -> None:
    bottle = load()["B000000003"]
    assert bottle.price == 100.0 and bottle.price_text == "$100.0"


def test_range_price_drawn_once_within_range_with_seed() -> None:
    a, b, c = load(0)["B000000002"], load(0)["B000000002"], load(7)["B000000002"]
    assert 35.0 <= a.price <= 49.5 and a.price_text == "$35.0 to $49.5"
    assert a.price == b.price and a.price != c.price


def test_parse_pricing_cases() -> None:
    rng = random.Random(0)
    assert parse_pricing("$19.99", rng) == (19.99, "$19.99")
    assert parse_pricing("$1,299.00", rng) == (1299.0, "$1299.0")
    assert parse_pricing(None, rng) == (100.0, "$100.0")
    assert parse_pricing("call us", rng) == (100.0, "$100.0")


def test_parse_options_accepts_empty_string() -> None:
    assert parse_options("") == ()
    assert parse_options({"Size": None, "Color": []}) == ()


def test_attributes_joined_from_items_ins() -> None:
    products = load()
    assert products["B000000001"].attributes == ("green tea", "caffeinated")
    assert products["B000000008"].attributes == ()


def test_human_instructions_streamed() -> None:
    rows = list(iter_human_instructions(FIXTURE_CATALOG / "items_human_ins.json"))
    assert [asin for asin, _ in rows] == ["B000000002", "B000000005", "B000000005", "B999999999"]


def test_find_file_prefers_shortest_name(tmp_path: Path) -> None:
    (tmp_path / "items_shuffle_1000.json").write_text("[]")
    (tmp_path / "items_shuffle.json").write_text("[]")
    assert find_file(tmp_path, "items_shuffle").name == "items_shuffle.json"
    with pytest.raises(FileNotFoundError, match="items_ins_v2"):
        find_file(tmp_path, "items_ins_v2")


def test_reference_attribute_file_reads_when_present() -> None:
    path = REFERENCE_DIR / "items_ins_v2_1000.json"
    if not path.exists():
        pytest.skip(f"reference data absent: {path}")
    table = read_instructions(path)
    raw = json.loads(path.read_text())
    assert len(table) == len(raw) == 1000
    with_instruction = [a for a, e in raw.items() if e.get("instruction")]
    assert with_instruction
    for asin in with_instruction[:50]:
        assert table[asin].instruction == raw[asin]["instruction"]
        assert list(table[asin].instruction_attributes) == raw[asin]["instruction_attributes"]
