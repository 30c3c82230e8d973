"""Shared fixtures: an env over the hand-written catalog in the original file formats."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests_paths import FIXTURE_CATALOG

from app.webshop.env import WebShopEnv


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("webshop-cache")


@pytest.fixture(scope="session")
def fixture_env(env_cache: Path) -> WebShopEnv:
    return WebShopEnv.load(FIXTURE_CATALOG, cache_dir=env_cache, noun_tagger="rules")


@pytest.fixture(scope="session")
def human_env(env_cache: Path) -> WebShopEnv:
    return WebShopEnv.load(FIXTURE_CATALOG, goals="human", cache_dir=env_cache, noun_tagger="rules")


GoalFinder = Callable[..., int]


def _goal_for(env: WebShopEnv, asin: str, **options: str) -> int:
    for goal in env.goals:
        if goal.asin == asin and goal.goal_options == options:
            return goal.index
    raise LookupError(f"no goal for {asin} {options}")


@pytest.fixture
def goal_for() -> GoalFinder:
    """``goal_for(env, asin, **options)``: the id of the goal with those options."""
    return _goal_for
