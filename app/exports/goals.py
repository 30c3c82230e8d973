"""WebShop's goals as a verl-style RL dataset: one row per goal with the agent's first prompt.

Each record::

    data_source   "webshop"
    prompt        [system, user]: the built-in agent's first prompt (search page, no history)
    ability       "agent"
    reward_model  {style: "rule", ground_truth: {asin, attributes, goal_options, price_upper}}
    extra_info    {goal_id, split, index, instruction}

``goal_options`` is a dict (option -> value) for synthetic goals and a list of values for
human ones, so it is JSON text in both formats. ``index`` is the goal's position within
its split (goals ordered by id).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Select, select

from app.db.models import Goal
from app.exports.writers import ExportFormat, ExportProgress, count_rows, writing

if TYPE_CHECKING:
    import pyarrow as pa

DATA_SOURCE = "webshop"
ABILITY = "agent"


def first_prompt(instruction: str) -> list[dict[str, str]]:
    """The built-in agent's first messages: the search page, nothing done yet."""
    from app.environments.webshop.agent import build_messages
    from app.webshop import pages

    observation = pages.render(pages.search_page(instruction), "text")
    available = {"has_search_bar": True, "clickables": ["search"]}
    return build_messages(instruction, observation, available, [])


def goal_record(goal: Any, index: int) -> dict[str, Any]:
    """The record of a WebShop goal row (id, split, instruction, spec)."""
    spec = goal.spec or {}
    return {
        "data_source": DATA_SOURCE,
        "prompt": first_prompt(goal.instruction),
        "ability": ABILITY,
        "reward_model": {
            "style": "rule",
            "ground_truth": {
                "asin": spec.get("asin"),
                "attributes": list(spec.get("attributes") or []),
                "goal_options": json.dumps(spec.get("goal_options") or {}, sort_keys=True),
                "price_upper": spec.get("price_upper"),
            },
        },
        "extra_info": {
            "goal_id": goal.id,
            "split": goal.split,
            "index": index,
            "instruction": goal.instruction,
        },
    }


def _goals_query(split: str | None) -> Select:
    query = (
        select(Goal.id, Goal.split, Goal.instruction, Goal.spec)
        .where(Goal.environment == DATA_SOURCE)
        .order_by(Goal.split, Goal.id)
    )
    return query if split is None else query.where(Goal.split == split)


def iter_goal_records(
    engine: Engine, *, split: str | None = None, batch_size: int = 1000
) -> Iterator[list[dict[str, Any]]]:
    """Batches of goal records, by split then id, from a server-side cursor."""
    query = _goals_query(split)
    positions: Counter[str] = Counter()
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=batch_size).execute(query)
        for rows in result.partitions():
            batch = []
            for row in rows:
                batch.append(goal_record(row, positions[row.split]))
                positions[row.split] += 1
            yield batch


def goal_schema() -> pa.Schema:
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            (
                "reward_model",
                pa.struct(
                    [
                        ("style", pa.string()),
                        (
                            "ground_truth",
                            pa.struct(
                                [
                                    ("asin", pa.string()),
                                    ("attributes", pa.list_(pa.string())),
                                    ("goal_options", pa.string()),
                                    ("price_upper", pa.float64()),
                                ]
                            ),
                        ),
                    ]
                ),
            ),
            (
                "extra_info",
                pa.struct(
                    [
                        ("goal_id", pa.int64()),
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("instruction", pa.string()),
                    ]
                ),
            ),
        ]
    )


def export_goals(
    engine: Engine,
    out: Path,
    fmt: ExportFormat = ExportFormat.PARQUET,
    *,
    split: str | None = None,
    batch_size: int = 1000,
    progress: ExportProgress | None = None,
) -> int:
    """Write the goals (of ``split``, or all) to ``out``; returns the number written.
    ``progress(written, total)`` follows every batch (and starts at 0)."""
    total = count_rows(engine, _goals_query(split)) if progress is not None else 0
    written = 0
    with writing(out, fmt, goal_schema) as writer:
        if progress is not None:
            progress(0, total)
        for batch in iter_goal_records(engine, split=split, batch_size=batch_size):
            writer.write(batch)
            written += len(batch)
            if progress is not None:
                progress(written, max(total, written))
    return written
