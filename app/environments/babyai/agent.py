"""The agent's side of BabyAI, as our BabyAI server (``app/babyai``) shows it over
AgentGym's protocol (:mod:`app.environments.agentgym`).

Each observation opens with ``Your goal: <mission>`` (at reset) and ends with ``Available
actions: [...]``; the prompt shows the mission as its instruction and the actions as its
list, so a page drops both lines. A reply is free text ending with one action (``go to red
ball 1``); :meth:`BabyAIEpisode.parse` reads it leniently, and a line that names no listed
action still goes to the env, which answers an unavailable action itself. BabyAI pays only
on success, so any reward is one. There are no tools: tools mode reads the text as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.agent import Episode, strip_think
from app.core.llm import LLMCall
from app.environments.agentgym import ACTIONS_LINE

CHECK_ACTIONS = "check available actions"
GOAL_LINE = "Your goal: "
INVALID_REPLY_OBSERVATION = "Invalid reply: it named no action."

SYSTEM_PROMPT = """\
You are an agent in a grid world of rooms, doors and objects (balls, boxes, keys). Reach \
the goal the instruction gives you.
Each turn shows the goal, your previous steps, what you currently see and the actions \
available now. Reply with exactly one available action, written exactly as listed, for \
example: go to red ball 1
You may think first, but end your reply with the action."""

_ACTION_LABEL = re.compile(r"action:", re.IGNORECASE)


def page_text(observation: str) -> str:
    """The observation without its goal line and its actions line."""
    lines = observation.split("\n")
    kept = [ln for ln in lines if not ln.startswith((GOAL_LINE, ACTIONS_LINE.rstrip()))]
    return "\n".join(kept).strip()


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
    ``turn leftwards``)."""
    if line in actions:
        return line
    edge = [a for a in actions if line.startswith(a + " ") or line.endswith(" " + a)]
    if edge:
        return max(edge, key=len)
    found = [
        (match.start(), len(action), action)
        for action in actions
        for match in re.finditer(rf"(?<!\w){re.escape(action)}(?!\w)", line)
    ]
    return max(found)[2] if found else None


@dataclass
class BabyAIEpisode(Episode):
    """One BabyAI episode: a mission, what the agent sees and the actions it may take."""

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def listed_actions(self) -> list[str]:
        """The server's actions but ``check available actions``: the prompt always lists
        them."""
        return [a for a in self.available_actions.get("actions", []) if a != CHECK_ACTIONS]

    def page(self, observation: str) -> str:
        return page_text(observation)

    def parse(self, reply: LLMCall | str) -> str | None:
        """The listed action the reply's last line names (:func:`match_action`), else that
        line as written; None when the reply is empty."""
        line = reply_line(reply if isinstance(reply, str) else reply.response_text)
        return match_action(line, self.listed_actions()) or line or None

    def invalid_reply(self) -> str:
        return INVALID_REPLY_OBSERVATION

    def success(self, reward: float) -> bool:
        return reward > 0

    def structured_outputs(self) -> dict[str, str] | None:
        """One listed action, after an optional space (the habit of small policies, as in
        WebShop's constraint), when the protocol constrains replies and any are listed."""
        actions = self.listed_actions()
        if not self.protocol.constrain_actions or not actions:
            return None
        return {"regex": " ?(?:" + "|".join(re.escape(a) for a in actions) + ")"}
