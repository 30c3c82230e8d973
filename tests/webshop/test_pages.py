"""Golden observations of every page type (text mode), and text_rich / html spot checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.webshop.env import Session, WebShopEnv
from app.webshop.pages import Node, render

TEA = {"flavor name": "mint | lemon", "size": "50 count"}
INSTR = (
    "Find me caffeinated green tea with flavor name: mint | lemon, and size: 50 count, "
    "and price lower than 30.00 dollars"
)
HEAD = f"Instruction: [SEP] {INSTR} [SEP] Back to Search"


@pytest.fixture
def tea(fixture_env: WebShopEnv, goal_for) -> Callable[[], Session]:
    return lambda: fixture_env.new_session(goal_for(fixture_env, "B000000001", **TEA))


def test_search_page_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    assert s.goal.instruction == INSTR
    assert s.observation() == f"WebShop [SEP] Instruction: [SEP] {INSTR} [SEP] Search"


def test_results_page_one_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    obs = s.step("search[matcha]").observation
    assert obs == (
        f"{HEAD} [SEP] Page 1 (Total results: 1) [SEP] Next > [SEP] B000000007 "
        "[SEP] Green Tea Matcha Powder Ceremonial Grade [SEP] $24.0"
    )


def test_results_page_two_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[green tea]")
    obs = s.step("click[next >]").observation
    ids = list(fixture_env.search("green tea"))
    assert len(ids) == 24
    shown = [fixture_env.product(i) for i in ids[10:20]]
    products = " [SEP] ".join(f"{p.asin} [SEP] {p.name} [SEP] {p.price_text}" for p in shown)
    assert (
        obs == f"{HEAD} [SEP] Page 2 (Total results: 24) [SEP] < Prev [SEP] Next > [SEP] {products}"
    )


def test_results_past_last_page_shows_next_and_no_products(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[matcha]")
    obs = s.step("click[next >]").observation
    assert obs == f"{HEAD} [SEP] Page 2 (Total results: 1) [SEP] < Prev [SEP] Next >"
    assert s.available_actions()["clickables"] == ["back to search", "< prev", "next >"]


def test_item_page_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[organic tea bags]")
    obs = s.step("click[b000000001]").observation
    assert obs == (
        f"{HEAD} [SEP] < Prev [SEP] size [SEP] 100 count [SEP] 50 count [SEP] flavor name "
        "[SEP] mint | lemon [SEP] plain [SEP] Organic Green Tea Bags, 100 Count [SEP] "
        "Price: $12.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews "
        "[SEP] Buy Now"
    )
    assert s.available_actions() == {
        "has_search_bar": False,
        "clickables": [
            "back to search",
            "< prev",
            "description",
            "features",
            "reviews",
            "buy now",
            "100 count",
            "50 count",
            "mint | lemon",
            "plain",
        ],
    }


def test_range_price_shown_as_range(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[running shoes]")
    obs = s.step("click[b000000002]").observation
    assert "[SEP] Price: $35.0 to $49.5 [SEP]" in obs


def test_sub_pages_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[organic tea bags]")
    s.step("click[b000000001]")
    assert s.step("click[description]").observation == (
        f"{HEAD} [SEP] < Prev [SEP] Smooth green tea grown in the mountains."
    )
    s.step("click[< prev]")
    assert s.step("click[features]").observation == (
        f"{HEAD} [SEP] < Prev [SEP] 100 tea bags per box [SEP] Caffeinated"
    )
    s.step("click[< prev]")
    assert s.step("click[reviews]").observation == f"{HEAD} [SEP] < Prev"
    assert s.available_actions() == {
        "has_search_bar": False,
        "clickables": ["back to search", "< prev"],
    }


def test_done_page_text(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    s.step("search[organic tea bags]")
    s.step("click[b000000001]")
    s.step("click[mint | lemon]")
    s.step("click[50 count]")
    result = s.step("click[buy now]")
    assert result.done and result.reward == 1.0
    assert result.observation == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your "
        "MTurk interface.) [SEP] Purchased [SEP] asin [SEP] B000000001 [SEP] options [SEP] "
        '{"flavor name": "mint | lemon", "size": "50 count"} [SEP] attrs [SEP] None [SEP] '
        "category [SEP] None [SEP] query [SEP] None [SEP] product category [SEP] None [SEP] "
        "Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] instuction text "
        "[SEP] category [SEP] product category [SEP] query [SEP] Goal [SEP] None [SEP] Reward "
        "[SEP] Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None"
    )
    assert s.available_actions() == {"has_search_bar": False, "clickables": []}


def test_text_rich_as_the_originals_converter(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    assert s.observation("text_rich") == (
        f"WebShop\nInstruction: \n{INSTR}\n[button] Search [button_]\n"
    )
    s.step("search[matcha]")
    results = "\n[button] B000000007 [button_]\nGreen Tea Matcha Powder Ceremonial Grade\n$24.0\n"
    assert s.observation("text_rich").endswith(f"[button] Next > [button_]\n{results}")
    s.step("click[b000000007]")
    s.step("click[< prev]")
    assert "\n[clicked button] B000000007 [clicked button_]\n" in s.observation("text_rich")
    s.step("search[organic tea bags]")
    s.step("click[b000000001]")
    s.step("click[50 count]")
    rich = s.observation("text_rich")
    assert rich.startswith("You have clicked 50 count.\nInstruction:\n")
    assert "\n  [clicked button] 50 count [clicked button_]\n" in rich
    assert "\n  [button] 100 count [button_]\n" in rich
    assert rich.endswith("[button] Reviews [button_]\n[button] Buy Now [button_]\n")


def test_whitespace_nodes_as_beautifulsoup_leaves_them() -> None:
    nodes = [Node("a"), Node("  "), Node("\n  "), Node(""), Node(" b ")]
    assert render(nodes, "text") == "a [SEP]  [SEP] b"
    assert render(nodes, "text_rich") == "a\n \n b \n"


def test_html_mode_has_the_originals_ids_and_classes(fixture_env: WebShopEnv, tea) -> None:
    s = tea()
    page = s.observation("html")
    assert page.startswith("<!DOCTYPE html>")
    assert f'<div id="instruction-text"><h4>Instruction: <br>{INSTR}</h4></div>' in page
    assert '<input id="search_input"' in page
    assert '<button type="submit" class="btn">Search</button>' in page
    s.step("search[organic tea bags]")
    assert '<a class="product-link">B000000001</a>' in s.observation("html")
    s.step("click[b000000001]")
    s.step("click[50 count]")
    assert 'type="radio" id="radio_' in s.observation("html")
    assert 'name="size" value="50 count" checked>' in s.observation("html")


def test_unknown_observation_mode_rejected(fixture_env: WebShopEnv, tea) -> None:
    with pytest.raises(ValueError, match="Unknown observation mode"):
        tea().observation("markdown")
