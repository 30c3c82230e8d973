"""WebShopEnv.load: the generated default catalog, caches reused, products and goals."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.webshop.agents import oracle_policy, run_agent
from app.webshop.env import WebShopEnv, default_catalog_dir


def test_load_without_data_generates_catalog_once(tmp_path: Path) -> None:
    env = WebShopEnv.load(num_products=40, cache_dir=tmp_path, noun_tagger="rules")
    data = default_catalog_dir(tmp_path, 40)
    assert (data / "items_shuffle.json").exists() and (data / ".complete").exists()
    assert env.num_products == 40 and len(env.goals) > 0
    stamp = (data / "items_shuffle.json").stat().st_mtime_ns
    [compiled] = (tmp_path / "compiled").iterdir()
    again = WebShopEnv.load(num_products=40, cache_dir=tmp_path, noun_tagger="rules")
    assert (data / "items_shuffle.json").stat().st_mtime_ns == stamp
    assert list((tmp_path / "compiled").iterdir()) == [compiled]
    assert [g.instruction for g in again.goals] == [g.instruction for g in env.goals]


def test_default_catalog_folder_name(tmp_path: Path) -> None:
    assert default_catalog_dir(tmp_path, 2000) == tmp_path / "default"
    assert default_catalog_dir(tmp_path, 50) == tmp_path / "generated-50-seed0"


def test_oracle_solves_generated_goals(tmp_path: Path) -> None:
    env = WebShopEnv.load(num_products=40, cache_dir=tmp_path, noun_tagger="rules")
    rewards = [run_agent(env, oracle_policy, i).reward for i in range(min(30, len(env.goals)))]
    assert sum(rewards) / len(rewards) >= 0.95


def test_sessions_in_threads_do_not_interfere(fixture_env: WebShopEnv) -> None:
    errors: list[str] = []

    def play(goal: int) -> None:
        for _ in range(20):
            r = run_agent(fixture_env, oracle_policy, goal)
            if r.reward != 1.0:
                errors.append(f"goal {goal}: {r.reward}")

    threads = [threading.Thread(target=play, args=(g,)) for g in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_missing_data_files_raise_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="items_shuffle"):
        WebShopEnv.load(tmp_path / "nothing-here", cache_dir=tmp_path)


def test_unknown_noun_tagger_rejected(tmp_path: Path) -> None:
    from tests_paths import FIXTURE_CATALOG

    with pytest.raises(ValueError, match="noun tagger"):
        WebShopEnv.load(FIXTURE_CATALOG, cache_dir=tmp_path, noun_tagger="magic")


def test_num_products_limits_original_files(tmp_path: Path) -> None:
    from tests_paths import FIXTURE_CATALOG

    env = WebShopEnv.load(FIXTURE_CATALOG, num_products=3, cache_dir=tmp_path, noun_tagger="rules")
    assert env.num_products == 3
    assert {g.asin for g in env.goals} == {"B000000001", "B000000002", "B000000003"}
    full = WebShopEnv.load(FIXTURE_CATALOG, cache_dir=tmp_path, noun_tagger="rules")
    assert full.num_products == 28
