"""The agent's side of an episode on any env server of AgentGym's protocol, knowing nothing
of its game: what a server named in ``WSRL_AGENTGYM`` is played with
(:func:`app.environments.get_environment`), and what BabyAI's episode refines.

The task is what the goal row says, or, where it says nothing (a server known by URL
alone), the server's first observation. The prompt lists the actions the server gives
(``/available_actions``, or its observation's ``Available actions: [...]`` line, which a
page drops). A reply is free text ending with one action; :meth:`AgentGymEpisode.parse`
reads it leniently, and a line that names no listed action still goes to the server, which
answers an unknown action itself. An episode succeeds when it ends with at least
:attr:`AgentGymEpisode.success_reward` (AgentGym's servers pay 1 for a solved task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from app.core.agent import Episode, strip_think
from app.core.llm import LLMCall
from app.environments.agentgym.client import ACTIONS_LINE

INVALID_REPLY_OBSERVATION = "Invalid reply: it named no action."

SYSTEM_PROMPT = """\
You are an agent in a text environment. Complete the task the instruction gives you.
Each turn shows the task, your previous steps, the current observation and, where the \
environment lists them, the actions available now. Reply with exactly one action, \
written exactly as listed.
You may think first, but end your reply with the action."""

_ACTION_LABEL = re.compile(r"action:", re.IGNORECASE)


def reply_line(text: str) -> str:
    """The line a reply ends with, after its last ``Action:`` if any: stripped, lowercased,
    without a final period or surrounding quotes or backticks."""
    text = strip_think(text)
    labels = list(_ACTION_LABEL.finditer(text))
    if labels:
        text = text[labels[-1].end() :]
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return ""
    return lines[-1].strip().lower().lstrip("\"'` ").rstrip(".\"'` ")


def match_action(line: str, actions: list[str]) -> str | None:
    """The listed action ``line`` is, starts with or ends with (the longest), else the one
    written last in it, else None. Actions match whole words only (``turn left`` is not in
    ``turn leftwards``), case aside."""
    by_lower = {a.lower(): a for a in actions}
    lowered = list(by_lower)
    if line in by_lower:
        return by_lower[line]
    edge = [a for a in lowered if line.startswith(a + " ") or line.endswith(" " + a)]
    if edge:
        return by_lower[max(edge, key=len)]
    found = [
        (match.start(), len(action), action)
        for action in lowered
        for match in re.finditer(rf"(?<!\w){re.escape(action)}(?!\w)", line)
    ]
    return by_lower[max(found)[2]] if found else None


@dataclass
class AgentGymEpisode(Episode):
    """One episode on an AgentGym server: the task, the observation and the actions it
    lists."""

    success_reward: ClassVar[float] = 1.0

    def __post_init__(self) -> None:
        if not self.instruction.strip():
            self.instruction = self.page(self.observation)

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def listed_actions(self) -> list[str]:
        return list(self.available_actions.get("actions", []))

    def page(self, observation: str) -> str:
        """The observation without its actions line (the prompt lists them)."""
        kept = [ln for ln in observation.split("\n") if not ln.startswith(ACTIONS_LINE.rstrip())]
        return "\n".join(kept).strip()

    def parse(self, reply: LLMCall | str) -> str | None:
        """The listed action the reply's last line names (:func:`match_action`), else that
        line as written; None when the reply is empty."""
        line = reply_line(reply if isinstance(reply, str) else reply.response_text)
        return match_action(line, self.listed_actions()) or line or None

    def invalid_reply(self) -> str:
        return INVALID_REPLY_OBSERVATION

    def success(self, reward: float) -> bool:
        return reward >= self.success_reward

    def structured_outputs(self) -> dict[str, str] | None:
        """One listed action, after an optional space (the habit of small policies), when
        the protocol constrains replies and any are listed."""
        actions = self.listed_actions()
        if not self.protocol.constrain_actions or not actions:
            return None
        return {"regex": " ?(?:" + "|".join(re.escape(a) for a in actions) + ")"}
