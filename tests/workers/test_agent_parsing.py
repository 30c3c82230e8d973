"""Reading actions out of model replies, and the prompt the agent builds."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers.factories import make_llm_call

from app.core.agent import DEFAULT_PROTOCOL, AgentMode, HistoryStep
from app.core.llm import LLMCall
from app.environments.webshop.agent import (
    TOOLS,
    action_from_call,
    build_messages,
    parse_action,
    parse_tool_calls,
)


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("search[red running shoes]", "search[red running shoes]"),
        ("click[B07XYZ1234]", "click[B07XYZ1234]"),
        ("Action: click[buy now]", "click[buy now]"),
        (
            "I should look for shoes first.\nsearch[ shoes size 9 ]\nThat is all.",
            "search[shoes size 9]",
        ),
        ("Search[Shoes]", "search[Shoes]"),
        ("`click[< prev]`", "click[< prev]"),
        ("click[size 6.5 [us]]", "click[size 6.5 [us]]"),
        ("search[first] then maybe click[second]", "click[second]"),
    ],
)
def test_parse_action_finds_last_action_in_prose(reply: str, action: str) -> None:
    assert parse_action(reply) == action


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("<think>maybe search[wrong]</think>click[b0001]", "click[b0001]"),
        ("<think>a\nmulti-line\nclick[x]</think>\n\nsearch[lamp]", "search[lamp]"),
        (
            "reasoning whose <think> tag sat in the prompt click[no]</think> click[yes]",
            "click[yes]",
        ),
        ("search[lamp] <think>an unclosed block click[cut off", "search[lamp]"),
        ("<THINK>click[a]</THINK> click[b]", "click[b]"),
    ],
)
def test_parse_action_ignores_think_blocks(reply: str, action: str) -> None:
    assert parse_action(reply) == action


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I am not sure what to do.",
        "search[]",
        "search[   ]",
        "click [buy now",
        "purchase[item]",
        "<think>click[only thinking]</think>",
        "<think>click[never closed",
        "research[shoes]",
    ],
)
def test_parse_action_garbage_is_none(reply: str) -> None:
    assert parse_action(reply) is None


def _call(name: str, arguments: object) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}


@pytest.mark.parametrize(
    ("calls", "action"),
    [
        ([_call("search", {"keywords": "blue lamp"})], "search[blue lamp]"),
        ([_call("click", {"element": "b0001"})], "click[b0001]"),
        ([_call("buy", {})], "click[buy now]"),
        ([_call("buy", "")], "click[buy now]"),
        ([_call("dance", {}), _call("click", {"element": "large"})], "click[large]"),
        ([_call("search", "{not json"), _call("buy", {})], "click[buy now]"),
    ],
)
def test_parse_tool_calls(calls: list[dict], action: str) -> None:
    assert parse_tool_calls(calls) == action


@pytest.mark.parametrize(
    "calls",
    [
        [],
        [_call("search", {"keywords": ""})],
        [_call("click", {"what": "b0001"})],
        [_call("click", "[1, 2]")],
        [_call("teleport", {"element": "x"})],
    ],
)
def test_parse_tool_calls_invalid_is_none(calls: list[dict]) -> None:
    assert parse_tool_calls(calls) is None


def _llm_call(text: str, tool_calls: list[dict] | None = None) -> LLMCall:
    return make_llm_call(
        response_text=text,
        tool_calls=tool_calls or [],
        prompt_token_ids=None,
        response_token_ids=None,
        response_logprobs=None,
        model="m",
        trainable=False,
    )


def test_action_from_call_tool_mode_prefers_tool_calls_then_text() -> None:
    with_tool = _llm_call("search[text]", [_call("click", {"element": "b1"})])
    assert action_from_call(with_tool, AgentMode.TOOLS) == "click[b1]"
    assert action_from_call(with_tool, AgentMode.TEXT) == "search[text]"
    bad_tool = _llm_call("click[fallback]", [_call("click", {})])
    assert action_from_call(bad_tool, AgentMode.TOOLS) == "click[fallback]"
    assert action_from_call(_llm_call("nothing"), AgentMode.TOOLS) is None


SEARCH_PAGE = {"has_search_bar": True, "clickables": ["search"]}
CONSTRAINED = replace(DEFAULT_PROTOCOL, constrain_actions=True)
ITEM_PAGE = {"has_search_bar": False, "clickables": ["back to search", "< prev", "buy now", "red"]}


def test_build_messages_first_step_shape() -> None:
    messages = build_messages("Buy a red lamp", "WebShop [SEP] Search", SEARCH_PAGE, [])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "search[<keywords>]" in messages[0]["content"]
    user = messages[1]["content"]
    assert user.startswith("Instruction: Buy a red lamp\n")
    assert "Previous steps: none" in user
    assert "Current observation:\nWebShop [SEP] Search\n" in user
    assert user.endswith("Available actions:\nsearch[<keywords>]")


def test_build_messages_shows_last_k_steps_with_short_observations() -> None:
    history = [HistoryStep(n, f"click[item {n}]", "obs " + "x" * 500) for n in range(1, 7)]
    user = build_messages("i", "page", ITEM_PAGE, history, history_steps=4)[1]["content"]
    assert "Previous steps (the last 4 of 6):" in user
    assert "Step 2: click[item 2]" not in user
    for n in (3, 4, 5, 6):
        assert f"Step {n}: click[item {n}]" in user
    longest = max(len(line) for line in user.splitlines() if line.startswith("Observation: "))
    assert longest <= len("Observation: ") + 200
    assert user.endswith(
        "Available actions:\nclick[back to search]\nclick[< prev]\nclick[buy now]\nclick[red]"
    )


def test_build_messages_no_history_when_k_is_zero() -> None:
    history = [HistoryStep(1, "search[a]", "o")]
    user = build_messages("i", "page", ITEM_PAGE, history, history_steps=0)[1]["content"]
    assert "Step 1" not in user


def test_build_messages_tool_mode_system_prompt_names_tools() -> None:
    system = build_messages("i", "p", SEARCH_PAGE, [], mode="tools")[0]["content"]
    assert {t["function"]["name"] for t in TOOLS} == {"search", "click", "buy"}
    for name in ("search", "click", "buy"):
        assert name in system


def test_build_messages_is_pure() -> None:
    history = [HistoryStep(1, "search[a]", "o")]
    first = build_messages("i", "p", ITEM_PAGE, history)
    assert build_messages("i", "p", ITEM_PAGE, history) == first
    assert history == [HistoryStep(1, "search[a]", "o")]


# --- the agent protocol a policy expects ----------------------------------------------------


def test_settings_left_unset_give_way_to_the_expected_protocol() -> None:
    from app.config import Settings
    from app.core.agent import AgentMode, AgentProtocol, agent_protocol

    expected = {"mode": "tools", "history_steps": 2, "constrain_actions": False, "max_steps": 9}
    protocol = agent_protocol(Settings(_env_file=None), "policy v3", expected)
    assert protocol == AgentProtocol(AgentMode.TOOLS, 2, False, 9)
    # Equal explicit settings agree; nothing expected: the settings' own protocol.
    settings = Settings(_env_file=None, max_steps=9, agent_mode="tools", agent_history_steps=2)
    assert agent_protocol(settings, "policy v3", expected) == protocol
    assert agent_protocol(settings, "x") == AgentProtocol.from_settings(settings)


def test_explicit_settings_that_contradict_name_each_variable() -> None:
    import pytest

    from app.config import Settings
    from app.core.agent import AgentProtocolMismatch, agent_protocol

    settings = Settings(_env_file=None, max_steps=15, agent_mode="text", agent_history_steps=4)
    with pytest.raises(AgentProtocolMismatch) as caught:
        agent_protocol(settings, "the bootstrap", {"history_steps": 1, "mode": "text"})
    message = str(caught.value)
    assert "WSRL_AGENT_HISTORY_STEPS=4 is set here but the bootstrap expects 1" in message
    assert "WSRL_AGENT_MODE" not in message and "WSRL_MAX_STEPS" not in message


def test_constrained_replies_only_conflict_in_text_mode() -> None:
    import pytest

    from app.config import Settings
    from app.core.agent import AgentProtocolMismatch, agent_protocol

    settings = Settings(_env_file=None, agent_constrain_actions=True)
    tools = {"mode": "tools", "constrain_actions": False}
    assert not agent_protocol(settings, "v1", tools).constrain_actions
    with pytest.raises(AgentProtocolMismatch, match="WSRL_AGENT_CONSTRAIN_ACTIONS=True"):
        agent_protocol(settings, "v1", {"mode": "text", "constrain_actions": False})


def test_protocol_round_trips_and_an_incomplete_record_is_an_error() -> None:
    import pytest

    from app.core.agent import AgentMode, AgentProtocol

    protocol = AgentProtocol(AgentMode.TEXT, 1, True, 15)
    assert AgentProtocol.from_dict(protocol.to_dict()) == protocol
    with pytest.raises(ValueError, match="lacks max_steps"):
        AgentProtocol.from_dict({"mode": "text", "history_steps": 1, "constrain_actions": True})
    with pytest.raises(ValueError):
        AgentProtocol.from_dict({**protocol.to_dict(), "mode": "speech"})


def test_protocol_records_from_before_result_refs_name_results_by_id() -> None:
    import pytest

    from app.core.agent import AgentMode, AgentProtocol, ResultRefs

    numbered = AgentProtocol(AgentMode.TEXT, 1, True, 15, ResultRefs.NUMBERS)
    assert AgentProtocol.from_dict(numbered.to_dict()) == numbered
    assert "results by number" in numbered.describe()
    older = {"mode": "text", "history_steps": 1, "constrain_actions": True, "max_steps": 15}
    assert AgentProtocol.from_dict(older).result_refs == ResultRefs.IDS
    with pytest.raises(ValueError, match="result_refs must be one of ids, numbers"):
        AgentProtocol.from_dict({**older, "result_refs": "titles"})


def test_constrained_episode_asks_for_the_page_actions_only_in_text_mode() -> None:
    import re

    from app.core.agent import AgentMode
    from app.environments.webshop.agent import WebShopEpisode

    page = {"has_search_bar": False, "clickables": ["back to search", "B0X", "size 6.5 [us]"]}
    episode = WebShopEpisode("a mug", "page", page, CONSTRAINED)
    regex = episode.structured_outputs()["regex"]
    assert re.fullmatch(regex, "click[ size 6.5 [us]]") and re.fullmatch(regex, "click[B0X]")
    assert not re.fullmatch(regex, "click[ B0Y]") and not re.fullmatch(regex, "search[ mug]")
    assert WebShopEpisode("a mug", "page", page).structured_outputs() is None
    tools = WebShopEpisode("a mug", "page", page, replace(CONSTRAINED, mode=AgentMode.TOOLS))
    assert tools.structured_outputs() is None


OPTIONS_ACTIONS = {
    "has_search_bar": False,
    "clickables": [
        *("back to search", "< prev", "description", "features", "reviews", "buy now"),
        *("small", "large", "red", "blue"),
    ],
}
OPTIONS_PAGE = (
    "Back to Search [SEP] < Prev [SEP] size [SEP] small [SEP] large [SEP] color [SEP] red "
    "[SEP] blue [SEP] A mug [SEP] Price: $3.0 [SEP] Rating: N.A. [SEP] Description [SEP] "
    "Features [SEP] Reviews [SEP] Buy Now"
)


PRODUCTS = ["b0aaaaaaaa", "b0bbbbbbbb", "b0cccccccc"]
RESULTS_PAGE = (
    "Back to Search [SEP] Page 1 (Total results: 3) [SEP] Next > [SEP] "
    + " [SEP] ".join(f"{p.upper()} [SEP] A mug {n} [SEP] $3.0" for n, p in enumerate(PRODUCTS))
)


def _steps(*actions: str) -> list[HistoryStep]:
    return [HistoryStep(i + 1, a, "page") for i, a in enumerate(actions)]


@pytest.mark.parametrize(
    ("actions", "spent"),
    [
        (("search[mug]", "click[b0abc]"), set()),
        (("search[mug]", "click[b0abc]", "click[large]"), {"small", "large"}),
        (  # a sub-page and back keep the choice; an invalid step is skipped
            ("click[b0abc]", "click[red]", "click[description]", "click[< prev]", "(no action)"),
            {"red", "blue", "description"},
        ),
        (("click[b0abc]", "click[reviews]", "click[< prev]"), {"reviews"}),
        (("click[b0abc]", "click[red]", "click[small]"), {"small", "large", "red", "blue"}),
        (("click[b0abc]", "click[small]", "click[< prev]", "click[b0def]"), set()),  # another
    ],
)
def test_options_chosen_and_sub_pages_opened_on_the_item_page_are_spent(
    actions: tuple[str, ...], spent: set[str]
) -> None:
    from app.environments.webshop.agent import spent_clicks

    assert spent_clicks(_steps(*actions), OPTIONS_PAGE, OPTIONS_ACTIONS) == spent


def test_spent_clicks_outside_an_item_page_or_off_the_page_text() -> None:
    from app.environments.webshop.agent import spent_clicks

    results = {"has_search_bar": False, "clickables": ["back to search", "next >", "b0abc"]}
    assert spent_clicks(_steps("search[mug]"), "Page 1 [SEP] b0abc", results) == set()
    # the options cannot be read from the page: the chosen value alone is left out
    assert spent_clicks(_steps("click[b0a]", "click[red]"), "<html>", OPTIONS_ACTIONS) == {"red"}


def test_constrained_episode_does_not_offer_the_clicks_its_visit_has_spent() -> None:
    import re

    from app.environments.webshop.agent import WebShopEpisode

    episode = WebShopEpisode("a mug", OPTIONS_PAGE, OPTIONS_ACTIONS, CONSTRAINED)
    episode.history = _steps("click[b0abc]", "click[large]", "click[features]", "click[< prev]")
    regex = episode.structured_outputs()["regex"]
    assert re.fullmatch(regex, "click[ red]") and re.fullmatch(regex, "click[ buy now]")
    assert re.fullmatch(regex, "click[ description]") and re.fullmatch(regex, "click[< prev]")
    assert not re.fullmatch(regex, "click[ small]") and not re.fullmatch(regex, "click[ large]")
    assert not re.fullmatch(regex, "click[ features]")


def test_a_result_opened_by_number_is_not_taken_for_an_option_of_that_value() -> None:
    """``click[3]`` opened the third result; on its page ``3`` is also a size. The visit
    has chosen nothing yet, so both sizes stay offered."""
    import re

    from app.core.agent import ResultRefs
    from app.environments.webshop.agent import WebShopEpisode

    results = {"has_search_bar": False, "clickables": ["back to search", "next >", *PRODUCTS]}
    page = OPTIONS_PAGE.replace("small", "3").replace("large", "5")
    actions = {
        **OPTIONS_ACTIONS,
        "clickables": [
            c.replace("small", "3").replace("large", "5") for c in OPTIONS_ACTIONS["clickables"]
        ],
    }
    for refs in ResultRefs:
        episode = WebShopEpisode(
            "a mug", RESULTS_PAGE, results, replace(CONSTRAINED, result_refs=refs)
        )
        action, _ = episode.action(
            "click[3]" if refs == ResultRefs.NUMBERS else f"click[{PRODUCTS[2]}]"
        )
        assert action == f"click[{PRODUCTS[2]}]"
        episode.record(action, valid=True, seen=page, observation=page, available_actions=actions)
        regex = episode.structured_outputs()["regex"]
        assert re.fullmatch(regex, "click[ 3]") and re.fullmatch(regex, "click[ 5]"), refs
        episode.record(
            "click[5]", valid=True, seen=page, observation=page, available_actions=actions
        )
        regex = episode.structured_outputs()["regex"]
        assert not re.fullmatch(regex, "click[ 3]") and re.fullmatch(regex, "click[ red]"), refs
