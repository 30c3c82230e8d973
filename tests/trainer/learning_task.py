"""The learning test's task: the last decision of a WebShop episode, on real item pages.

Each episode starts where the oracle would click ``buy now`` (search, item and options
already chosen by replaying the oracle), so the policy makes one decision scored by the
real WebShop reward. The warm start imitates ``click[buy now]`` once and ``click[< prev]``
twice per state, so the policy starts at about one success in three and must learn from
reward alone which of its own actions pays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.webshop.agents import oracle_action
from app.webshop.env import WebShopEnv
from trainer.demonstrations import Demonstration
from workers.agent import HistoryStep, build_messages

BUY = "click[buy now]"
DISTRACTOR = "click[< prev]"


def replay_to_buy(session: Any) -> list[HistoryStep]:
    """Replays the oracle on ``session`` until its next action is ``click[buy now]``."""
    history: list[HistoryStep] = []
    actions: list[str] = []
    observation, available = session.observation(), session.available_actions()
    for number in range(1, 16):
        action = oracle_action(session.goal, observation, available, actions)
        if action == BUY:
            return history
        result = session.step(action)
        seen = result.observation if result.info.get("valid", True) else result.info["error"]
        history.append(HistoryStep(number, action, seen or ""))
        actions.append(action)
        observation, available = session.observation(), session.available_actions()
    raise ValueError(f"the oracle did not reach {BUY} within 15 steps")


@dataclass(frozen=True)
class BuyState:
    goal_id: int
    messages: list[dict[str, str]]


def buy_states(env: WebShopEnv, split: str, count: int) -> list[BuyState]:
    """The first ``count`` goals of ``split`` where buying at the oracle's state earns 1.0."""
    states = []
    for goal_id in env.goal_ids(split):
        session = env.new_session(goal_id)
        try:
            history = replay_to_buy(session)
        except ValueError:
            continue
        messages = build_messages(
            session.instruction_text, session.observation(), session.available_actions(), history
        )
        if session.step(BUY).reward == 1.0:
            states.append(BuyState(goal_id, messages))
        if len(states) == count:
            break
    return states


def warm_start_demos(states: list[BuyState]) -> list[Demonstration]:
    return [
        Demonstration(s.goal_id, s.messages, action)
        for s in states
        for action in (BUY, DISTRACTOR, DISTRACTOR)
    ]
