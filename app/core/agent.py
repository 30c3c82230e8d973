"""The agent protocol: the prompt of a step, the grammar of a reply, one episode's state.

Each step is a fresh prompt (system + one user message) carrying the instruction, the
current page, its available actions and the last k steps, the layout verl-agent uses for
WebShop. Every player builds it here: the Celery worker (:mod:`workers.agent`), the
in-process evaluation and the demonstrations of the bootstrap (:mod:`trainer`), through
:class:`Episode`, so all of them play exactly the same game. The scripted LLM server
(``app/scripted_llm``) reads this layout back; ``tests/scripted_llm/test_prompt.py`` keeps
the two in step.

Text mode parses ``search[...]`` / ``click[...]`` from the reply (the last one, after
removing ``<think>`` blocks); tool mode offers ``search``, ``click`` and ``buy`` tools.
A reply without a usable action is a step with ``valid=False`` and no env call; the
episode goes on. ``max_steps`` without buying ends it with reward 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.config import Settings
from app.core.llm import LLMCall
from app.webshop.success import is_success

HISTORY_OBSERVATION_CHARS = 200
LOG_OBSERVATION_CHARS = 80
NO_ACTION = "(no action)"
INVALID_REPLY_OBSERVATION = "Invalid reply: it contained no search[...] or click[...] action."
# The env server refuses longer actions with a 422; the agent makes them invalid steps
# instead, so a runaway reply costs a step, not the attempt.
MAX_ACTION_CHARS = 2_000
TOO_LONG_ACTION = f"Invalid reply: the action is longer than {MAX_ACTION_CHARS} characters."


class AgentMode(StrEnum):
    TEXT = "text"
    TOOLS = "tools"


class ResultRefs(StrEnum):
    """How the agent's prompt names the products of a results page."""

    IDS = "ids"
    """The env's product ids, as the original's pages list them (``click[b09h42ji5s]``)."""
    NUMBERS = "numbers"
    """Their places on the page (``click[1]`` is the first listed), mapped back to the ids
    on the agent's side; the env sees the same actions either way."""


# --- the agent protocol a policy is trained for ---------------------------------------------

# Each field of the agent protocol and the setting (``WSRL_`` + upper case) a process may set
# it by.
PROTOCOL_SETTINGS = {
    "mode": "agent_mode",
    "history_steps": "agent_history_steps",
    "constrain_actions": "agent_constrain_actions",
    "max_steps": "max_steps",
    "result_refs": "agent_result_refs",
}
PROTOCOL_DEFAULTS: dict[str, Any] = {
    f: Settings.model_fields[name].default for f, name in PROTOCOL_SETTINGS.items()
}
"""The agent protocol of a process that sets none of those settings: their defaults in
:class:`app.config.Settings`, the one place they are written (:data:`DEFAULT_PROTOCOL` and
the verl configs' ``agent_defaults`` read them from here)."""

# A record written before ``result_refs`` existed named results by id, as it was played.
PROTOCOL_FIELD_DEFAULTS = {"result_refs": ResultRefs.IDS.value}


class AgentProtocolMismatch(ValueError):
    """Settings a process set explicitly contradict the protocol a policy expects."""


