"""Navigation rules of the state machine and invalid actions as flagged no-ops."""

from __future__ import annotations

import pytest

from app.webshop.env import Session, WebShopEnv
from app.webshop.session import parse_action

TEA = {"flavor name": "mint | lemon", "size": "50 count"}


@pytest.fixture
def session(fixture_env: WebShopEnv, goal_for) -> Session:
    return fixture_env.new_session(goal_for(fixture_env, "B000000001", **TEA))


def open_tea(s: Session) -> None:
    assert s.step("search[organic tea bags]").info["valid"]
    assert s.step("click[b000000001]").info["page"] == "item"


def test_search_works_on_any_page(session: Session) -> None:
    open_tea(session)
    session.step("click[features]")
    r = session.step("search[matcha]")
    assert r.info == {
        "valid": True,
        "error": None,
        "page": "results",
        "goal_index": session.goal.index,
        "reward_parts": None,
    }
    assert "B000000007" in r.observation
    assert session.chosen == {} and session.product_index is None


def test_prev_on_results_goes_back_one_page(session: Session) -> None:
    session.step("search[green tea]")
    session.step("click[next >]")
    session.step("click[next >]")
    assert "Page 3 (Total results: 24)" in session.observation()
    assert "Page 2 (Total results: 24)" in session.step("click[< prev]").observation


def test_prev_on_item_returns_to_its_results_page(session: Session) -> None:
    session.step("search[green tea]")
    session.step("click[next >]")
    first = session.available_actions()["clickables"][3]
    session.step(f"click[{first}]")
    obs = session.step("click[< prev]").observation
    assert session.page == "results" and "Page 2 (Total results: 24)" in obs


def test_prev_on_sub_page_returns_to_item_with_options_kept(session: Session) -> None:
    open_tea(session)
    session.step("click[plain]")
    for sub in ("description", "features", "reviews"):
        assert session.step(f"click[{sub}]").info["page"] == sub
        assert session.step("click[< prev]").info["page"] == "item"
    assert session.chosen == {"flavor name": "plain"}


def test_prev_not_offered_on_first_results_page(session: Session) -> None:
    session.step("search[green tea]")
    r = session.step("click[< prev]")
    assert not r.info["valid"] and "not clickable" in r.info["error"]


def test_back_to_search_clears_state_but_keeps_goal(session: Session) -> None:
    open_tea(session)
    session.step("click[plain]")
    goal = session.goal
    r = session.step("click[back to search]")
    assert r.info["page"] == "search"
    assert session.keywords is None and session.results == [] and session.page_number == 1
    assert session.product_index is None and session.chosen == {}
    assert session.goal is goal
    assert session.available_actions() == {"has_search_bar": True, "clickables": ["search"]}


def test_option_selection_keeps_one_value_per_name(session: Session) -> None:
    open_tea(session)
    session.step("click[100 count]")
    session.step("click[plain]")
    session.step("click[50 count]")
    assert session.chosen == {"size": "50 count", "flavor name": "plain"}


def test_reopening_an_item_starts_with_no_options(session: Session) -> None:
    open_tea(session)
    session.step("click[plain]")
    session.step("click[< prev]")
    session.step("click[b000000001]")
    assert session.chosen == {}


def test_buy_ends_episode_with_reward_and_parts(session: Session) -> None:
    open_tea(session)
    session.step("click[mint | lemon]")
    r = session.step("click[buy now]")
    assert r.done and session.done
    # 1 attribute + 1 of 2 options + price = 3 of 4.
    assert r.reward == pytest.approx(0.75) and session.reward == r.reward
    assert r.info["reward_parts"]["r_option"] == 0.5
    assert r.info["asin"] == "B000000001" and r.info["options"] == {"flavor name": "mint | lemon"}


def test_session_goes_on_after_buy_as_the_original(session: Session) -> None:
    open_tea(session)
    session.step("click[buy now]")
    again = session.step("click[buy now]")
    assert not again.info["valid"] and not again.done and again.reward == 0.0
    r = session.step("search[tea]")
    assert r.info["valid"] and r.info["page"] == "results"
    assert not r.done and r.reward == 0.0 and r.info["reward_parts"] is None


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("click[b999999999]", "not clickable"),
        ("search[]", "not an action"),
        ("click[ buy now]", "not clickable"),
        (" search[tea]", "is not an action"),
        ("buy the tea please", "not an action"),
        ("", "not an action"),
        ("click[search]", "click[search]"),
        ("click[buy now]", "not clickable"),
        ("jump[tea]", "is not an action"),
    ],
)
def test_invalid_actions_are_flagged_no_ops(session: Session, action: str, reason: str) -> None:
    before = session.observation()
    r = session.step(action)
    assert r.info["valid"] is False and reason in r.info["error"]
    assert r.reward == 0.0 and not r.done
    assert r.observation == before and session.page == "search"


def test_click_search_is_invalid_on_results_too(session: Session) -> None:
    session.step("search[tea]")
    r = session.step("click[search]")
    assert not r.info["valid"] and session.page == "results"


def test_action_parsed_as_the_original() -> None:
    assert parse_action("click[B000000001]") == ("click", "b000000001")
    assert parse_action("search[Green TEA] and more") == ("search", "green tea")
    assert parse_action("click[ Buy Now ]") == ("click", " buy now ")
    assert parse_action("  search[tea]") == ("  search", "tea")
    assert parse_action("click [x]") == ("click ", "x")
    assert parse_action("search[a[b]]") == ("search[a", "b]")
    assert parse_action("search[a]\nclick[b]") == ("search", "a")
    assert parse_action("think\nsearch[a]") is None
    assert parse_action("search[]") is None


def test_uppercase_asin_click_opens_item(session: Session) -> None:
    session.step("search[organic tea bags]")
    assert session.step("click[B000000001]").info["page"] == "item"


def test_history_records_every_action(session: Session) -> None:
    session.step("search[tea]")
    session.step("nonsense")
    assert session.history == ["search[tea]", "nonsense"]


def test_unknown_goal_index_raises(fixture_env: WebShopEnv) -> None:
    with pytest.raises(IndexError, match="out of range"):
        fixture_env.new_session(len(fixture_env.goals))
