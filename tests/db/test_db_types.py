"""Packing of token ids and logprobs (no database: see test_db_models for the round trip)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.db.types import pack_float32, pack_int32, unpack_float32, unpack_int32


def test_int32_round_trip_exact_at_the_limits() -> None:
    ids = [0, 1, 151_642, 2**31 - 1, -(2**31)]
    assert unpack_int32(pack_int32(ids)) == ids
    assert len(pack_int32(ids)) == 4 * len(ids)


def test_int32_accepts_numpy_arrays() -> None:
    ids = np.arange(10, dtype=np.int64)
    assert unpack_int32(pack_int32(ids)) == list(range(10))


def test_int32_rejects_ids_that_do_not_fit() -> None:
    with pytest.raises(OverflowError, match="int32"):
        pack_int32([2**31])


def test_int32_rejects_floats() -> None:
    with pytest.raises(ValueError, match="integers"):
        pack_int32([1.5, 2.0])


def test_float32_precision_is_documented_float32() -> None:
    values = [-0.1, -1e-8, -12.345678901, 0.0, -math.inf]
    loaded = unpack_float32(pack_float32(values))
    assert loaded == [float(np.float32(v)) for v in values]
    for original, back in zip(values[:-1], loaded[:-1], strict=True):
        assert back == pytest.approx(original, rel=1e-7, abs=1e-12)
    assert loaded[-1] == -math.inf


def test_empty_sequences() -> None:
    assert unpack_int32(pack_int32([])) == []
    assert unpack_float32(pack_float32([])) == []