@dataclass(frozen=True)
class AgentProtocol:
    """How a policy is played: everything that changes what a worker sends the model or
    how it reads the reply. A trainer publishes it with every policy version
    (:mod:`app.core.endpoint`); workers play what the published version expects
    (:func:`agent_protocol`). Constrained replies exist only in text mode, so a tools-mode
    protocol is never constrained."""

    mode: AgentMode
    history_steps: int
    constrain_actions: bool
    max_steps: int
    result_refs: ResultRefs = PROTOCOL_DEFAULTS["result_refs"]  # a ResultRefs after __post_init__

    def __post_init__(self) -> None:
        mode = AgentMode(self.mode)
        try:
            refs = ResultRefs(self.result_refs)
        except ValueError:
            allowed = ", ".join(r.value for r in ResultRefs)
            raise ValueError(
                f"result_refs must be one of {allowed}, got {self.result_refs!r}"
            ) from None
        object.__setattr__(self, "result_refs", refs)
        if int(self.history_steps) < 0 or int(self.max_steps) < 1:
            raise ValueError(
                f"agent protocol with history_steps={self.history_steps} and "
                f"max_steps={self.max_steps}: history_steps >= 0 and max_steps >= 1"
            )
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "history_steps", int(self.history_steps))
        object.__setattr__(self, "max_steps", int(self.max_steps))
        constrained = bool(self.constrain_actions) and mode == AgentMode.TEXT
        object.__setattr__(self, "constrain_actions", constrained)

    @classmethod
    def from_settings(cls, settings: Any) -> AgentProtocol:
        return cls(**{f: getattr(settings, name) for f, name in PROTOCOL_SETTINGS.items()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": str(self.mode),
            "history_steps": self.history_steps,
            "constrain_actions": self.constrain_actions,
            "max_steps": self.max_steps,
            "result_refs": str(self.result_refs),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentProtocol:
        """Strict: a record without every field is an error, not a default (except the
        fields of :data:`PROTOCOL_FIELD_DEFAULTS`, younger than the records)."""
        record = {**PROTOCOL_FIELD_DEFAULTS, **data}
        missing = [f for f in PROTOCOL_SETTINGS if f not in record]
        if missing:
            raise ValueError(f"agent protocol lacks {', '.join(missing)}: {data!r}")
        return cls(**{f: record[f] for f in PROTOCOL_SETTINGS})

    def describe(self) -> str:
        constrained = ", constrained replies" if self.constrain_actions else ""
        numbered = ", results by number" if self.result_refs == ResultRefs.NUMBERS else ""
        return (
            f"{self.mode} mode, {self.history_steps} steps of history, "
            f"{self.max_steps} steps{constrained}{numbered}"
        )


DEFAULT_PROTOCOL = AgentProtocol(**PROTOCOL_DEFAULTS)
"""What a player plays when it is given nothing else: the defaults of every player's
arguments (the worker's, the in-process one's, :class:`Episode`'s)."""
DEFAULT_HISTORY_STEPS = DEFAULT_PROTOCOL.history_steps


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


@dataclass(frozen=True)
class HistoryStep:
    """One earlier step as the prompt shows it (number is 1-based)."""

    number: int
    action: str
    observation: str


@dataclass
class StepRecord:
    """One agent step (a ``steps`` row). ``index`` is 0-based; logs show index + 1."""

    index: int
    action: str | None
    reply: str
    observation: str
    reward: float
    done: bool
    valid: bool
    info: dict[str, Any]
    error: str | None
    llm_latency_ms: float
    env_latency_ms: float
    policy_version: int | None
    """The policy that wrote the reply; None for a scripted opening step (no LLM call)."""
    # The page's actions after the step, as the env's step answer carried them (not a row).
    available_actions: dict[str, Any] | None = None

    @property
    def latency_ms(self) -> float:
        return self.llm_latency_ms + self.env_latency_ms


@dataclass
class EpisodeResult:
    goal_id: int
    session_id: str
    instruction: str
    reward: float
    done: bool
    end_reason: str  # "bought" | "max_steps"
    num_steps: int
    num_invalid: int
    num_llm_calls: int
    num_trainable_calls: int
    policy_versions: tuple[int, int] | None
    reward_parts: dict[str, Any] | None
    duration_s: float
    steps: list[StepRecord] = field(default_factory=list, repr=False)

    @property
    def success(self) -> bool:
        return is_success(self.reward)


# --- prompt ------------------------------------------------------------------------------


# Text-mode pages open with the instruction ("WebShop [SEP] Instruction: [SEP] ... [SEP]");
# the prompt already shows it once, so each page drops it: shorter prompts, and a history
# line that shows what the step changed instead of the instruction again.
_INSTRUCTION_ECHO = re.compile(r"^(?:WebShop \[SEP\] )?Instruction: \[SEP\] [^\n]*? \[SEP\] ")


def page_text(observation: str) -> str:
    """The observation without its leading instruction echo (other formats unchanged)."""
    return _INSTRUCTION_ECHO.sub("", observation, count=1)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


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
    """The chat messages of one step: system (grammar) + user (task and state).

    ``history`` is the whole episode so far; only its last ``history_steps`` entries are
    shown, each observation cut to one short line.
    """
    shown = list(history)[-history_steps:] if history_steps > 0 else []
    if shown:
        header = f"Previous steps (the last {len(shown)} of {len(history)}):"
        past = [header]
        for step in shown:
            past.append(f"Step {step.number}: {step.action}")
            seen = one_line(page_text(step.observation), HISTORY_OBSERVATION_CHARS)
            past.append(f"Observation: {seen}")
    else:
        past = ["Previous steps: none, this is the first step."]
    actions = format_available_actions(available_actions) or ["none"]
    user = "\n".join(
        [
            f"Instruction: {one_line(instruction, 2000)}",
            "",
            *past,
            "",
            "Current observation:",
            page_text(observation),
            "",
            "Available actions:",
            *actions,
        ]
    )
    system = SYSTEM_PROMPT_TOOLS if AgentMode(mode) == AgentMode.TOOLS else SYSTEM_PROMPT_TEXT
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --- parsing replies -----------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
# The argument may hold one level of brackets, e.g. click[size 6.5 [us]].
_ACTION = re.compile(
    r"\b(search|click)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]",
    re.IGNORECASE,
)


def strip_think(text: str) -> str:
    """The reply without reasoning: closed ``<think>`` blocks, a leading block whose
    opening tag sat in the prompt (only ``</think>`` present), and an unclosed block."""
    text = _THINK_BLOCK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


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


def reply_summary(call: LLMCall) -> str:
    """The reply as a step records it: the text, then the tool calls."""
    if call.tool_calls:
        calls = "; ".join(
            f"{c['function']['name']}({c['function']['arguments']})" for c in call.tool_calls
        )
        return f"{call.response_text}\n[tool calls] {calls}".strip()
    return call.response_text


# --- one episode's state -------------------------------------------------------------------


@dataclass
class Episode:
    """The agent's side of one episode, whatever plays it and whatever steps the env.

    :meth:`messages` is the prompt of the current page; :meth:`action` reads the action of
    a reply (``None`` with the reason when it has none usable: an invalid step with no env
    call); :meth:`record` appends the step to the history the next prompts show. The
    worker plays it against the env server over HTTP, the trainer against an in-process
    :class:`app.webshop.env.WebShopEnv`; both call the same three methods.
    """

    instruction: str
    observation: str
    available_actions: dict[str, Any]
    history_steps: int = DEFAULT_PROTOCOL.history_steps
    mode: AgentMode = DEFAULT_PROTOCOL.mode
    history: list[HistoryStep] = field(default_factory=list)
    constrain_actions: bool = DEFAULT_PROTOCOL.constrain_actions
    """Ask the server to limit each reply to the page's valid actions (text mode only)."""
    result_refs: ResultRefs = DEFAULT_PROTOCOL.result_refs
    """How the prompt names a results page's products (:class:`ResultRefs`)."""
    _visit: int = field(default=0, init=False, repr=False)
    """Where the open product's visit begins in ``history``: the step after the click that
    opened it (by number, ``click[3]`` may also be an option value of the page it opens)."""

    def _numbers(self) -> dict[str, str]:
        if self.result_refs != ResultRefs.NUMBERS:
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
        """``action`` (as the env takes it) as the prompt names it on the current page."""
        for number, product in self._numbers().items():
            if action == f"click[{product}]":
                return f"click[{number}]"
        return action

    def structured_outputs(self) -> dict[str, str] | None:
        """The constraint of the next reply (see :func:`action_structured_outputs`)."""
        if not self.constrain_actions or self.mode != AgentMode.TEXT:
            return None
        visit = self.history[self._visit :]
        spent = spent_clicks(visit, self.observation, self.available_actions)
        return action_structured_outputs(self._shown_actions(), spent)

    @property
    def number(self) -> int:
        """The 1-based number of the next step."""
        return len(self.history) + 1

    def messages(self) -> list[dict[str, str]]:
        return build_messages(
            self.instruction,
            numbered_page(self.observation, self._numbers()),
            self._shown_actions(),
            self.history,
            history_steps=self.history_steps,
            mode=self.mode,
        )

    def action(self, reply: LLMCall | str) -> tuple[str | None, str | None]:
        """(action, None), or (None, why the reply is an invalid step)."""
        if isinstance(reply, str):
            action = parse_action(reply)
        else:
            action = action_from_call(reply, self.mode)
        if action is None:
            return None, INVALID_REPLY_OBSERVATION
        if len(action) > MAX_ACTION_CHARS:
            return None, TOO_LONG_ACTION
        numbers = self._numbers()
        clicked = _clicked(action)
        if numbers and clicked is not None:
            product = numbers.get(clicked)
            if product is not None:
                return f"click[{product}]", None
        return action, None

    def record(
        self,
        action: str | None,
        *,
        valid: bool,
        seen: str,
        observation: str | None = None,
        available_actions: dict[str, Any] | None = None,
    ) -> None:
        """Append a step: ``seen`` is what the history shows of it (the new page, or the
        error of an invalid step). The page after it becomes current, and so do its
        actions when the step was valid. The history names products as the prompts do."""
        shown = self.shown_action(action) if action else NO_ACTION
        clicked = _clicked(action) if valid and action else None
        if clicked is not None and clicked in result_numbers(self.available_actions).values():
            self._visit = len(self.history) + 1
        if observation is not None:
            self.observation = observation
        if valid and available_actions is not None:
            self.available_actions = available_actions
            if seen == observation:
                seen = numbered_page(seen, self._numbers())
        self.history.append(HistoryStep(self.number, shown, seen))


# --- the protocol a process plays -----------------------------------------------------------


def agent_protocol(
    settings: Any,
    source: str,
    expected: dict[str, Any] | None = None,
    *,
    defaults: dict[str, Any] | None = None,
) -> AgentProtocol:
    """The protocol to play (or publish): each field ``expected`` gives (not None) is
    taken from it, the others from ``defaults``, then from the settings.

    A setting the process set explicitly (its ``WSRL_`` variable, ``.env``) that
    contradicts ``expected`` raises :class:`AgentProtocolMismatch` naming each: someone
    asked for a protocol the policy (``source``: a published version, a trainer's config,
    a bootstrap) was not trained for, and playing either one silently would be wrong.
    Settings left at their defaults never conflict: they give way.
    """
    expected = {k: v for k, v in (expected or {}).items() if v is not None}
    unknown = set(expected) - set(PROTOCOL_SETTINGS)
    if unknown:
        raise ValueError(f"not fields of the agent protocol: {', '.join(sorted(unknown))}")
    values = {
        f: expected.get(f, (defaults or {}).get(f, getattr(settings, name)))
        for f, name in PROTOCOL_SETTINGS.items()
    }
    protocol = AgentProtocol(**values)
    explicit = settings.model_fields_set
    wrong = []
    for f, name in PROTOCOL_SETTINGS.items():
        if f not in expected or name not in explicit:
            continue
        mine = AgentProtocol(**{**values, f: getattr(settings, name)})
        if getattr(mine, f) != getattr(protocol, f):
            wrong.append(
                f"WSRL_{name.upper()}={getattr(settings, name)} is set here but {source} "
                f"expects {getattr(protocol, f)}"
            )
    if wrong:
        raise AgentProtocolMismatch(
            "agent protocol mismatch: "
            + "; ".join(wrong)
            + ". Unset these variables (the policy's protocol is then played) or set them "
            "to what it expects."
        )
    return protocol
