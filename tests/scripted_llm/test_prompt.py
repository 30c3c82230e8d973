"""The scripted server reads back exactly what the agent's prompt says."""

from __future__ import annotations

import pytest

from app.core.agent import NO_ACTION, HistoryStep
from app.environments.webshop.agent import build_messages
from app.scripted_llm.prompt import PromptFormatError, parse_prompt

RESULTS_OBS = (
    "Instruction: [SEP] a red lamp [SEP] Back to Search [SEP] Page 1 (Total results: 50) "
    "[SEP] Next > [SEP] B000000001 [SEP] Red Lamp [SEP] $19.99"
)
RESULTS_PAGE = {"has_search_bar": False, "clickables": ["back to search", "next >", "b000000001"]}


def test_round_trip_keeps_instruction_observation_actions_and_history() -> None:
    history = [
        HistoryStep(1, "search[red lamp]", "Instruction: [SEP] ... results"),
        HistoryStep(2, NO_ACTION, "Invalid reply"),
        HistoryStep(3, "click[next >]", "page 2"),
        HistoryStep(4, "click[< prev]", "page 1\nwith a newline"),
    ]
    messages = build_messages(
        "Find a red lamp, price lower than 30.00 dollars", RESULTS_OBS, RESULTS_PAGE, history
    )
    prompt = parse_prompt(messages)
    assert prompt.instruction == "Find a red lamp, price lower than 30.00 dollars"
    # the page without its instruction echo: the prompt shows the instruction once
    assert prompt.observation == RESULTS_OBS.split(" [SEP] ", 2)[2]
    assert prompt.observation.startswith("Back to Search [SEP] Page 1")
    assert prompt.available_actions == RESULTS_PAGE
    # invalid replies are not actions a policy took
    assert prompt.history == ["search[red lamp]", "click[next >]", "click[< prev]"]


def test_round_trip_search_page_has_search_bar() -> None:
    page = {"has_search_bar": True, "clickables": ["search"]}
    prompt = parse_prompt(build_messages("i", "WebShop [SEP] Search", page, []))
    assert prompt.available_actions == page
    assert prompt.history == []


def test_round_trip_multiline_observation() -> None:
    observation = "Description [SEP] line one\nline two\n\nline four"
    prompt = parse_prompt(build_messages("i", observation, RESULTS_PAGE, []))
    assert prompt.observation == observation


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": "hello there"}],
        [{"role": "user", "content": "Instruction: x\n\nno sections"}],
        [{"role": "system", "content": "Instruction: x"}],
    ],
)
def test_unreadable_prompt_raises(messages: list[dict]) -> None:
    with pytest.raises(PromptFormatError):
        parse_prompt(messages)


def test_pages_in_the_prompt_drop_the_instruction_echo() -> None:
    echo = "WebShop [SEP] Instruction: [SEP] find a red lamp [SEP] Search"
    history = [HistoryStep(1, "click[back to search]", echo)]
    [_, user] = build_messages("find a red lamp", echo, {"has_search_bar": True}, history)
    assert user["content"].count("find a red lamp") == 1
    assert "Observation: Search\n" in user["content"]
    assert user["content"].endswith(
        "Current observation:\nSearch\n\nAvailable actions:\nsearch[<keywords>]"
    )
