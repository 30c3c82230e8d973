"""Reading the agent's prompt back: instruction, page, available actions, past actions.

The layout is the one :func:`app.environments.webshop.agent.build_messages` writes; a
round-trip test keeps both sides in step. Past actions that are not well-formed
``search[...]`` / ``click[...]`` (invalid replies) are left out of the history a policy
sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

INSTRUCTION_PREFIX = "Instruction: "
OBSERVATION_MARKER = "\n\nCurrent observation:\n"
ACTIONS_MARKER = "\n\nAvailable actions:\n"
SEARCH_LINE = "search[<keywords>]"

_STEP_LINE = re.compile(r"^Step (\d+): (.*)$", re.MULTILINE)
_VALID_ACTION = re.compile(r"^(search|click)\[.+\]$")


class PromptFormatError(ValueError):
    """The messages are not an agent prompt this server can play."""


@dataclass(frozen=True)
class AgentPrompt:
    instruction: str
    observation: str
    available_actions: dict[str, Any]
    history: list[str]
    steps_taken: int = 0  # every earlier step, invalid ones too (the highest step number)


def last_user_content(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise PromptFormatError("no user message with text content")


def parse_prompt(messages: list[dict[str, Any]]) -> AgentPrompt:
    """The agent state in the last user message; :class:`PromptFormatError` otherwise."""
    text = last_user_content(messages)
    if not text.startswith(INSTRUCTION_PREFIX):
        raise PromptFormatError("the user message does not start with 'Instruction: '")
    head, marker, actions_block = text.rpartition(ACTIONS_MARKER)
    if not marker:
        raise PromptFormatError("no 'Available actions:' section")
    before, marker, observation = head.partition(OBSERVATION_MARKER)
    if not marker:
        raise PromptFormatError("no 'Current observation:' section")
    instruction = before.split("\n", 1)[0][len(INSTRUCTION_PREFIX) :].strip()
    has_search_bar = False
    clickables: list[str] = []
    for line in actions_block.split("\n"):
        if line == SEARCH_LINE:
            has_search_bar = True
        elif line.startswith("click[") and line.endswith("]"):
            clickables.append(line[len("click[") : -1])
    numbered = sorted(
        ((int(n), a.strip()) for n, a in _STEP_LINE.findall(before)), key=lambda x: x[0]
    )
    history = [action for _, action in numbered if _VALID_ACTION.match(action)]
    if has_search_bar:
        clickables = ["search", *clickables]
    return AgentPrompt(
        instruction=instruction,
        observation=observation,
        available_actions={"has_search_bar": has_search_bar, "clickables": clickables},
        history=history,
        steps_taken=numbered[-1][0] if numbered else 0,
    )
