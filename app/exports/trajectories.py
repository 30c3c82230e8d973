"""Trajectories as records: one per succeeded rollout, from its succeeded attempt only.

Failed, lost and superseded attempts never appear (their rows are not training data).
Each record carries the rollout's outcome (reward, reward parts, success, steps, policy
versions), its ``start`` (the actions of an opening,
:mod:`app.environments.webshop.opening`, come first and have no turn), the env actions in
order, and ``turns``: every LLM call of the attempt as the messages sent plus the response
received (and, with ``tokens``, the server's token ids and logprobs). Message contents that
are not text (tool-call lists) are JSON text.

Streaming: attempts come from a server-side cursor ``batch_size`` at a time; for each
batch the steps and calls are read with one query each on a second connection, turned
into records and handed on, so memory holds one batch whatever the total.

These records are the ``trajectories`` form of ``wsrl export trajectories`` and the source
of its ``messages`` form (:mod:`app.exports.chat`, :mod:`app.exports.forms`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Select, select

from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step

if TYPE_CHECKING:
    import pyarrow as pa

JSON_COLUMNS = ("reward_parts",)
TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "response_logprobs")
TRAJECTORY_FIELDS = {
    "rollout_id": "the rollout (episode)",
    "attempt": "the number of its succeeded attempt (earlier ones failed and are left out)",
    "goal_id": "the WebShop goal",
    "split": "the goal's split",
    "instruction": "the goal's instruction",
    "mode": "train or eval",
    "start": "where the episode began (search page, or an item page after a scripted opening)",
    "group_id": "its GRPO group: the rollouts of one goal played together",
    "sample_index": "its position in the group",
    "reward": "the final reward (0-1)",
    "reward_parts": "the reward's parts (JSON text)",
    "success": "whether it bought the goal's item (reward 1)",
    "num_steps": "env steps taken",
    "policy_version_min": "the lowest policy version that served one of its calls",
    "policy_version_max": "the highest policy version that served one of its calls",
    "agent_url": "the external agent that played it (null: the built-in agent)",
    "actions": "the env actions in order (an opening's first, without a turn)",
    "turns": "every LLM call: index, policy version, messages sent, response, finish "
    "reason, trainable (with --tokens also the token ids and logprobs)",
}


@dataclass(frozen=True)
class TrajectoryFilter:
    """Which trajectories to export; None = no condition.

    ``policy_version``: trajectories with a call served by that version (the version
    range of the rollout covers it), as the API's ``/v1/rollouts?policy_version=`` does.
    """

    min_reward: float | None = None
    policy_version: int | None = None
    split: str | None = None

    def describe(self) -> str:
        """The selection in words (a dataset card's, an empty export's error)."""
        parts = ["succeeded rollouts, their succeeded attempt"]
        if self.min_reward is not None:
            parts.append(f"reward >= {self.min_reward:g}")
        if self.policy_version is not None:
            parts.append(f"a call served by policy version {self.policy_version}")
        if self.split is not None:
            parts.append(f"split {self.split}")
        return "; ".join(parts)


def attempts_query(filters: TrajectoryFilter) -> Select:
    query = (
        select(
            Attempt.id.label("attempt_id"),
            Attempt.number.label("attempt"),
            Rollout.id.label("rollout_id"),
            Rollout.goal_id,
            Goal.split,
            Goal.instruction,
            Rollout.mode,
            Rollout.start,
            Rollout.group_id,
            Rollout.sample_index,
            Rollout.reward,
            Rollout.reward_parts,
            Rollout.success,
            Rollout.num_steps,
            Rollout.policy_version_min,
            Rollout.policy_version_max,
            Rollout.agent_url,
        )
        .join(Rollout, Rollout.id == Attempt.rollout_id)
        .join(Goal, Goal.id == Rollout.goal_id)
        .where(
            Attempt.status == AttemptStatus.SUCCEEDED,
            Rollout.status == RolloutStatus.SUCCEEDED,
        )
        .order_by(Attempt.id)
    )
    if filters.min_reward is not None:
        query = query.where(Rollout.reward >= filters.min_reward)
    if filters.policy_version is not None:
        query = query.where(
            Rollout.policy_version_min <= filters.policy_version,
            Rollout.policy_version_max >= filters.policy_version,
        )
    if filters.split is not None:
        query = query.where(Goal.split == filters.split)
    return query


def _message(message: Any) -> dict[str, str]:
    if not isinstance(message, dict):
        return {"role": "unknown", "content": json.dumps(message)}
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": str(message.get("role")), "content": text}


def _actions(conn: Connection, attempt_ids: list[int]) -> dict[int, list[str]]:
    """The env actions of a batch of attempts, in index order."""
    actions: dict[int, list[str]] = defaultdict(list)
    for attempt_id, action in conn.execute(
        select(Step.attempt_id, Step.action)
        .where(Step.attempt_id.in_(attempt_ids))
        .order_by(Step.attempt_id, Step.index)
    ):
        actions[attempt_id].append(action)
    return actions


def read_turns(conn: Connection, attempt_ids: list[int], tokens: bool) -> dict[int, list[dict]]:
    """The LLM calls of a batch of attempts, in index order."""
    columns = [
        LlmCall.attempt_id,
        LlmCall.index,
        LlmCall.policy_version,
        LlmCall.request_messages,
        LlmCall.response_text,
        LlmCall.finish_reason,
        LlmCall.trainable,
    ]
    if tokens:
        columns += [LlmCall.prompt_token_ids, LlmCall.response_token_ids, LlmCall.response_logprobs]
    turns: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in conn.execute(
        select(*columns)
        .where(LlmCall.attempt_id.in_(attempt_ids))
        .order_by(LlmCall.attempt_id, LlmCall.index)
    ):
        turn = {
            "index": row.index,
            "policy_version": row.policy_version,
            "messages": [_message(m) for m in row.request_messages or []],
            "response": row.response_text,
            "finish_reason": row.finish_reason,
            "trainable": row.trainable,
        }
        if tokens:
            turn.update({name: getattr(row, name) for name in TOKEN_FIELDS})
        turns[row.attempt_id].append(turn)
    return turns


def _record(row: Any, actions: list[str], turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rollout_id": str(row.rollout_id),
        "attempt": row.attempt,
        "goal_id": row.goal_id,
        "split": row.split,
        "instruction": row.instruction,
        "mode": str(row.mode),
        "start": str(row.start),
        "group_id": str(row.group_id),
        "sample_index": row.sample_index,
        "reward": row.reward,
        "reward_parts": row.reward_parts,
        "success": row.success,
        "num_steps": row.num_steps,
        "policy_version_min": row.policy_version_min,
        "policy_version_max": row.policy_version_max,
        "agent_url": row.agent_url,
        "actions": actions,
        "turns": turns,
    }


def iter_trajectory_records(
    engine: Engine,
    filters: TrajectoryFilter = TrajectoryFilter(),
    *,
    tokens: bool = False,
    batch_size: int = 1000,
) -> Iterator[list[dict[str, Any]]]:
    """Batches of trajectory records in attempt-id order (see the module docstring)."""
    with engine.connect() as stream, engine.connect() as details:
        result = stream.execution_options(stream_results=True, yield_per=batch_size).execute(
            attempts_query(filters)
        )
        for rows in result.partitions():
            ids = [row.attempt_id for row in rows]
            actions, turns = _actions(details, ids), read_turns(details, ids, tokens)
            yield [_record(row, actions[row.attempt_id], turns[row.attempt_id]) for row in rows]
            details.rollback()  # end the read transaction: no snapshot held across batches


def trajectory_schema(tokens: bool) -> pa.Schema:
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    turn_fields = [
        ("index", pa.int32()),
        ("policy_version", pa.int32()),
        ("messages", pa.list_(message)),
        ("response", pa.string()),
        ("finish_reason", pa.string()),
        ("trainable", pa.bool_()),
    ]
    if tokens:
        turn_fields += [
            ("prompt_token_ids", pa.list_(pa.int32())),
            ("response_token_ids", pa.list_(pa.int32())),
            ("response_logprobs", pa.list_(pa.float32())),
        ]
    return pa.schema(
        [
            ("rollout_id", pa.string()),
            ("attempt", pa.int32()),
            ("goal_id", pa.int64()),
            ("split", pa.string()),
            ("instruction", pa.string()),
            ("mode", pa.string()),
            ("start", pa.string()),
            ("group_id", pa.string()),
            ("sample_index", pa.int32()),
            ("reward", pa.float64()),
            ("reward_parts", pa.string()),
            ("success", pa.bool_()),
            ("num_steps", pa.int32()),
            ("policy_version_min", pa.int32()),
            ("policy_version_max", pa.int32()),
            ("agent_url", pa.string()),
            ("actions", pa.list_(pa.string())),
            ("turns", pa.list_(pa.struct(turn_fields))),
        ]
    )
