"""The chat forms of a trajectory export, as TRL's trainers take them (conversational).

``messages`` (``SFTTrainer``): one row per reply of the policy, ``messages`` being the
prompt exactly as the agent sent it followed by ``{"role": "assistant", "content": reply}``.
A row per reply rather than per episode, because the agent's prompts are not one growing
conversation: each call is a fresh system + user prompt that shows the episode so far.

``preferences`` (``DPOTrainer``): one row per group, from its best and its worst episode
(highest and lowest reward; ties to the lower / higher sample index). The two are
followed turn by turn to the first call where they had the same prompt and replied
differently: ``prompt`` is those messages, ``chosen`` and ``rejected`` the two replies,
each as one assistant message. A group whose rewards are all equal gives no pair, nor one
whose two episodes never part that way (a prompt differs first, or one episode ends).

The pairs stream like the trajectories: :func:`pairs_query` has Postgres pick each
group's two attempts, sorted by group, from a server-side cursor; the calls of a batch of
pairs are read with one query, so memory holds one batch of groups whatever the total.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Select, select
from sqlalchemy.dialects.postgresql import distinct_on

from app.db.models import Rollout
from app.exports.trajectories import TrajectoryFilter, attempts_query, read_turns

if TYPE_CHECKING:
    import pyarrow as pa

MESSAGE_FIELDS = {
    "messages": "the prompt's messages as the policy got them, then its reply (assistant)",
    "rollout_id": "the rollout (episode) the reply belongs to",
    "group_id": "its GRPO group: the rollouts of one goal played together",
    "goal_id": "the WebShop goal",
    "split": "the goal's split",
    "turn": "the call's index within the episode (0 = first)",
    "policy_version": "the policy version that served the reply",
    "reward": "the episode's final reward (0-1)",
    "success": "whether the episode bought the goal's item (reward 1)",
    "finish_reason": "why the server stopped the reply (stop, length)",
    "trainable": "whether the server returned the reply's token ids and logprobs",
}

PREFERENCE_FIELDS = {
    "prompt": "the messages both episodes got at the turn where their replies part",
    "chosen": "the reply of the group's best episode, as one assistant message",
    "rejected": "the reply of the group's worst episode, as one assistant message",
    "group_id": "the GRPO group both episodes belong to",
    "goal_id": "the WebShop goal",
    "split": "the goal's split",
    "turn": "the call's index within both episodes where they part",
    "chosen_rollout_id": "the best episode",
    "rejected_rollout_id": "the worst episode",
    "chosen_reward": "the best episode's final reward",
    "rejected_reward": "the worst episode's final reward (lower)",
    "chosen_policy_version": "the policy version that served the chosen reply",
    "rejected_policy_version": "the policy version that served the rejected reply",
}


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def message_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``messages`` rows of one trajectory record: one per call with a reply."""
    return [
        {
            "messages": [*turn["messages"], _assistant(turn["response"])],
            "rollout_id": record["rollout_id"],
            "group_id": record["group_id"],
            "goal_id": record["goal_id"],
            "split": record["split"],
            "turn": turn["index"],
            "policy_version": turn["policy_version"],
            "reward": record["reward"],
            "success": record["success"],
            "finish_reason": turn["finish_reason"],
            "trainable": turn["trainable"],
        }
        for turn in record["turns"]
        if turn["response"] is not None
    ]


