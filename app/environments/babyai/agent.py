"""The agent's side of BabyAI, as our BabyAI server (``app/babyai``) shows it over
AgentGym's protocol (:mod:`app.environments.agentgym.client`).

Each observation opens with ``Your goal: <mission>`` (at reset) and ends with ``Available
actions: [...]``; the prompt shows the mission as its instruction and the actions as its
list, so a page drops both lines. A reply is free text ending with one action (``go to red
ball 1``), read as any AgentGym server's (:class:`AgentGymEpisode`). BabyAI pays only on
success, so any reward is one. There are no tools: tools mode reads the text as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.environments.agentgym.agent import AgentGymEpisode
from app.environments.agentgym.client import ACTIONS_LINE

CHECK_ACTIONS = "check available actions"
GOAL_LINE = "Your goal: "

SYSTEM_PROMPT = """\
You are an agent in a grid world of rooms, doors and objects (balls, boxes, keys). Reach \
the goal the instruction gives you.
Each turn shows the goal, your previous steps, what you currently see and the actions \
available now. Reply with exactly one available action, written exactly as listed, for \
example: go to red ball 1
You may think first, but end your reply with the action."""


def page_text(observation: str) -> str:
    """The observation without its goal line and its actions line."""
    lines = observation.split("\n")
    kept = [ln for ln in lines if not ln.startswith((GOAL_LINE, ACTIONS_LINE.rstrip()))]
    return "\n".join(kept).strip()


@dataclass
class BabyAIEpisode(AgentGymEpisode):
    """One BabyAI episode: a mission, what the agent sees and the actions it may take."""

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def listed_actions(self) -> list[str]:
        """The server's actions but ``check available actions``: the prompt always lists
        them."""
        return [a for a in self.available_actions.get("actions", []) if a != CHECK_ACTIONS]

    def page(self, observation: str) -> str:
        return page_text(observation)

    def success(self, reward: float) -> bool:
        return reward > 0
