"""WebShop's side of the agent protocol: its prompt, the grammar of a reply, its episode.

The layout of a step's prompt is every environment's (:mod:`app.core.agent`); this module
says what WebShop puts in it. Text mode parses ``search[...]`` / ``click[...]`` from the
reply (the last one, after removing ``<think>`` blocks); tool mode offers ``search``,
``click`` and ``buy`` tools. Products of a results page may be named by number
(``WSRL_AGENT_RESULT_REFS=numbers``), and constrained replies leave out the clicks an item
page's visit has spent. The scripted LLM server (``app/scripted_llm``) reads this layout
back; ``tests/scripted_llm/test_prompt.py`` keeps the two in step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.agent import (
    DEFAULT_PROTOCOL,
    NO_ACTION,
    AgentMode,
    Episode,
    HistoryStep,
    ResultRefs,
    prompt_messages,
    strip_think,
)
from app.core.llm import LLMCall
from app.webshop.success import is_success

INVALID_REPLY_OBSERVATION = "Invalid reply: it contained no search[...] or click[...] action."

SYSTEM_PROMPT_TEXT = """\
You are a shopping agent in the WebShop online store. Buy the product that best matches \
the instruction, with the requested options, within the price limit.
Each turn shows the instruction, your previous steps, the current page and its available \
actions. Reply with exactly one action:
- search[<keywords>] searches the store (only when search[<keywords>] is listed).
- click[<element>] clicks one listed element, written exactly as listed: a product id \
opens it, an option value selects it, click[buy now] buys the open product and ends the \
episode.
You may think first, but end your reply with the action."""

SYSTEM_PROMPT_TOOLS = """\
You are a shopping agent in the WebShop online store. Buy the product that best matches \
the instruction, with the requested options, within the price limit.
Each turn shows the instruction, your previous steps, the current page and its available \
actions. Call exactly one tool per turn: search (only when search[<keywords>] is listed), \
click (an element written exactly as listed: a product id opens it, an option value \
selects it) or buy (buys the open product and ends the episode)."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the store; only on a page with a search bar.",
            "parameters": {
                "type": "object",
                "properties": {"keywords": {"type": "string", "description": "Search text."}},
                "required": ["keywords"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "click",
            "description": "Click one of the available elements, exactly as listed.",
            "parameters": {
                "type": "object",
                "properties": {"element": {"type": "string", "description": "The element."}},
                "required": ["element"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "buy",
            "description": "Buy the open product with the selected options; ends the episode.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


# Text-mode pages open with the instruction ("WebShop [SEP] Instruction: [SEP] ... [SEP]");
# the prompt already shows it once, so each page drops it: shorter prompts, and a history
# line that shows what the step changed instead of the instruction again.
_INSTRUCTION_ECHO = re.compile(r"^(?:WebShop \[SEP\] )?Instruction: \[SEP\] [^\n]*? \[SEP\] ")


def page_text(observation: str) -> str:
    """The observation without its leading instruction echo (other formats unchanged)."""
    return _INSTRUCTION_ECHO.sub("", observation, count=1)


def format_available_actions(available_actions: dict[str, Any]) -> list[str]:
    lines = ["search[<keywords>]"] if available_actions.get("has_search_bar") else []
    lines += [f"click[{c}]" for c in available_actions.get("clickables", []) if c != "search"]
    return lines


# The free text of a constrained search: no brackets (the action would not parse), one line,
# and no angle brackets: the prompt's placeholder, ``search[<keywords>]``, cannot be typed
# as it is (SmolLM2-135M-Instruct did in 450 of its 455 constrained searches).
SEARCH_TEXT_REGEX = r"[^\[\]\n<>]+"


def action_structured_outputs(
    available_actions: dict[str, Any], leave_out: Collection[str] = ()
) -> dict[str, str]:
    """vLLM's ``structured_outputs`` that limit a text-mode reply to the page's valid actions:
    ``click[`` + one listed clickable + ``]``, or ``search[`` + free text + ``]`` where the
    page has a search bar. An optional space after the bracket keeps the tiny policy's
    habit (``click[ buy now]``); :func:`parse_action` strips it. The same request works
    against vLLM (GPU or CPU) and the trainer's policy server, which records the value
    with the call so the trainer can replay the mask. Clickables in ``leave_out`` are not
    offered (:func:`spent_clicks`).
    """
    options = []
    clickables = [
        c for c in available_actions.get("clickables", []) if c != "search" and c not in leave_out
    ]
    if clickables:
        options.append(r"click\[ ?(?:" + "|".join(re.escape(c) for c in clickables) + r")\]")
    if available_actions.get("has_search_bar") or not options:
        options.append(r"search\[ ?" + SEARCH_TEXT_REGEX + r"\]")
    return {"regex": "|".join(options)}


# Clickables of item pages and their sub-pages that are not option values.
PAGE_BUTTONS = frozenset(
    ("back to search", "< prev", "next >", "description", "features", "reviews", "attributes",
     "buy now")
)  # fmt: skip
SUB_PAGES = frozenset(("description", "features", "reviews", "attributes"))


def result_numbers(available_actions: dict[str, Any]) -> dict[str, str]:
    """``{"1": first listed product id, ...}`` on a results page; empty on any other page
    (an item page's other clickables are option values, not products)."""
    clickables = [c for c in available_actions.get("clickables", []) if c != "search"]
    if "buy now" in clickables:
        return {}
    products = [c for c in clickables if c not in PAGE_BUTTONS]
    return {str(number): product for number, product in enumerate(products, 1)}


def numbered_page(observation: str, numbers: dict[str, str]) -> str:
    """The page with each listed product id (a ``[SEP]``-separated segment, in any case)
    replaced by its number."""
    if not numbers:
        return observation
    by_id = {product.lower(): number for number, product in numbers.items()}
    pattern = "|".join(re.escape(product) for product in by_id)
    return re.sub(
        rf"(?<=\[SEP\] )(?:{pattern})(?= \[SEP\]|$)",
        lambda match: by_id[match.group(0).lower()],
        observation,
        flags=re.IGNORECASE,
    )


def spent_clicks(
    history: Sequence[HistoryStep], observation: str, available_actions: dict[str, Any]
) -> set[str]:
    """The clicks of the open item page that its visit has already spent: every value of
    an option (``size``: ``small``, ``large``) once one of them was clicked since the
    product was opened, and each sub-page (``description``, ...) already opened from it.
    Making them again only changes a choice or shows a page seen before, and a policy
    shown one step of history cannot tell a first click from a repeat: with these left out
    of the valid actions (``WSRL_AGENT_CONSTRAIN_ACTIONS``) a visit chooses each option
    once and opens each sub-page once, then buys or leaves. The options are read from the
    text page (``size [SEP] small [SEP] large``); a chosen value not found there is left
    out alone."""
    clickables = [c for c in available_actions.get("clickables", []) if c != "search"]
    if "buy now" not in clickables:
        return set()
    values = {c for c in clickables if c not in PAGE_BUTTONS}
    chosen: set[str] = set()
    opened: set[str] = set()
    for step in reversed(history):
        if step.action == NO_ACTION:
            continue
        verb, _, argument = step.action.partition("[")
        argument = argument.removesuffix("]").strip().lower()
        if verb != "click" or (argument not in values and argument not in PAGE_BUTTONS):
            break  # a search, or the click that opened this product
        if argument in values:
            chosen.add(argument)
        elif argument in SUB_PAGES:
            opened.add(argument)
    spent = chosen | opened
    if not chosen:
        return spent
    options: dict[str, set[str]] = {}
    name = ""
    for segment in page_text(observation).split(" [SEP] "):
        text = segment.strip().lower()
        if text in values:
            options.setdefault(name, set()).add(text)
        else:
            name = text
    for group in options.values():
        if group & chosen:
            spent |= group
    return spent


def build_messages(
    instruction: str,
    observation: str,
    available_actions: dict[str, Any],
    history: Sequence[HistoryStep],
    *,
    history_steps: int = DEFAULT_PROTOCOL.history_steps,
    mode: AgentMode | str = DEFAULT_PROTOCOL.mode,
) -> list[dict[str, str]]:
    """The chat messages of one WebShop step, products named by id (the prompt an
    :class:`WebShopEpisode` writes with ``result_refs=ids``)."""
    system = SYSTEM_PROMPT_TOOLS if AgentMode(mode) == AgentMode.TOOLS else SYSTEM_PROMPT_TEXT
    return prompt_messages(
        system,
        instruction,
        page_text(observation),
        format_available_actions(available_actions),
        history,
        history_steps,
        shown=page_text,
    )


# The argument may hold one level of brackets, e.g. click[size 6.5 [us]].
_ACTION = re.compile(
    r"\b(search|click)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]",
    re.IGNORECASE,
)


def parse_action(text: str) -> str | None:
    """The last well-formed ``search[...]`` / ``click[...]`` outside think blocks.

    The verb is lowercased, the argument stripped; an empty argument is not an action.
    """
    for match in reversed(list(_ACTION.finditer(strip_think(text or "")))):
        argument = match.group(2).strip()
        if argument:
            return f"{match.group(1).lower()}[{argument}]"
    return None


def _clicked(action: str) -> str | None:
    """The argument of a ``click[...]`` action, else None."""
    if action.startswith("click["):
        return action.removeprefix("click[").removesuffix("]")
    return None


def parse_tool_calls(tool_calls: Sequence[dict[str, Any]]) -> str | None:
    """The first tool call that is a well-formed search/click/buy, as an action string."""
    for call in tool_calls:
        function = call.get("function") or {}
        name = function.get("name")
        try:
            args = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            continue
        if not isinstance(args, dict):
            continue
        if name == "buy":
            return "click[buy now]"
        key = {"search": "keywords", "click": "element"}.get(name or "")
        value = args.get(key) if key else None
        if isinstance(value, str) and value.strip():
            return f"{name}[{value.strip()}]"
    return None


def action_from_call(call: LLMCall, mode: AgentMode | str = DEFAULT_PROTOCOL.mode) -> str | None:
    """The action of a reply: tool calls first in tool mode, else the text."""
    if AgentMode(mode) == AgentMode.TOOLS and call.tool_calls:
        action = parse_tool_calls(call.tool_calls)
        if action is not None:
            return action
    return parse_action(call.response_text)


@dataclass
class WebShopEpisode(Episode):
    """One WebShop episode: its prompt, its reply grammar, its products by number and the
    clicks an item page's visit has spent."""

    _visit: int = field(default=0, init=False, repr=False)
    """Where the open product's visit begins in ``history``: the step after the click that
    opened it (by number, ``click[3]`` may also be an option value of the page it opens)."""

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT_TOOLS if self.protocol.mode == AgentMode.TOOLS else SYSTEM_PROMPT_TEXT

    def tools(self) -> list[dict[str, Any]] | None:
        """:data:`TOOLS` in tools mode, else none."""
        return TOOLS if self.protocol.mode == AgentMode.TOOLS else None

    def page(self, observation: str) -> str:
        return page_text(observation)

    def listed_actions(self) -> list[str]:
        return format_available_actions(self._shown_actions())

    def parse(self, reply: LLMCall | str) -> str | None:
        if isinstance(reply, str):
            return parse_action(reply)
        return action_from_call(reply, self.protocol.mode)

    def invalid_reply(self) -> str:
        return INVALID_REPLY_OBSERVATION

    def success(self, reward: float) -> bool:
        return is_success(reward)

    def _numbers(self) -> dict[str, str]:
        if self.protocol.result_refs != ResultRefs.NUMBERS:
            return {}
        return result_numbers(self.available_actions)

    def _shown_actions(self) -> dict[str, Any]:
        """The page's actions as the prompt lists them (products by number, if so named)."""
        numbers = self._numbers()
        if not numbers:
            return self.available_actions
        number_of = {product: number for number, product in numbers.items()}
        clickables = [number_of.get(c, c) for c in self.available_actions.get("clickables", [])]
        return {**self.available_actions, "clickables": clickables}

    def shown_action(self, action: str) -> str:
        for number, product in self._numbers().items():
            if action == f"click[{product}]":
                return f"click[{number}]"
        return action

    def taken_action(self, action: str) -> str:
        clicked = _clicked(action)
        product = self._numbers().get(clicked) if clicked is not None else None
        return f"click[{product}]" if product is not None else action

    def shown_observation(self, observation: str) -> str:
        return numbered_page(observation, self._numbers())

    def structured_outputs(self) -> dict[str, str] | None:
        """The constraint of the next reply (see :func:`action_structured_outputs`)."""
        if not self.protocol.constrain_actions:  # never set in tools mode
            return None
        visit = self.history[self._visit :]
        spent = spent_clicks(visit, self.observation, self.available_actions)
        return action_structured_outputs(self._shown_actions(), spent)

    def stepping(self, action: str | None, valid: bool) -> None:
        clicked = _clicked(action) if valid and action else None
        if clicked is not None and clicked in result_numbers(self.available_actions).values():
            self._visit = len(self.history) + 1
