"""BM25 search: document text, ranking, top-50 cut, on-disk index cache."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from app.webshop.env import WebShopEnv
from app.webshop.loader import Product
from app.webshop.search import K1, B, SearchIndex, document_text, tokenize

BASE = Product("B0", "Blue Mug", "", (), 1.0, "$1.0", "", "", "", (), ())


def test_document_text_joins_title_description_first_bullet_and_options() -> None:
    p = replace(
        BASE,
        name="Tea Mug",
        description="Big Mug.",
        bullets=("Dishwasher safe", "x"),
        options=(("color", ("red", "blue")), ("size", ("small",))),
    )
    assert document_text(p) == (
        "tea mug big mug. dishwasher safe color: red, blue, and size: small"
    )


def test_tokenize_lowercases_and_drops_stop_words() -> None:
    assert tokenize("The Green TEA for Women's") == ["green", "tea", "women", "s"]


def test_bm25_scores_follow_lucene_formula(tmp_path: Path) -> None:
    docs = [
        replace(BASE, asin=f"B{i}", name=name)
        for i, name in enumerate(["red mug", "red red red mug big", "blue plate"])
    ]
    SearchIndex.build(docs, tmp_path / "ix")
    index = SearchIndex.load(tmp_path / "ix")
    assert index.search("red") == [1, 0]
    assert index.search("plate") == [2]
    assert index.search("unknownword") == [] and index.search("the and") == []

    # Lucene: idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)).
    lengths = [2, 5, 2]
    avgdl = sum(lengths) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def score(tf: int, dl: int) -> float:
        return idf * tf / (tf + K1 * (1 - B + B * dl / avgdl))

    column = index._indptr[index._vocab["red"]]
    got = sorted(float(x) for x in index._data[column : column + 2])
    assert got[0] == pytest.approx(score(1, 2), rel=1e-5)
    assert got[1] == pytest.approx(score(3, 5), rel=1e-5)


def test_search_returns_at_most_50(tmp_path: Path) -> None:
    docs = [replace(BASE, asin=f"B{i}", name=f"mug number {i}") for i in range(120)]
    SearchIndex.build(docs, tmp_path / "ix")
    assert len(SearchIndex.load(tmp_path / "ix").search("mug")) == 50


def test_results_paging_caps_at_five_pages(tmp_path: Path, fixture_env: WebShopEnv) -> None:
    s = fixture_env.new_session(0)
    s.step("search[green tea]")
    assert f"(Total results: {len(s.results)})" in s.observation()
    assert len(s.results) <= 50


def test_index_is_cached_and_reused(tmp_path: Path) -> None:
    from tests_paths import FIXTURE_CATALOG

    WebShopEnv.load(FIXTURE_CATALOG, cache_dir=tmp_path, noun_tagger="rules")
    [compiled] = list((tmp_path / "compiled").iterdir())
    stamp = (compiled / "index" / "params.index.json").stat().st_mtime_ns
    again = WebShopEnv.load(FIXTURE_CATALOG, cache_dir=tmp_path, noun_tagger="rules")
    assert (compiled / "index" / "params.index.json").stat().st_mtime_ns == stamp
    [hit] = again.search("matcha")
    assert again.product(hit).asin == "B000000007"


def test_pruned_search_equals_exhaustive_scoring(tmp_path: Path) -> None:
    env = WebShopEnv.load(num_products=300, cache_dir=tmp_path, noun_tagger="rules")
    queries = [g.instruction for g in env.goals[:400]] + [g.name for g in env.goals[:100]]
    queries += ["size", "size size count", "with and the", "zzzz"]
    for q in queries:
        assert env.index.search(q) == env.index.search_exhaustive(q), q
    assert env.index.search("size", k=5) == env.index.search_exhaustive("size", k=5)


def test_ties_are_broken_by_document_order(tmp_path: Path) -> None:
    docs = [replace(BASE, asin=f"B{i}", name="same mug") for i in range(80)]
    SearchIndex.build(docs, tmp_path / "ix")
    assert SearchIndex.load(tmp_path / "ix").search("mug") == list(range(50))


def test_search_buffer_is_clean_between_queries(tmp_path: Path) -> None:
    docs = [replace(BASE, asin=f"B{i}", name=f"mug {i % 7} plate {i % 3}") for i in range(200)]
    SearchIndex.build(docs, tmp_path / "ix")
    index = SearchIndex.load(tmp_path / "ix")
    first = index.search("mug 3 plate")
    index.search("plate 2")
    assert index.search("mug 3 plate") == first
