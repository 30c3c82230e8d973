"""The compiled catalog: products and goals as records in memory-mapped files.

Parsing the original JSON takes minutes at a million products, so it happens once: the
files are compiled into ``<cache>/<key>/`` (key = hash of the source files' names,
sizes and modification times, the price seed and the format version) and every later
start, in any process, maps the result. A product or goal is decoded from its record
when asked for (a few microseconds), so memory stays small whatever the catalog size.
Compilation writes into a temporary folder and renames it, so concurrent processes
never see a half-written cache.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import orjson

from app.webshop.goals import (
    Goal,
    goal_from_record,
    human_goal,
    shuffled_order,
    synthetic_goals,
    synthetic_weights,
)
from app.webshop.loader import (
    Product,
    find_file,
    iter_human_instructions,
    iter_products,
    read_instructions,
)

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
GOAL_KINDS = ("synthetic", "human")
_GOAL_SEEDS = {"synthetic": 1, "human": 2}


class RecordWriter:
    """Streams records to ``path`` and their offsets to ``path.offsets.npy`` on close."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = path.open("wb")
        self._offsets = [0]

    @property
    def count(self) -> int:
        return len(self._offsets) - 1

    def append(self, rec: Any) -> None:
        data = orjson.dumps(rec)
        self._f.write(data)
        self._offsets.append(self._offsets[-1] + len(data))

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()
        offsets = np.asarray(self._offsets, dtype=np.int64)
        np.save(self.path.with_suffix(".offsets.npy"), offsets)


class RecordFile:
    """Append-only file of orjson records plus an offsets array, read back by mmap."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offsets: np.ndarray | None = None
        self._mm: mmap.mmap | None = None

    @staticmethod
    def write(path: Path, records: Iterator[Any]) -> int:
        with RecordWriter(path) as writer:
            for rec in records:
                writer.append(rec)
        return writer.count

    def open(self) -> RecordFile:
        self._offsets = np.load(self.path.with_suffix(".offsets.npy"), mmap_mode="r")
        if self.path.stat().st_size:
            with self.path.open("rb") as f:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self

    def __len__(self) -> int:
        assert self._offsets is not None
        return len(self._offsets) - 1

    def get(self, i: int) -> Any:
        if not 0 <= i < len(self):
            raise IndexError(i)
        assert self._offsets is not None and self._mm is not None
        return orjson.loads(self._mm[int(self._offsets[i]) : int(self._offsets[i + 1])])


class GoalList(Sequence[Goal]):
    """The goals in id order, decoded on access; ``order`` maps id -> record."""

    def __init__(self, records: RecordFile, order: np.ndarray, weights: np.ndarray) -> None:
        self._records = records
        self._order = order
        self.weights = weights

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, i: int) -> Goal: ...
    @overload
    def __getitem__(self, i: slice) -> list[Goal]: ...
    def __getitem__(self, i: int | slice) -> Goal | list[Goal]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"goal {i} out of range (0..{len(self) - 1})")
        record = self._records.get(int(self._order[i]))
        record["weight"] = float(self.weights[i])
        return goal_from_record(i, record)

    def product_index(self, i: int) -> int:
        return int(self._records.get(int(self._order[i]))["product"])


def source_key(files: list[Path], price_seed: int, limit: int | None = None) -> str:
    h = hashlib.sha256(f"v{FORMAT_VERSION}:seed{price_seed}".encode())
    if limit is not None:
        h.update(f":limit{limit}".encode())
    for path in files:
        st = path.stat()
        h.update(f"|{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class CompiledCatalog:
    """Read-only view of one compiled cache folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.products = RecordFile(root / "products.bin").open()
        self._goals: dict[str, GoalList] = {}

    def __len__(self) -> int:
        return len(self.products)

    def product(self, i: int) -> Product:
        return Product.from_record(self.products.get(i))

    def iter_products(self) -> Iterator[Product]:
        for i in range(len(self.products)):
            yield self.product(i)

    def goals(self, kind: str) -> GoalList:
        if kind not in GOAL_KINDS:
            raise ValueError(f"Unknown goal set {kind!r}; expected one of {GOAL_KINDS}")
        if kind not in self._goals:
            path = self.root / f"goals-{kind}.bin"
            if not path.exists():
                raise FileNotFoundError(f"The catalog at {self.root} has no {kind} goals")
            records = RecordFile(path).open()
            order = np.load(self.root / f"goals-{kind}.order.npy", mmap_mode="r")
            weights = np.load(self.root / f"goals-{kind}.weights.npy", mmap_mode="r")
            self._goals[kind] = GoalList(records, order, weights)
        return self._goals[kind]