def parting_turn(chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> int | None:
    """The position of the first turn where both got the same messages and replied
    differently; None when a prompt differs first, a reply is missing, or one ends."""
    for position, (a, b) in enumerate(zip(chosen, rejected, strict=False)):
        if a["messages"] != b["messages"] or a["response"] is None or b["response"] is None:
            return None
        if a["response"] != b["response"]:
            return position
    return None


def preference_row(
    pair: Any, chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The ``preferences`` row of one group; ``pair`` is a row of the pairs query and
    ``chosen`` / ``rejected`` the turns of its two episodes, in order."""
    position = parting_turn(chosen, rejected)
    if position is None:
        return None
    best, worst = chosen[position], rejected[position]
    return {
        "prompt": best["messages"],
        "chosen": [_assistant(best["response"])],
        "rejected": [_assistant(worst["response"])],
        "group_id": str(pair.group_id),
        "goal_id": pair.goal_id,
        "split": pair.split,
        "turn": best["index"],
        "chosen_rollout_id": str(pair.chosen_rollout_id),
        "rejected_rollout_id": str(pair.rejected_rollout_id),
        "chosen_reward": pair.chosen_reward,
        "rejected_reward": pair.rejected_reward,
        "chosen_policy_version": best["policy_version"],
        "rejected_policy_version": worst["policy_version"],
    }


def _messages_type() -> pa.DataType:
    import pyarrow as pa

    return pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def messages_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("messages", _messages_type()),
            ("rollout_id", pa.string()),
            ("group_id", pa.string()),
            ("goal_id", pa.int64()),
            ("split", pa.string()),
            ("turn", pa.int32()),
            ("policy_version", pa.int32()),
            ("reward", pa.float64()),
            ("success", pa.bool_()),
            ("finish_reason", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )


def preference_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("prompt", _messages_type()),
            ("chosen", _messages_type()),
            ("rejected", _messages_type()),
            ("group_id", pa.string()),
            ("goal_id", pa.int64()),
            ("split", pa.string()),
            ("turn", pa.int32()),
            ("chosen_rollout_id", pa.string()),
            ("rejected_rollout_id", pa.string()),
            ("chosen_reward", pa.float64()),
            ("rejected_reward", pa.float64()),
            ("chosen_policy_version", pa.int32()),
            ("rejected_policy_version", pa.int32()),
        ]
    )


def pairs_query(filters: TrajectoryFilter) -> Select:
    """Per group of the selection, its best and its worst attempt, one row per group with
    rewards that differ, sorted by group: each side is a DISTINCT ON over the group's
    attempts in reward order, so Postgres sorts (spilling to disk if it must) and the
    rows stream like any other query's."""

    def ranked(best: bool) -> Any:
        reward = Rollout.reward.desc() if best else Rollout.reward.asc()
        sample = Rollout.sample_index.asc() if best else Rollout.sample_index.desc()
        return (
            attempts_query(filters)
            .where(Rollout.reward.is_not(None))
            .ext(distinct_on(Rollout.group_id))
            .order_by(None)
            .order_by(Rollout.group_id, reward, sample)
            .subquery()
        )

    best, worst = ranked(best=True), ranked(best=False)
    return (
        select(
            best.c.group_id,
            best.c.goal_id,
            best.c.split,
            best.c.attempt_id.label("chosen_attempt_id"),
            best.c.rollout_id.label("chosen_rollout_id"),
            best.c.reward.label("chosen_reward"),
            worst.c.attempt_id.label("rejected_attempt_id"),
            worst.c.rollout_id.label("rejected_rollout_id"),
            worst.c.reward.label("rejected_reward"),
        )
        .join(worst, worst.c.group_id == best.c.group_id)
        .where(best.c.reward > worst.c.reward)
        .order_by(best.c.group_id)
    )


def iter_preference_rows(
    engine: Engine, filters: TrajectoryFilter = TrajectoryFilter(), *, batch_size: int = 1000
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(groups read, their ``preferences`` rows) a batch of groups at a time, by group."""
    with engine.connect() as stream, engine.connect() as details:
        result = stream.execution_options(stream_results=True, yield_per=batch_size).execute(
            pairs_query(filters)
        )
        for pairs in result.partitions():
            ids = [p.chosen_attempt_id for p in pairs] + [p.rejected_attempt_id for p in pairs]
            turns = read_turns(details, ids, tokens=False)
            rows = [
                preference_row(p, turns[p.chosen_attempt_id], turns[p.rejected_attempt_id])
                for p in pairs
            ]
            yield len(pairs), [row for row in rows if row is not None]
            details.rollback()
