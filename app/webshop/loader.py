"""Streaming reader of the original WebShop files, with the spec's normalisation rules.

The reader never holds the product list in memory: ``items_shuffle*.json`` is parsed
item by item with ``ijson`` (C backend), so the 5.5 GB original set streams in bounded
memory. Only the per-asin join table of ``items_ins_v2*.json`` (attributes and
instruction, a few hundred bytes an asin) is kept while reading.

Normalisation (docs/webshop.md, "The original data files"): products with asin 'nan',
an asin longer than 10 characters, or an asin seen before are skipped; option names are
lowercased; option values are stripped, '/' becomes ' | ', and lowercased; a product
without a price costs 100.0; a range price is drawn uniformly within the range once,
with a seeded generator, so the same files and seed always give the same prices.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

DEFAULT_PRICE = 100.0
MAX_ASIN_LEN = 10
_NOT_PRICE_CHARS = re.compile(r"[^\d.]")


@dataclass(frozen=True, slots=True)
class Product:
    """What pages, search and the reward need of one product, and nothing more."""

    asin: str
    name: str
    description: str
    bullets: tuple[str, ...]
    price: float
    price_text: str
    product_category: str
    category: str
    query: str
    options: tuple[tuple[str, tuple[str, ...]], ...]
    attributes: tuple[str, ...]

    def option_values(self) -> dict[str, str]:
        """Value -> option name; a value offered under two names belongs to the first."""
        out: dict[str, str] = {}
        for name, values in self.options:
            for value in values:
                out.setdefault(value, name)
        return out

    def to_record(self) -> list[Any]:
        return [
            self.asin,
            self.name,
            self.description,
            list(self.bullets),
            self.price,
            self.price_text,
            self.product_category,
            self.category,
            self.query,
            [[n, list(v)] for n, v in self.options],
            list(self.attributes),
        ]

    @classmethod
    def from_record(cls, rec: list[Any]) -> Product:
        return cls(
            rec[0],
            rec[1],
            rec[2],
            tuple(rec[3]),
            rec[4],
            rec[5],
            rec[6],
            rec[7],
            rec[8],
            tuple((n, tuple(v)) for n, v in rec[9]),
            tuple(rec[10]),
        )


@dataclass(frozen=True, slots=True)
class InstructionInfo:
    """One asin's entry of ``items_ins_v2``."""

    attributes: tuple[str, ...]
    instruction: str | None
    instruction_attributes: tuple[str, ...]


def find_file(data_dir: Path, prefix: str) -> Path:
    """The data file whose name starts with ``prefix`` (``items_shuffle`` finds
    ``items_shuffle_1000.json`` too); the shortest name wins when several match."""
    matches = sorted(data_dir.glob(f"{prefix}*.json"), key=lambda p: (len(p.name), p.name))
    if not matches:
        raise FileNotFoundError(f"No {prefix}*.json in {data_dir}")
    return matches[0]


def parse_pricing(pricing: Any, rng: random.Random) -> tuple[float, str]:
    """(price used by the reward, price shown on pages).

    ``"$19.99"`` -> 19.99 shown as ``$19.99``; ``"$10.00$20.50"`` -> a uniform draw in
    [10.0, 20.5] shown as ``$10.0 to $20.5``; missing or unreadable -> 100.0.
    """
    if not isinstance(pricing, str) or "$" not in pricing:
        return DEFAULT_PRICE, f"${DEFAULT_PRICE}"
    values: list[float] = []
    for part in pricing.split("$")[1:]:
        cleaned = _NOT_PRICE_CHARS.sub("", part)
        try:
            values.append(float(cleaned))
        except ValueError:
            continue
    if not values:
        return DEFAULT_PRICE, f"${DEFAULT_PRICE}"
    if len(values) == 1:
        return values[0], f"${values[0]}"
    low, high = values[0], values[1]
    return rng.uniform(low, high), f"${low} to ${high}"


def normalize_option_value(value: Any) -> str:
    return str(value).strip().replace("/", " | ").lower()


def parse_options(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{name: [{value: ...}, ...] | null}`` (or ``""``) -> ((name, (values...)), ...)."""
    if not isinstance(raw, dict):
        return ()
    out: list[tuple[str, tuple[str, ...]]] = []
    for name, entries in raw.items():
        if not entries:
            continue
        values: list[str] = []
        for entry in entries:
            raw_value = entry.get("value") if isinstance(entry, dict) else entry
            if raw_value is None:
                continue
            value = normalize_option_value(raw_value)
            if value and value not in values:
                values.append(value)
        if values:
            out.append((str(name).lower(), tuple(values)))
    return tuple(out)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(str(v) for v in value if v)
    return str(value)


def _as_bullets(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    return tuple(str(v) for v in value if v is not None and str(v).strip())


def read_instructions(path: Path) -> dict[str, InstructionInfo]:
    """Streams ``items_ins_v2*.json`` into an asin -> attributes/instruction table."""
    table: dict[str, InstructionInfo] = {}
    with path.open("rb") as f:
        for asin, entry in ijson.kvitems(f, "", use_float=True):
            if not isinstance(entry, dict):
                continue
            table[asin] = InstructionInfo(
                attributes=tuple(entry.get("attributes") or ()),
                instruction=entry.get("instruction") or None,
                instruction_attributes=tuple(entry.get("instruction_attributes") or ()),
            )
    return table


def iter_products(
    items_path: Path,
    instructions: dict[str, InstructionInfo],
    price_seed: int = 0,
    on_read: Callable[[int, int], None] | None = None,
) -> Iterator[tuple[Product, InstructionInfo | None]]:
    """Yields each kept product once, in file order, with its ``items_ins_v2`` entry.
    ``on_read(bytes read, file size)`` follows every 1,000 products read (the file is
    streamed: its product count is not known before the end)."""
    rng = random.Random(price_seed)
    seen: set[str] = set()
    size = items_path.stat().st_size
    with items_path.open("rb") as f:
        for number, raw in enumerate(ijson.items(f, "item", use_float=True), start=1):
            if on_read is not None and number % 1000 == 0:
                on_read(f.tell(), size)
            asin = str(raw.get("asin", ""))
            if not asin or asin == "nan" or len(asin) > MAX_ASIN_LEN or asin in seen:
                continue
            seen.add(asin)
            info = instructions.get(asin)
            price, price_text = parse_pricing(raw.get("pricing"), rng)
            product = Product(
                asin=asin,
                name=_as_text(raw.get("name")),
                description=_as_text(raw.get("full_description")),
                bullets=_as_bullets(raw.get("small_description")),
                price=price,
                price_text=price_text,
                product_category=_as_text(raw.get("product_category")),
                category=_as_text(raw.get("category")),
                query=_as_text(raw.get("query")).lower().strip(),
                options=parse_options(raw.get("customization_options")),
                attributes=info.attributes if info else (),
            )
            yield product, info


def iter_human_instructions(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Streams ``items_human_ins.json``: (asin, {instruction, instruction_attributes,
    instruction_options, ...}) for each written instruction."""
    with path.open("rb") as f:
        for asin, entries in ijson.kvitems(f, "", use_float=True):
            for entry in entries or ():
                if isinstance(entry, dict) and entry.get("instruction"):
                    yield asin, entry
