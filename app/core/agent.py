"""The agent protocol: how any environment's episode is played, step by step.

Each step is a fresh prompt (system + one user message) carrying the instruction, the
current observation, its available actions and the last k steps, the layout verl-agent
uses. Every player builds it here: the Celery worker (:mod:`workers.player`), the
in-process evaluation and the demonstrations of the bootstrap (:mod:`trainer`), through
an :class:`Episode`, so all of them play exactly the same game.

An environment (``app/environments``) says what is particular to it by subclassing
:class:`Episode`: its system prompt and tools, how an observation and its actions are
shown, the grammar of a reply, the constraint of the next reply and what a success is.
This module knows no environment. A reply without a usable action is a step with
``valid=False`` and no env call; the episode goes on. ``max_steps`` without an end ends
it with reward 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.config import Settings
from app.core.llm import LLMCall

HISTORY_OBSERVATION_CHARS = 200
LOG_OBSERVATION_CHARS = 80
NO_ACTION = "(no action)"
# Env servers refuse longer actions (ours with a 422); the agent makes them invalid
# steps instead, so a runaway reply costs a step, not the attempt.
MAX_ACTION_CHARS = 2_000
TOO_LONG_ACTION = f"Invalid reply: the action is longer than {MAX_ACTION_CHARS} characters."
# Marks the ``info`` (steps rows) of an opening's scripted step, so it is never mistaken
# for policy output.
OPENING_INFO = {"opening": True}


class AgentMode(StrEnum):
    TEXT = "text"
    TOOLS = "tools"


class ResultRefs(StrEnum):
    """How the agent's prompt names the items a page lists to choose from."""

    IDS = "ids"
    """The env's own ids, as its pages list them."""
    NUMBERS = "numbers"
    """Their places on the page (the first listed is 1), mapped back to the ids on the
    agent's side; the env sees the same actions either way."""


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
    success: bool
    """As the environment judges ``reward`` (:meth:`Episode.success`)."""
    steps: list[StepRecord] = field(default_factory=list, repr=False)


# --- prompt and reply ----------------------------------------------------------------------


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def prompt_messages(
    system: str,
    instruction: str,
    page: str,
    actions: Sequence[str],
    history: Sequence[HistoryStep],
    history_steps: int,
    shown: Any = None,
) -> list[dict[str, str]]:
    """The chat messages of one step: ``system`` + the user message (task and state).

    ``history`` is the whole episode so far; only its last ``history_steps`` entries are
    shown, each observation cut to one short line after ``shown`` (how the environment
    shows a page; unchanged when None).
    """
    last = list(history)[-history_steps:] if history_steps > 0 else []
    if last:
        past = [f"Previous steps (the last {len(last)} of {len(history)}):"]
        for step in last:
            past.append(f"Step {step.number}: {step.action}")
            seen = step.observation if shown is None else shown(step.observation)
            past.append(f"Observation: {one_line(seen, HISTORY_OBSERVATION_CHARS)}")
    else:
        past = ["Previous steps: none, this is the first step."]
    user = "\n".join(
        [
            f"Instruction: {one_line(instruction, 2000)}",
            "",
            *past,
            "",
            "Current observation:",
            page,
            "",
            "Available actions:",
            *(actions or ["none"]),
        ]
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)


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

    :meth:`messages` is the prompt of the current observation; :meth:`action` reads the
    action of a reply (``None`` with the reason when it has none usable: an invalid step
    with no env call); :meth:`record` appends the step to the history the next prompts
    show. The worker plays it against an env server over HTTP, the trainer in process;
    both call the same methods. An environment subclasses it (``app/environments``):
    the methods marked below are its part, the rest is every environment's.
    """

    instruction: str
    observation: str
    available_actions: dict[str, Any]
    protocol: AgentProtocol = DEFAULT_PROTOCOL
    """How it is played: the one object every player is handed whole (the worker's, the
    in-process one's, the demonstrator's), so a protocol field is read here and nowhere
    else is it unpacked."""
    history: list[HistoryStep] = field(default_factory=list)

    # --- the environment's part

    def system_prompt(self) -> str:
        """The rules of the game, in the protocol's mode."""
        raise NotImplementedError

    def listed_actions(self) -> list[str]:
        """The current observation's actions as the prompt lists them."""
        raise NotImplementedError

    def parse(self, reply: LLMCall | str) -> str | None:
        """The action a reply names (as the prompt names it), else None."""
        raise NotImplementedError

    def invalid_reply(self) -> str:
        """What the history shows of a reply that names no action."""
        raise NotImplementedError

    def success(self, reward: float) -> bool:
        """Whether an episode that ended with ``reward`` succeeded."""
        raise NotImplementedError

    def page(self, observation: str) -> str:
        """An observation as the prompt shows it (the current one and the history's)."""
        return observation

    def tools(self) -> list[dict[str, Any]] | None:
        """The tools a request offers (none unless the environment has tools)."""
        return None

    def structured_outputs(self) -> dict[str, str] | None:
        """vLLM's ``structured_outputs`` that constrain the next reply, or None."""
        return None

    def shown_action(self, action: str) -> str:
        """``action`` (as the env takes it) as the prompt names it."""
        return action

    def taken_action(self, action: str) -> str:
        """``action`` (as the prompt names it) as the env takes it."""
        return action

    def shown_observation(self, observation: str) -> str:
        """A new observation as the history records it."""
        return observation

    def stepping(self, action: str | None, valid: bool) -> None:
        """Called by :meth:`record` before the step changes the current observation."""

    # --- every environment's

    @property
    def number(self) -> int:
        """The 1-based number of the next step."""
        return len(self.history) + 1

    def messages(self) -> list[dict[str, str]]:
        return prompt_messages(
            self.system_prompt(),
            self.instruction,
            self.page(self.shown_observation(self.observation)),
            self.listed_actions(),
            self.history,
            self.protocol.history_steps,
            shown=self.page,
        )

    def action(self, reply: LLMCall | str) -> tuple[str | None, str | None]:
        """(action, None), or (None, why the reply is an invalid step)."""
        action = self.parse(reply)
        if action is None:
            return None, self.invalid_reply()
        if len(action) > MAX_ACTION_CHARS:
            return None, TOO_LONG_ACTION
        return self.taken_action(action), None

    def record(
        self,
        action: str | None,
        *,
        valid: bool,
        seen: str,
        observation: str | None = None,
        available_actions: dict[str, Any] | None = None,
    ) -> None:
        """Append a step: ``seen`` is what the history shows of it (the new observation,
        or the error of an invalid step). The observation after it becomes current, and so
        do its actions when the step was valid."""
        shown = self.shown_action(action) if action else NO_ACTION
        self.stepping(action, valid)
        if observation is not None:
            self.observation = observation
        if valid and available_actions is not None:
            self.available_actions = available_actions
            if seen == observation:
                seen = self.shown_observation(seen)
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
