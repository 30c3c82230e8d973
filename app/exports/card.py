"""The dataset card (``README.md``) of an ``--format hf`` export.

Its YAML header declares one config (named after the form) with a data file per split, so
``datasets.load_dataset(folder)`` builds the splits without being told where the files
are; its body says what a reader needs before training on it: how it was selected, the
rows per split, the policy versions that wrote the replies, and each field.

The header also carries the tag :data:`MARKER`, by which a later export knows the folder
as one it may replace (:func:`is_export_folder`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

MARKER = "webshop-rl-export"
SPLIT_ORDER = ("train", "eval", "test")
# What Hugging Face accepts as a split name (the goal splits are train, eval and test).
SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")


def is_export_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a card written by this module."""
    card = folder / "README.md"
    return card.is_file() and f"- {MARKER}\n" in card.read_text(errors="replace")


def _split_order(split: str) -> tuple[int, str]:
    """train, eval, test, then any other split by name."""
    known = SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER)
    return known, split


def version_ranges(versions: Iterable[int]) -> str:
    """``0-3, 5, 7-9``: sorted versions with runs collapsed."""
    runs: list[list[int]] = []
    for version in sorted(set(versions)):
        if runs and version == runs[-1][1] + 1:
            runs[-1][1] = version
        else:
            runs.append([version, version])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass
class DatasetCard:
    """What the card says; :meth:`count` sees every row written.

    ``versions_of(row)``: the policy versions that served the row's replies (None where a
    call recorded none)."""

    form: str
    title: str
    about: str
    selection: str
    fields: dict[str, str]
    versions_of: Callable[[dict[str, Any]], Iterable[int | None]]
    splits: Counter[str] = field(default_factory=Counter)
    versions: set[int] = field(default_factory=set)

    def count(self, row: dict[str, Any]) -> None:
        split = row["split"]
        if split not in self.splits and not SPLIT_NAME.match(split):
            raise ValueError(f"goal split {split!r} is not a Hugging Face split name")
        self.splits[split] += 1
        self.versions.update(v for v in self.versions_of(row) if v is not None)

    @staticmethod
    def data_file(split: str, shard: int | None = None) -> str:
        """A split's ``shard``-th file, or (None) the pattern that names them all."""
        return f"data/{split}-{'*' if shard is None else f'{shard:05d}'}.parquet"

    def render(self, schema: pa.Schema) -> str:
        splits = sorted(self.splits, key=_split_order)
        header = [
            "---",
            "configs:",
            f"- config_name: {self.form}",
            "  default: true",
            "  data_files:",
            *(f"  - split: {s}\n    path: {self.data_file(s)}" for s in splits),
            "tags:",
            f"- {MARKER}",
            "- webshop",
            "---",
        ]
        rows = [f"| {s} | {self.splits[s]:,} |" for s in splits]
        fields = [f"| `{f.name}` | `{f.type}` | {self.fields.get(f.name, '')} |" for f in schema]
        written = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        versions = version_ranges(self.versions) or "none recorded"
        body = [
            f"# {self.title}",
            "",
            self.about,
            "",
            f"Written by `wsrl export trajectories --form {self.form} --format hf` "
            f"(webshop-rl) on {written}. Selection: {self.selection}.",
            "",
            "```python",
            "from datasets import load_dataset",
            f'dataset = load_dataset("path/to/this/folder")  # splits: {", ".join(splits)}',
            "```",
            "",
            "## Splits",
            "",
            "The goal's split in the database (goals never cross splits).",
            "",
            "| split | rows |",
            "|---|---|",
            *rows,
            "",
            "## Policy versions",
            "",
            f"The replies were served by policy versions {versions}.",
            "",
            "## Fields",
            "",
            "| field | type | meaning |",
            "|---|---|---|",
            *fields,
            "",
        ]
        return "\n".join([*header, "", *body])
