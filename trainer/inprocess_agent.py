"""One agent step played in this process: the prompt the policy sees, and its reply applied.

Shared by the in-process evaluation and the in-process GRPO loop, so both play exactly as
the Celery agent does (:func:`workers.agent.build_messages`, :func:`workers.agent.parse_action`):
a reply without an action is an invalid step with no env call.
"""

from __future__ import annotations

from typing import Any

from workers.agent import (
    INVALID_REPLY_OBSERVATION,
    NO_ACTION,
    HistoryStep,
    build_messages,
    parse_action,
)


def prompt_ids(
    session: Any, history: list[HistoryStep], tokenizer: Any, history_steps: int
) -> list[int]:
    """The chat-templated prompt of the session's current page, assistant turn opened."""
    messages = build_messages(
        session.instruction_text,
        session.observation(),
        session.available_actions(),
        history,
        history_steps=history_steps,
    )
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return list(encoded["input_ids"])


def apply_reply(
    session: Any, history: list[HistoryStep], reply: str, number: int
) -> tuple[bool, bool, float]:
    """Steps ``session`` with the reply's action and records it in ``history``; returns
    (valid, done, reward)."""
    action = parse_action(reply)
    if action is None:
        history.append(HistoryStep(number, NO_ACTION, INVALID_REPLY_OBSERVATION))
        return False, False, 0.0
    result = session.step(action)
    valid = result.info.get("valid", True)
    seen = result.observation if valid else (result.info.get("error") or "")
    history.append(HistoryStep(number, action, seen))
    return valid, result.done, result.reward if result.done else 0.0
