"""Episode openings (app.environments.webshop.opening): which scripted steps each start plays."""

from __future__ import annotations

import pytest

from app.db.lifecycle import RolloutStart, parse_start, parse_starts
from app.environments.webshop.agent import WebShopEpisode
from app.environments.webshop.opening import (
    NAVIGATION,
    first_product,
    play_opening,
    search_keywords,
)
from app.webshop.agents import BUTTONS

INSTRUCTION = "i need a vegan pasta sauce with flavor: teriyaki, and price lower than 30.00 dollars"
SEARCH_PAGE = {"has_search_bar": True, "clickables": ["search"]}
RESULTS = {"has_search_bar": False, "clickables": ["back to search", "next >", "b0a", "b0b"]}
EMPTY_RESULTS = {"has_search_bar": False, "clickables": ["back to search", "next >"]}
ITEM = {"has_search_bar": False, "clickables": ["back to search", "< prev", "buy now", "red"]}


class FakeEnv:
    """Steps an :class:`Episode` through given pages; ``refuse`` lists refused actions."""

    def __init__(
        self, episode: WebShopEpisode, results: dict, refuse: tuple[str, ...] = ()
    ) -> None:
        self.episode, self.results, self.refuse = episode, results, refuse
        self.actions: list[str] = []

    def step(self, action: str) -> bool:
        self.actions.append(action)
        valid = action not in self.refuse
        page = self.results if action.startswith("search[") else ITEM
        self.episode.record(
            action, valid=valid, seen=f"page after {action}", available_actions=page
        )
        return valid


def _episode() -> WebShopEpisode:
    return WebShopEpisode(INSTRUCTION, "search page", SEARCH_PAGE)


def test_search_keywords_drop_options_and_price() -> None:
    assert search_keywords(INSTRUCTION) == "i need a vegan pasta sauce"
    assert search_keywords("Find [red] mugs, and price lower than 5") == "find red mugs"
    assert search_keywords("with love") == "with love"


@pytest.mark.parametrize(
    ("start", "actions"),
    [
        ("search", []),
        ("results", ["search[i need a vegan pasta sauce]"]),
        ("item", ["search[i need a vegan pasta sauce]", "click[b0a]"]),
    ],
)
def test_each_start_plays_its_steps_into_the_history(start: str, actions: list[str]) -> None:
    episode = _episode()
    env = FakeEnv(episode, RESULTS)
    assert play_opening(episode, start, env.step) == actions
    assert env.actions == actions
    assert [step.action for step in episode.history] == actions
    assert episode.number == len(actions) + 1


def test_search_that_lists_no_product_stops_on_the_results_page() -> None:
    episode = _episode()
    env = FakeEnv(episode, EMPTY_RESULTS)
    assert play_opening(episode, RolloutStart.ITEM, env.step) == [
        "search[i need a vegan pasta sauce]"
    ]
    assert episode.available_actions == EMPTY_RESULTS


def test_refused_search_stops_the_opening() -> None:
    episode = _episode()
    env = FakeEnv(episode, RESULTS, refuse=("search[i need a vegan pasta sauce]",))
    assert len(play_opening(episode, "item", env.step)) == 1
    assert env.actions == ["search[i need a vegan pasta sauce]"]


def test_first_product_skips_buttons() -> None:
    assert first_product(RESULTS) == "b0a"
    assert first_product(EMPTY_RESULTS) is None
    assert first_product({}) is None


def test_navigation_names_every_env_button() -> None:
    assert {*BUTTONS, "search"} == NAVIGATION


def test_unknown_start_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="one of 'search', 'results', 'item', got 'cart'"):
        parse_start("cart")
    with pytest.raises(ValueError, match="'cart'"):
        play_opening(_episode(), "cart", lambda _: True)


def test_parse_starts_reads_a_comma_list() -> None:
    assert parse_starts("search, item,search") == ("search", "item")
    assert parse_starts("results") == ("results",)
    with pytest.raises(ValueError, match="at least one start"):
        parse_starts(" , ")
    with pytest.raises(ValueError, match="got 'itme'"):
        parse_starts("search,itme")
