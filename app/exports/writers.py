"""Record writers: JSON lines, Parquet row groups, or a Hugging Face dataset folder, one
batch of dicts at a time.

Parquet needs one type per column, so values whose shape varies from row to row (reward
parts, goal options) are written as JSON text there; JSON lines keep them as objects. A
dataset folder is Parquet files by split under ``data/`` and a dataset card (``README.md``,
:mod:`app.exports.card`) whose header tells ``datasets.load_dataset(folder)`` where they are.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from app.exports.card import DatasetCard, is_export_folder

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy import Engine, Select


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"
    HF = "hf"  # a folder that datasets.load_dataset reads: data/<split>.parquet + README.md


class TrajectoryForm(StrEnum):
    """The shape of a trajectory export's rows (app/exports/chat.py for the two chat forms)."""

    TRAJECTORIES = "trajectories"  # one row per trajectory: outcome, actions, turns
    MESSAGES = "messages"  # one row per reply: the prompt's messages + the reply (SFT)
    PREFERENCES = "preferences"  # one row per group: prompt, chosen, rejected (DPO)


class ExportDependencyError(RuntimeError):
    """Parquet was asked for but pyarrow is not installed."""


class ExportUsageError(ValueError):
    """The options cannot make an export (a file where a folder is needed, a filter the
    form cannot honour); nothing was read or written."""


class EmptyExportError(ValueError):
    """Nothing matched: no dataset is written (an earlier one at the path stays)."""


# ``progress(written, total)``: rows written so far of the rows the export's query counted.
ExportProgress = Callable[[int, int], None]


def count_rows(engine: Engine, query: Select) -> int:
    """How many rows ``query`` returns (a progress total: one count before streaming)."""
    from sqlalchemy import func, select  # not at import: `wsrl --help` imports this module

    with engine.connect() as conn:
        counted = select(func.count()).select_from(query.order_by(None).subquery())
        return int(conn.scalar(counted) or 0)


