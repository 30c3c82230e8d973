"""Record writers: JSON lines or Parquet row groups, one batch of dicts at a time.

Parquet needs one type per column, so values whose shape varies from row to row (reward
parts, goal options) are written as JSON text there; JSON lines keep them as objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy import Engine, Select


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"


class ExportDependencyError(RuntimeError):
    """Parquet was asked for but pyarrow is not installed."""


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


def require_pyarrow() -> None:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ExportDependencyError(
            "Parquet export needs pyarrow: pip install 'webshop-rl[export]' (or use --format jsonl)"
        ) from exc


@contextmanager
def writing(
    path: Path,
    fmt: ExportFormat,
    schema_factory: Any,
    json_columns: Iterable[str] = (),
) -> Iterator[RecordWriter]:
    """A writer for ``fmt`` into ``path``; ``schema_factory()`` builds the Parquet schema
    (pyarrow is only imported for Parquet). The parent folder is created.

    The records go to a hidden file beside ``path`` that takes its place only when the
    block ends without an error: an export that fails (the database lost, the disk full,
    Ctrl-C) leaves no partial file and an earlier export at ``path`` as it was.
    """
    if fmt is ExportFormat.PARQUET:
        require_pyarrow()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    writer: RecordWriter = (
        JsonlWriter(partial)
        if fmt is ExportFormat.JSONL
        else ParquetWriter(partial, schema_factory(), json_columns)
    )
    try:
        try:
            yield writer
        finally:
            writer.close()
        os.replace(partial, path)  # only reached when the block ended without an error
    finally:
        partial.unlink(missing_ok=True)  # gone already after the replace
