"""Oracle demonstrations rendered exactly as the agent's prompts, for supervised warm starts.

Each step of an oracle episode becomes the messages :func:`workers.agent.build_messages`
builds for it and the oracle's action as the assistant reply, so the warm-started policy
is trained on the very prompt layout it will see in rollouts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.webshop.agents import oracle_action
from app.webshop.env import WebShopEnv
from trainer.samples import Sample
from workers.agent import HistoryStep, build_messages


@dataclass(frozen=True)
class Demonstration:
    """One oracle step: what the agent would see, and what the oracle did."""

    goal_id: int
    messages: list[dict[str, str]]
    action: str


def oracle_episode(env: WebShopEnv, goal_id: int, max_steps: int) -> list[Demonstration]:
    """The oracle's steps on goal ``goal_id``, each rendered as the agent's prompt."""
    session = env.new_session(goal_id)
    history: list[HistoryStep] = []
    actions: list[str] = []
    demos: list[Demonstration] = []
    observation, available = session.observation(), session.available_actions()
    for number in range(1, max_steps + 1):
        action = oracle_action(session.goal, observation, available, actions)
        messages = build_messages(session.instruction_text, observation, available, history)
        demos.append(Demonstration(goal_id, messages, action))
        result = session.step(action)
        seen = result.observation if result.info.get("valid", True) else result.info["error"]
        history.append(HistoryStep(number, action, seen or ""))
        actions.append(action)
        if result.done:
            break
        observation, available = session.observation(), session.available_actions()
    return demos


def collect(env: WebShopEnv, goal_ids: Iterable[int], max_steps: int) -> list[Demonstration]:
    """Oracle demonstrations of every goal in ``goal_ids``."""
    return [d for goal_id in goal_ids for d in oracle_episode(env, goal_id, max_steps)]


def to_sample(demo: Demonstration, tokenizer: Any) -> Sample:
    """Prompt (chat template, assistant turn opened) + action + end-of-turn; loss on the
    action tokens and the end-of-turn token only."""
    prompt = list(
        tokenizer.apply_chat_template(demo.messages, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]
    )
    response = [*tokenizer.encode(demo.action, add_special_tokens=False), tokenizer.eos_token_id]
    n = len(prompt) + len(response)
    return Sample(
        rollout_id=f"demo-{demo.goal_id}",
        group_id=str(demo.goal_id),
        input_ids=prompt + response,
        loss_mask=[0] * len(prompt) + [1] * len(response),
        rollout_logprobs=[0.0] * n,
        advantage=1.0,
        policy_version_min=0,
    )
