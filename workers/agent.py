"""The WebShop agent: one episode as a loop of LLM call -> action -> env step.

Each step is a fresh prompt (system + one user message) carrying the instruction, the
current page, its available actions and the last k steps, the layout verl-agent uses for
WebShop. :func:`build_messages` is pure so the trainer can build SFT demonstrations with
the very prompt the agent sees. The scripted LLM server (``app/scripted_llm``) reads this
layout back; ``tests/scripted_llm/test_prompt.py`` keeps the two in step.

Text mode parses ``search[...]`` / ``click[...]`` from the reply (the last one, after
removing ``<think>`` blocks); tool mode offers ``search``, ``click`` and ``buy`` tools.
A reply without a usable action is a step with ``valid=False`` and no env call; the
episode goes on. ``max_steps`` without buying ends it with reward 0.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from workers.env_client import EnvClient, EnvError
from workers.llm import LLMCall, LLMClient, Sampling

logger = logging.getLogger(__name__)

DEFAULT_HISTORY_STEPS = 4
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
    policy_version: int
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
        return self.reward == 1.0


class EpisodeRecorder(Protocol):
    """Where an episode's records go; the Celery task persists them as rows."""

    def on_step(self, step: StepRecord) -> None: ...

    def on_llm_call(self, call: LLMCall) -> None: ...

    def on_log(self, line: str) -> None: ...


# --- prompt ------------------------------------------------------------------------------


# Text-mode pages open with the instruction ("WebShop [SEP] Instruction: [SEP] ... [SEP]");
# the prompt already shows it once, so each page drops it: shorter prompts, and a history
# line that shows what the step changed instead of the instruction again.
_INSTRUCTION_ECHO = re.compile(r"^(?:WebShop \[SEP\] )?Instruction: \[SEP\] [^\n]*? \[SEP\] ")


def page_text(observation: str) -> str:
    """The observation without its leading instruction echo (other formats unchanged)."""
    return _INSTRUCTION_ECHO.sub("", observation, count=1)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def format_available_actions(available_actions: dict[str, Any]) -> list[str]:
    lines = ["search[<keywords>]"] if available_actions.get("has_search_bar") else []
    lines += [f"click[{c}]" for c in available_actions.get("clickables", []) if c != "search"]
    return lines


