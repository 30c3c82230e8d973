"""A small, known set of finished rollouts for export and SQL tests (committed rows).

Five goals (three ``train``, two ``test``, one of them a human goal with list options) and
rollouts in every state that matters to readers of trajectories: a rollout whose first
attempt failed and second succeeded, plain successes with different rewards and policy
versions, a failed rollout and a running one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sqlalchemy import Engine

from app.db.lifecycle import AttemptStatus, RolloutMode, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step
from app.db.session import session_scope
from app.webshop.success import is_success


@dataclass
class Dataset:
    """Ids of what was inserted, by name (``retried``, ``half``, ``quarter``, ...)."""

    goals: dict[str, int] = field(default_factory=dict)
    rollouts: dict[str, uuid.UUID] = field(default_factory=dict)


def _calls(attempt_id: int, versions: list[int], seed: int) -> list[LlmCall]:
    return [
        LlmCall(
            attempt_id=attempt_id,
            index=i,
            policy_version=version,
            model="policy",
            request_messages=[
                {"role": "system", "content": "You are a shopping agent."},
                {"role": "user", "content": f"Instruction: turn {i} of {seed}"},
            ],
            response_text=f"search[item {seed} {i}]",
            prompt_token_ids=[seed, i, 7, 8],
            response_token_ids=[100 + i, 101 + i],
            response_logprobs=[-0.5, -0.25],
            finish_reason="stop",
            latency_ms=12.5,
        )
        for i, version in enumerate(versions)
    ]


def _steps(attempt_id: int, actions: list[str], final_reward: float) -> list[Step]:
    last = len(actions) - 1
    return [
        Step(
            attempt_id=attempt_id,
            index=i,
            action=action,
            observation=f"page after {action}",
            reward=final_reward if i == last else 0.0,
            done=i == last,
            valid=action != "(no action)",
            latency_ms=20.0,
        )
        for i, action in enumerate(actions)
    ]


def insert_dataset(engine: Engine, base_goal_id: int = 900_000) -> Dataset:
    data = Dataset()
    goal_specs = {
        "train_a": ("train", {"color": "blue"}),
        "train_b": ("train", {"size": "large"}),
        "train_c": ("train", {}),
        "test_a": ("test", ["red", "small"]),
        "test_b": ("test", {"flavor": "mint"}),
    }
    with session_scope(engine) as session:
        for offset, (name, (split, options)) in enumerate(goal_specs.items()):
            goal_id = base_goal_id + offset
            session.add(
                Goal(
                    id=goal_id,
                    split=split,
                    instruction=f"i need the {name} item, price lower than 40.00 dollars",
                    category="fashion" if split == "train" else "grocery",
                    spec={
                        "asin": f"B{goal_id:09d}",
                        "attributes": ["soft", name],
                        "goal_options": options,
                        "price_upper": 40.0,
                    },
                )
            )
            data.goals[name] = goal_id
        session.flush()
        specs = [
            # name, goal, status, reward, versions, attempts: [(status, actions, versions)]
            ("retried", "train_a", RolloutStatus.SUCCEEDED, 1.0, (1, 2),
             [(AttemptStatus.FAILED, ["search[a]"], [0]),
              (AttemptStatus.SUCCEEDED, ["search[a]", "click[b1]", "click[buy now]"], [1, 2, 2])]),
            ("half", "train_b", RolloutStatus.SUCCEEDED, 0.5, (3, 3),
             [(AttemptStatus.SUCCEEDED, ["search[b]", "(no action)", "click[buy now]"],
               [3, 3, 3])]),
            ("quarter", "test_a", RolloutStatus.SUCCEEDED, 0.25, (2, 2),
             [(AttemptStatus.SUCCEEDED, ["search[c]", "click[buy now]"], [2, 2])]),
            ("failed", "test_b", RolloutStatus.FAILED, None, None,
             [(AttemptStatus.FAILED, ["search[d]"], [2])]),
            ("running", "train_c", RolloutStatus.RUNNING, None, None,
             [(AttemptStatus.RUNNING, ["search[e]"], [3])]),
        ]  # fmt: skip
        for seed, (name, goal, status, reward, versions, attempts) in enumerate(specs):
            rollout = Rollout(
                id=uuid.uuid4(),
                goal_id=data.goals[goal],
                group_id=uuid.uuid4(),
                mode=RolloutMode.TRAIN,
                status=status,
                attempts=len(attempts),
                reward=reward,
                success=None if reward is None else is_success(reward),
                num_steps=len(attempts[-1][1]) if reward is not None else None,
                reward_parts=None if reward is None else {"r_type": reward, "w_att": 0.5},
                policy_version_min=versions[0] if versions else None,
                policy_version_max=versions[1] if versions else None,
                last_error="failed after 1 attempts: env error" if name == "failed" else None,
            )
            session.add(rollout)
            session.flush()
            data.rollouts[name] = rollout.id
            for number, (attempt_status, actions, call_versions) in enumerate(attempts, 1):
                attempt = Attempt(
                    rollout_id=rollout.id,
                    number=number,
                    status=attempt_status,
                    reward=reward if attempt_status == AttemptStatus.SUCCEEDED else None,
                    error="env error: boom" if attempt_status == AttemptStatus.FAILED else None,
                )
                session.add(attempt)
                session.flush()
                session.add_all(_steps(attempt.id, actions, reward or 0.0))
                session.add_all(_calls(attempt.id, call_versions, seed * 10 + number))
    return data
