"""Column types for token ids and logprobs: Python lists, packed little-endian bytes in SQL.

A 4,096-token response is stored as one ``bytea`` of 16 KiB (int32 ids) and one of
16 KiB (float32 logprobs) instead of a Postgres ``int4[]`` / ``float4[]``: the packed
form is written ~20x and read ~3x faster, at the same size, because the driver moves
one buffer that numpy reads directly instead of formatting and parsing thousands of
array elements. ``benchmarks/token_storage.py`` measured, per 4,096-token row: arrays
12.0 ms write / 1.7 ms read, bytea 0.6 ms / 0.5 ms, both ~32.8 kB stored (2 contended
cores, PostgreSQL 15). In SQL, ``length(response_token_ids) / 4`` is the token count.

Logprobs are stored as float32: a value read back equals ``numpy.float32(value)`` of
what was written (about 7 significant digits), which is the precision inference servers
compute them at. Token ids must fit in a signed int32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from sqlalchemy.dialects.postgresql import BYTEA, JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

INT32 = np.dtype("<i4")
FLOAT32 = np.dtype("<f4")


def pack_int32(values: Sequence[int] | np.ndarray) -> bytes:
    """Little-endian int32 bytes; ``OverflowError`` for an id outside int32."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"token ids must be a flat sequence, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"token ids must be integers, got dtype {array.dtype}")
    if array.size and (array.min() < np.iinfo(INT32).min or array.max() > np.iinfo(INT32).max):
        raise OverflowError("token id does not fit in int32")
    return array.astype(INT32, copy=False).tobytes()


def unpack_int32(data: bytes | memoryview) -> list[int]:
    return np.frombuffer(data, dtype=INT32).tolist()


def pack_float32(values: Sequence[float] | np.ndarray) -> bytes:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"logprobs must be a flat sequence, got shape {array.shape}")
    return array.astype(FLOAT32).tobytes()


def unpack_float32(data: bytes | memoryview) -> list[float]:
    return np.frombuffer(data, dtype=FLOAT32).tolist()


class TokenIds(TypeDecorator[list[int]]):
    """``list[int]`` in Python, packed little-endian int32 ``bytea`` in Postgres."""

    impl = BYTEA
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        return None if value is None else pack_int32(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> list[int] | None:
        return None if value is None else unpack_int32(value)


class Logprobs(TypeDecorator[list[float]]):
    """``list[float]`` in Python, packed little-endian float32 ``bytea`` in Postgres."""

    impl = BYTEA
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        return None if value is None else pack_float32(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> list[float] | None:
        return None if value is None else unpack_float32(value)


class JsonOrNull(JSONB):
    """A nullable ``jsonb`` column whose Python ``None`` is SQL ``NULL``.

    SQLAlchemy's ``JSONB`` writes an explicit ``None`` as the JSON value ``null``, which
    ``IS NULL`` does not find: a query for the calls decoded without a constraint
    (``structured_outputs IS NULL``) found none, and one for the constrained found all.
    """

    def __init__(self) -> None:
        super().__init__(none_as_null=True)


def without_nul(value: Any) -> Any:
    """``value`` with every NUL character of its strings replaced by U+FFFD.

    PostgreSQL's ``text`` and ``jsonb`` cannot hold ``\\x00``, and a model can emit it:
    without this, one garbage reply would fail the whole write of an attempt. Walks
    dicts and lists; other values are returned as they are. For a ``jsonb`` value
    :func:`jsonb_dumps` does it, only when the value holds a NUL.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {key: without_nul(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(item) for item in value]
    return value


_JSONB_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def jsonb_dumps(value: Any) -> bytes:
    """``value`` as JSON for a ``jsonb`` column, NUL characters replaced as :func:`without_nul`
    does; every engine's serializer (:func:`app.db.session.make_engine`).

    orjson, with the walk only for a value whose JSON holds an escaped NUL: the standard
    library's encoder after a walk of every string took 88 us for a 10-turn conversation,
    orjson 2 us, and a worker writes one per LLM call (docs/benchmarks.md). Keys that are
    not strings are written as strings, numpy values as numbers, and NaN as ``null``
    (which ``jsonb`` takes, where the standard library's ``NaN`` failed the write).
    """
    data = orjson.dumps(value, option=_JSONB_OPTIONS)
    if b"\\u0000" in data:
        data = orjson.dumps(without_nul(value), option=_JSONB_OPTIONS)
    return data
