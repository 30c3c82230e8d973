"""GRPO groups of finished rollouts whose best and worst episodes part at a known turn,
for the preference-pair export (committed rows, on the goals of :mod:`trajectory_data`).

Each group is a list of episodes ``(reward, replies)``; every episode gets the same
prompt at a turn as long as its earlier replies equal the other episodes' (as a
deterministic environment would show them), and a different one after.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Engine

from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, LlmCall, Rollout, Step
from app.db.session import session_scope
from app.webshop.success import is_success

# name: (goal, policy version, episodes as (reward, replies)); None: a failed rollout.
GROUPS: dict[str, tuple[str, int, list[tuple[float, list[str]] | None]]] = {
    # best: sample 0 (1.0, the lower index of the tie); worst: sample 3 (0.0, the higher)
    "parts_first": (
        "train_a",
        7,
        [
            (1.0, ["search[blue item]", "click[item 1]"]),
            (0.0, ["search[anything]"]),
            (1.0, ["search[blue thing]", "click[item 2]"]),
            (0.0, ["search[red]"]),
            None,
        ],
    ),
    # the two agree on their first reply and part on the second
    "parts_later": (
        "test_a",
        9,
        [(0.25, ["search[red small]", "click[item 4]"]), (1.0, ["search[red small]", "click[1]"])],
    ),
    "tied": ("train_b", 7, [(0.5, ["search[a]"]), (0.5, ["search[b]"]), (0.5, ["search[c]"])]),
    # same replies, different rewards: nothing to prefer between two equal replies
    "never_part": ("train_c", 8, [(1.0, ["search[x]"]), (0.0, ["search[x]"])]),
}


def prompt(goal: str, replies: list[str]) -> list[dict[str, str]]:
    """The messages an episode of ``goal`` gets after ``replies``."""
    done = " then ".join(replies) or "nothing yet"
    return [
        {"role": "system", "content": "You are a shopping agent."},
        {"role": "user", "content": f"Instruction: the {goal} item. Done: {done}"},
    ]


def insert_groups(engine: Engine, goals: dict[str, int]) -> dict[str, list[uuid.UUID]]:
    """The groups of :data:`GROUPS`; returns each group's rollout ids by sample index."""
    ids: dict[str, list[uuid.UUID]] = {}
    with session_scope(engine) as session:
        for name, (goal, version, episodes) in GROUPS.items():
            group_id = uuid.uuid4()
            ids[name] = []
            for sample, episode in enumerate(episodes):
                reward, replies = episode if episode else (None, ["search[lost]"])
                rollout = Rollout(
                    id=uuid.uuid4(),
                    goal_id=goals[goal],
                    group_id=group_id,
                    sample_index=sample,
                    mode=RolloutMode.TRAIN,
                    status=RolloutStatus.FAILED if episode is None else RolloutStatus.SUCCEEDED,
                    attempts=1,
                    reward=reward,
                    success=None if reward is None else is_success(reward),
                    num_steps=len(replies),
                    policy_version_min=version,
                    policy_version_max=version,
                )
                session.add(rollout)
                session.flush()
                ids[name].append(rollout.id)
                attempt = Attempt(
                    rollout_id=rollout.id,
                    number=1,
                    status=AttemptStatus.FAILED if episode is None else AttemptStatus.SUCCEEDED,
                    reward=reward,
                )
                session.add(attempt)
                session.flush()
                for index, reply in enumerate(replies):
                    session.add(
                        Step(attempt_id=attempt.id, index=index, action=reply, observation="page")
                    )
                    session.add(
                        LlmCall(
                            attempt_id=attempt.id,
                            index=index,
                            policy_version=version,
                            model="policy",
                            request_messages=prompt(goal, replies[:index]),
                            response_text=reply,
                            finish_reason="stop",
                        )
                    )
    return ids