class RecordWriter(Protocol):
    def write(self, records: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


class JsonlWriter:
    """One JSON object per line (orjson: UUIDs and datetimes become strings)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("wb")

    def write(self, records: list[dict[str, Any]]) -> None:
        self._file.write(b"".join(orjson.dumps(r) + b"\n" for r in records))

    def close(self) -> None:
        self._file.close()


class ParquetWriter:
    """Each ``write`` is one row group of ``schema``; ``json_columns`` become JSON text."""

    def __init__(self, path: Path, schema: pa.Schema, json_columns: Iterable[str] = ()) -> None:
        import pyarrow.parquet as pq

        self._schema = schema
        self._json_columns = tuple(json_columns)
        self._writer = pq.ParquetWriter(path, schema, compression="zstd")

    def write(self, records: list[dict[str, Any]]) -> None:
        import pyarrow as pa

        if not records:
            return
        for record in records:
            for column in self._json_columns:
                value = record.get(column)
                record[column] = None if value is None else json.dumps(value, sort_keys=True)
        self._writer.write_table(pa.Table.from_pylist(records, schema=self._schema))

    def close(self) -> None:
        self._writer.close()


class DatasetFolderWriter:
    """A Hugging Face dataset folder: ``data/<split>-NNNNN.parquet`` files per split of the
    records' ``split`` values, and at ``close`` the card that declares them.

    Rows wait per split until there are ``group_rows`` of them, so that a split that is a
    small share of each batch still gets row groups of a useful size; memory holds at most
    ``group_rows`` pending rows per split. A file ends after ``file_rows`` rows: a Parquet
    writer keeps every row group's footer entry until it closes (~36 KiB each for the
    trajectories: +32 MiB at a million in one file, benchmarks/export.py)."""

    def __init__(
        self,
        folder: Path,
        schema: pa.Schema,
        json_columns: Iterable[str],
        card: DatasetCard,
        group_rows: int = 1000,
        file_rows: int = 100_000,
    ) -> None:
        (folder / "data").mkdir(parents=True)
        self._folder = folder
        self._schema = schema
        self._json_columns = tuple(json_columns)
        self._card = card
        self._group_rows = group_rows
        self._file_rows = file_rows
        self._pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._files: dict[str, ParquetWriter] = {}
        self._in_file: dict[str, int] = defaultdict(int)  # rows in the split's open file
        self._shards: dict[str, int] = defaultdict(int)  # files the split has begun

    def write(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._card.count(record)
            self._pending[record["split"]].append(record)
        for split, pending in self._pending.items():
            if len(pending) >= self._group_rows:
                self._flush(split)

    def _flush(self, split: str) -> None:
        if split not in self._files:
            path = self._folder / self._card.data_file(split, self._shards[split])
            self._files[split] = ParquetWriter(path, self._schema, self._json_columns)
            self._shards[split] += 1
        rows = self._pending[split]
        self._files[split].write(rows)
        self._pending[split] = []
        self._in_file[split] += len(rows)
        if self._in_file[split] >= self._file_rows:
            self._files.pop(split).close()
            self._in_file[split] = 0

    def close(self) -> None:
        try:
            for split in list(self._pending):
                if self._pending[split]:
                    self._flush(split)
        finally:
            for file in self._files.values():
                file.close()
        (self._folder / "README.md").write_text(self._card.render(self._schema))


def require_pyarrow() -> None:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ExportDependencyError(
            "Parquet and --format hf need pyarrow: pip install 'webshop-rl[export]' "
            "(or use --format jsonl)"
        ) from exc


def check_target(path: Path, fmt: ExportFormat) -> None:
    """Refuse a ``path`` that ``fmt`` cannot replace: a folder for a one-file format, a
    file for ``hf``, or a folder of other files (``hf`` replaces only a folder it wrote)."""
    if fmt is ExportFormat.HF:
        if path.exists() and not path.is_dir():
            raise ExportUsageError(
                f"--format hf writes a dataset folder, and {path} is a file: name a folder"
            )
        if path.is_dir() and any(path.iterdir()) and not is_export_folder(path):
            raise ExportUsageError(
                f"{path} is a folder with other files in it: --format hf replaces only a "
                "folder it wrote (its README.md says so); name a new or an empty folder"
            )
    elif path.is_dir():
        raise ExportUsageError(
            f"--format {fmt} writes one file, and {path} is a folder: name a file, or use "
            "--format hf for a dataset folder"
        )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _put_in_place(partial: Path, path: Path) -> None:
    """``partial`` takes ``path``'s place; a folder there (an earlier export) goes."""
    if not path.is_dir():
        os.replace(partial, path)
        return
    earlier = path.with_name(f".{path.name}.earlier")
    _remove(earlier)
    os.replace(path, earlier)
    os.replace(partial, path)
    shutil.rmtree(earlier)


@contextmanager
def writing(
    path: Path,
    fmt: ExportFormat,
    schema_factory: Any,
    json_columns: Iterable[str] = (),
    card: DatasetCard | None = None,
) -> Iterator[RecordWriter]:
    """A writer for ``fmt`` into ``path``; ``schema_factory()`` builds the Parquet schema
    (pyarrow is only imported for Parquet and ``hf``, which needs ``card``). The parent
    folder is created; :func:`check_target` refuses a path of the wrong kind first.

    The records go to a hidden file (or folder) beside ``path`` that takes its place only
    when the block ends without an error: an export that fails (the database lost, the
    disk full, Ctrl-C, nothing matched) leaves nothing partial and an earlier export at
    ``path`` as it was.
    """
    check_target(path, fmt)
    if fmt is not ExportFormat.JSONL:
        require_pyarrow()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    _remove(partial)  # left by a killed export
    writer: RecordWriter
    if fmt is ExportFormat.JSONL:
        writer = JsonlWriter(partial)
    elif fmt is ExportFormat.PARQUET:
        writer = ParquetWriter(partial, schema_factory(), json_columns)
    else:
        if card is None:
            raise ExportUsageError("this export has no dataset card: --format jsonl or parquet")
        writer = DatasetFolderWriter(partial, schema_factory(), json_columns, card)
    try:
        try:
            yield writer
        finally:
            writer.close()
        _put_in_place(partial, path)  # only reached when the block ended without an error
    finally:
        _remove(partial)  # gone already after the move