def compile_catalog(
    data_dir: Path,
    cache_root: Path,
    price_seed: int = 0,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Compiles the original files of ``data_dir`` once (their first ``limit`` kept
    products when given); returns the cache folder. ``progress(bytes read, bytes)``
    follows the products file as it is read (not called when the cache has it)."""
    items = find_file(data_dir, "items_shuffle")
    ins = find_file(data_dir, "items_ins_v2")
    human_files = sorted(data_dir.glob("items_human_ins*.json"))
    human = human_files[0] if human_files else None
    key = source_key([p for p in (items, ins, human) if p is not None], price_seed, limit)
    target = cache_root / key
    if (target / "done").exists():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_root))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by processes
    try:
        logger.info("Compiling catalog %s into %s", data_dir, target)
        _compile_into(tmp, items, ins, human, price_seed, limit, progress)
        (tmp / "done").write_text("ok")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "done").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _compile_into(
    out: Path,
    items: Path,
    ins: Path,
    human: Path | None,
    price_seed: int,
    limit: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    instructions = read_instructions(ins)
    asin_index: dict[str, int] = {}
    # One shared tuple per product (not a list per goal): 4.5M goals at 1M products.
    goal_attributes: list[tuple[str, ...]] = []
    goal_rng = random.Random(f"{price_seed}:{_GOAL_SEEDS['synthetic']}")
    with (
        RecordWriter(out / "products.bin") as products,
        RecordWriter(out / "goals-synthetic.bin") as goals,
    ):
        size = items.stat().st_size
        if progress is not None:
            progress(0, size)
        for product, info in iter_products(items, instructions, price_seed, progress):
            if limit is not None and products.count >= limit:
                break
            i = products.count
            asin_index[product.asin] = i
            products.append(product.to_record())
            for rec in synthetic_goals(product, info, goal_rng):
                rec["product"] = i
                goals.append(rec)
                goal_attributes.append(info.instruction_attributes)  # type: ignore[union-attr]
    del instructions
    if progress is not None:
        progress(size, size)  # read to the end, or to ``limit``: the products are in
    _write_goal_order(out, "synthetic", synthetic_weights(goal_attributes))
    del goal_attributes
    if human is not None:
        store = RecordFile(out / "products.bin").open()
        human_rng = random.Random(f"{price_seed}:{_GOAL_SEEDS['human']}")
        with RecordWriter(out / "goals-human.bin") as writer:
            for asin, entry in iter_human_instructions(human):
                if asin not in asin_index:
                    continue
                i = asin_index[asin]
                rec = human_goal(Product.from_record(store.get(i)), entry, human_rng)
                rec["product"] = i
                writer.append(rec)
        _write_goal_order(out, "human", [1.0] * writer.count)
    logger.info("Compiled %d products", len(asin_index))


def _write_goal_order(out: Path, kind: str, weights_by_record: list[float]) -> None:
    """Shuffles goal ids with the fixed split seed; stores weights in id order."""
    order = np.asarray(shuffled_order(len(weights_by_record)), dtype=np.int64)
    weights = np.asarray(weights_by_record, dtype=np.float64)[order] if len(order) else order
    np.save(out / f"goals-{kind}.order.npy", order)
    np.save(out / f"goals-{kind}.weights.npy", np.asarray(weights, dtype=np.float64))
