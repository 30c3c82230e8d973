"""``wsrl export trajectories``: the three forms of a trajectory export, written in any
format (:class:`~app.exports.writers.TrajectoryForm`, :class:`~app.exports.writers.ExportFormat`).

``trajectories`` (:mod:`app.exports.trajectories`): one row per trajectory. ``messages``
and ``preferences`` (:mod:`app.exports.chat`): rows for TRL's ``SFTTrainer`` and
``DPOTrainer``. With ``--format hf`` each is a dataset folder whose card names the form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from app.exports import chat
from app.exports.card import DatasetCard
from app.exports.trajectories import (
    JSON_COLUMNS,
    TRAJECTORY_FIELDS,
    TrajectoryFilter,
    attempts_query,
    iter_trajectory_records,
    trajectory_schema,
)
from app.exports.writers import (
    EmptyExportError,
    ExportFormat,
    ExportProgress,
    ExportUsageError,
    TrajectoryForm,
    count_rows,
    writing,
)

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class _Form:
    """How a form's rows are made, typed and described."""

    title: str
    about: str  # the card's first paragraph
    schema: Callable[[bool], pa.Schema]  # tokens -> schema
    json_columns: tuple[str, ...]
    fields: dict[str, str]
    versions_of: Callable[[dict[str, Any]], Iterable[int | None]]


FORMS = {
    TrajectoryForm.TRAJECTORIES: _Form(
        "WebShop trajectories",
        "One row per succeeded rollout (its succeeded attempt): the outcome, the env actions "
        "and every LLM call (`turns`) with the messages sent and the reply.",
        trajectory_schema,
        JSON_COLUMNS,
        TRAJECTORY_FIELDS,
        lambda row: (turn["policy_version"] for turn in row["turns"]),
    ),
    TrajectoryForm.MESSAGES: _Form(
        "WebShop replies as chat messages (SFT)",
        "One row per reply of the policy: `messages` is the prompt as the agent sent it, then "
        "the reply as an assistant message (the conversational format of TRL's `SFTTrainer`). "
        "Each call of an episode is a fresh prompt that shows the episode so far, so each row "
        "stands alone.",
        lambda _: chat.messages_schema(),
        (),
        chat.MESSAGE_FIELDS,
        lambda row: (row["policy_version"],),
    ),
    TrajectoryForm.PREFERENCES: _Form(
        "WebShop preference pairs, a group's best and worst episode (DPO)",
        "One row per GRPO group whose rewards differ: its best and its worst episode (ties "
        "to the lower and the higher sample index), followed to the first call where both "
        "got the same prompt and replied differently. `prompt` is that prompt, `chosen` and "
        "`rejected` the two replies (the conversational preference format of TRL's "
        "`DPOTrainer`). A group whose rewards are all equal gives no pair.",
        lambda _: chat.preference_schema(),
        (),
        chat.PREFERENCE_FIELDS,
        lambda row: (row["chosen_policy_version"], row["rejected_policy_version"]),
    ),
}


def _check(form: TrajectoryForm, filters: TrajectoryFilter, tokens: bool) -> None:
    if tokens and form is not TrajectoryForm.TRAJECTORIES:
        raise ExportUsageError(f"--tokens adds token ids to --form trajectories, not {form}")
    if form is TrajectoryForm.PREFERENCES and filters.min_reward is not None:
        raise ExportUsageError(
            "--min-reward would drop the worst episodes that --form preferences pairs "
            "against the best: leave it out"
        )


def _batches(
    engine: Engine, filters: TrajectoryFilter, form: TrajectoryForm, tokens: bool, batch_size: int
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(source rows read, rows to write): trajectories, or groups for preferences."""
    if form is TrajectoryForm.PREFERENCES:
        yield from chat.iter_preference_rows(engine, filters, batch_size=batch_size)
        return
    for records in iter_trajectory_records(engine, filters, tokens=tokens, batch_size=batch_size):
        if form is TrajectoryForm.MESSAGES:
            yield len(records), [row for record in records for row in chat.message_rows(record)]
        else:
            yield len(records), records


def export_trajectories(
    engine: Engine,
    out: Path,
    fmt: ExportFormat = ExportFormat.JSONL,
    filters: TrajectoryFilter = TrajectoryFilter(),
    *,
    form: TrajectoryForm = TrajectoryForm.TRAJECTORIES,
    tokens: bool = False,
    batch_size: int = 1000,
    progress: ExportProgress | None = None,
) -> int:
    """Write the matching trajectories to ``out`` in ``form``; returns the rows written.

    ``progress(read, total)`` follows every batch (and starts at 0): trajectories read,
    or groups for ``preferences``. Nothing matching is :class:`EmptyExportError` and
    writes nothing; options the form cannot honour are :class:`ExportUsageError`.
    """
    _check(form, filters, tokens)
    spec = FORMS[form]
    pairs = form is TrajectoryForm.PREFERENCES
    query = chat.pairs_query(filters) if pairs else attempts_query(filters)
    card = DatasetCard(
        form, spec.title, spec.about, filters.describe(), spec.fields, spec.versions_of
    )
    read = written = 0
    with writing(out, fmt, partial(spec.schema, tokens), spec.json_columns, card) as writer:
        total = count_rows(engine, query) if progress is not None else 0
        if progress is not None:
            progress(0, total)
        for count, rows in _batches(engine, filters, form, tokens, batch_size):
            writer.write(rows)
            read, written = read + count, written + len(rows)
            if progress is not None:
                progress(read, max(total, read))
        if not written:
            raise EmptyExportError(_nothing(form, filters, read))
    return written


def _nothing(form: TrajectoryForm, filters: TrajectoryFilter, read: int) -> str:
    selection = filters.describe()
    if form is not TrajectoryForm.PREFERENCES:
        return f"no trajectories match ({selection})"
    if not read:
        return f"no preference pairs: no group has episodes with different rewards ({selection})"
    return (
        f"no preference pairs: in the {read} groups with different rewards, the best and the "
        f"worst episode never replied differently to the same prompt ({selection})"
    )