def build_messages(
    instruction: str,
    observation: str,
    available_actions: dict[str, Any],
    history: Sequence[HistoryStep],
    *,
    history_steps: int = DEFAULT_HISTORY_STEPS,
    mode: AgentMode | str = AgentMode.TEXT,
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
            seen = _one_line(page_text(step.observation), HISTORY_OBSERVATION_CHARS)
            past.append(f"Observation: {seen}")
    else:
        past = ["Previous steps: none, this is the first step."]
    actions = format_available_actions(available_actions) or ["none"]
    user = "\n".join(
        [
            f"Instruction: {_one_line(instruction, 2000)}",
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


def action_from_call(call: LLMCall, mode: AgentMode | str = AgentMode.TEXT) -> str | None:
    """The action of a reply: tool calls first in tool mode, else the text."""
    if AgentMode(mode) == AgentMode.TOOLS and call.tool_calls:
        action = parse_tool_calls(call.tool_calls)
        if action is not None:
            return action
    return parse_action(call.response_text)


def _reply_summary(call: LLMCall) -> str:
    if call.tool_calls:
        calls = "; ".join(
            f"{c['function']['name']}({c['function']['arguments']})" for c in call.tool_calls
        )
        return f"{call.response_text}\n[tool calls] {calls}".strip()
    return call.response_text


# --- the episode ---------------------------------------------------------------------------


def _emit(recorder: EpisodeRecorder, line: str) -> None:
    logger.info(line)
    recorder.on_log(line)


def run_episode(
    env: EnvClient,
    llm: LLMClient,
    goal_id: int,
    recorder: EpisodeRecorder,
    *,
    max_steps: int = 15,
    mode: AgentMode | str = AgentMode.TEXT,
    sampling: Sampling | None = None,
    history_steps: int = DEFAULT_HISTORY_STEPS,
    worker: str = "-",
    rollout: str = "-",
) -> EpisodeResult:
    """Play one episode on ``goal_id`` and report every step and LLM call as it happens.

    LLM and env failures (:class:`workers.llm.LLMError`, :class:`EnvError`) propagate:
    the caller fails the attempt with their reason. The env session is closed either way.
    """
    mode = AgentMode(mode)
    started = time.monotonic()
    session = env.create_session(goal_id)
    instruction = session.instruction
    _emit(recorder, f"[TASK] {worker} {rollout} {instruction}")
    observation, available = session.observation, session.available_actions
    history: list[HistoryStep] = []
    steps: list[StepRecord] = []
    versions: list[int] = []
    trainable = 0
    last: StepRecord | None = None
    try:
        for index in range(max_steps):
            messages = build_messages(
                instruction, observation, available, history, history_steps=history_steps, mode=mode
            )
            call = llm.chat(
                messages, tools=TOOLS if mode == AgentMode.TOOLS else None, sampling=sampling
            )
            recorder.on_llm_call(call)
            versions.append(call.policy_version)
            trainable += call.trainable
            last = _take_step(env, session.session_id, index, call, mode, observation)
            observation = last.observation
            if last.valid and not last.done:
                available = (
                    last.available_actions
                    or last.info.get("available_actions")
                    or env.available_actions(session.session_id)
                )
            steps.append(last)
            recorder.on_step(last)
            shown = last.action if last.action is not None else NO_ACTION
            seen = last.observation if last.valid else (last.error or "")
            verdict = "valid" if last.valid else "invalid"
            _emit(
                recorder,
                f"[STEP] {index + 1}. {shown} -> {verdict}, "
                f"{_one_line(seen, LOG_OBSERVATION_CHARS)}",
            )
            history.append(HistoryStep(number=index + 1, action=shown, observation=seen))
            if last.done:
                break
    finally:
        try:
            env.close_session(session.session_id)
        except EnvError as exc:
            logger.warning("could not close env session %s: %s", session.session_id, exc)
    done = last is not None and last.done
    reward = last.reward if done and last is not None else 0.0
    _emit(recorder, f"[DONE] {reward:.4g} {len(steps)} {'SUCCESS' if reward == 1.0 else 'FAIL'}")
    return EpisodeResult(
        goal_id=goal_id,
        session_id=session.session_id,
        instruction=instruction,
        reward=reward,
        done=done,
        end_reason="bought" if done else "max_steps",
        num_steps=len(steps),
        num_invalid=sum(not s.valid for s in steps),
        num_llm_calls=len(versions),
        num_trainable_calls=trainable,
        policy_versions=(min(versions), max(versions)) if versions else None,
        reward_parts=last.info.get("reward_parts") if done and last is not None else None,
        duration_s=time.monotonic() - started,
        steps=steps,
    )


def _take_step(
    env: EnvClient,
    session_id: str,
    index: int,
    call: LLMCall,
    mode: AgentMode,
    observation: str,
) -> StepRecord:
    """Turn one reply into a step: no env call when the reply holds no action."""
    action = action_from_call(call, mode)
    reply = _reply_summary(call)
    if action is None or len(action) > MAX_ACTION_CHARS:
        reason = INVALID_REPLY_OBSERVATION if action is None else TOO_LONG_ACTION
        return StepRecord(
            index=index,
            action=None,
            reply=reply,
            observation=observation,
            reward=0.0,
            done=False,
            valid=False,
            info={"valid": False, "error": reason},
            error=reason,
            llm_latency_ms=call.latency_ms,
            env_latency_ms=0.0,
            policy_version=call.policy_version,
        )
    env_started = time.monotonic()
    result = env.step(session_id, action)
    env_ms = (time.monotonic() - env_started) * 1000
    error = None if result.valid else str(result.info.get("error") or "invalid action")
    return StepRecord(
        index=index,
        action=action,
        reply=reply,
        observation=result.observation,
        reward=result.reward,
        done=result.done,
        valid=result.valid,
        info=result.info,
        error=error,
        llm_latency_ms=call.latency_ms,
        env_latency_ms=env_ms,
        policy_version=call.policy_version,
        available_actions=result.available_actions,
    )
