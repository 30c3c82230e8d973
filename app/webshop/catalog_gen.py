"""A synthetic WebShop catalog, written in the original data files' formats.

`write_catalog` invents `num_products` products that look like WebShop's scraped store
(brands, titles, bullet points, attributes, options, prices, instructions) and writes
`items_shuffle.json`, `items_ins_v2.json` and `items_human_ins.json`, so that everything
downstream reads real WebShop data and ours the same way.

Properties the rest of the project relies on:

- Deterministic: product `i` depends only on `(seed, i)` (its own `random.Random`), so the
  same arguments give byte-identical files, and a smaller catalog is a prefix of a larger
  one with the same seed.
- Streaming: products are generated and written one at a time; memory does not grow with
  `num_products` (1M products are fine).
- Consistent: every attribute occurs in the title, the bullets or the description;
  instruction attributes are a subset of the attributes; human goals' options are values
  the product offers (lowercased, as the loader normalises them).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .catalog_data import CATEGORIES, OPTION_POOLS, Attribute, Category, ProductType
from .catalog_data import phrases as ph

logger = logging.getLogger(__name__)

DEFAULT_CATALOG: dict[str, int] = {"num_products": 2000, "seed": 0}
"""The catalog `wsrl env catalog` writes by default: small (a few MB), >= 6,000 goals."""

FILE_NAMES: dict[str, str] = {
    "items_shuffle": "items_shuffle.json",
    "items_ins_v2": "items_ins_v2.json",
    "items_human_ins": "items_human_ins.json",
}

MAX_COMBINATIONS = 24
"""Upper bound on option-value combinations per product (= synthetic goals per product)."""

# Shares of products. Instructions on 90% (the original had them on ~40%, but fewer goals
# per product), human goals on 80% of those so that even the default 2,000-product catalog
# has more than the 1,500 human goals the test and eval splits take.
INSTRUCTION_RATE = 0.9
HUMAN_GOAL_RATE = 0.8
NO_ATTRIBUTE_RATE = 0.03
NO_PRICE_RATE = 0.02
RANGE_PRICE_RATE = 0.3

_ASIN_SPACE = 36**8
_ASIN_STEP = 1_000_000_007 * 5**7  # coprime to 36**8 = 2**16 * 3**16: i -> code is a bijection
_BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_SMALL_WORDS = frozenset({"for", "with", "and", "of", "in", "on", "to", "a", "the"})
_ACRONYMS = frozenset(
    {"usb", "hdmi", "led", "uv", "spf", "rgb", "rfid", "gps", "hdr", "uhd", "ssd", "tv"}
    | {"ips", "dpi", "sd", "hd", "bpa", "msg", "gmo", "etl", "ul", "sls", "e26"}
)


@dataclass(frozen=True)
class _TypePlan:
    """A product type with everything derived once: category, path, title noun."""

    category: Category
    ptype: ProductType
    product_category: str
    title_noun: str
    generic: tuple[Attribute, ...]


def _build_plans() -> tuple[_TypePlan, ...]:
    plans = []
    for category in CATEGORIES:
        for ptype in category.types:
            path = f"{category.root} › {ptype.path}" if category.root else ptype.path
            own = {a.text for a in ptype.attributes}
            generic = tuple(a for a in category.generic_attributes if a.text not in own)
            plans.append(_TypePlan(category, ptype, path, _title_case(ptype.noun), generic))
    return tuple(plans)


@lru_cache(maxsize=8192)
def _title_case(text: str) -> str:
    """'sulfate free' -> 'Sulfate Free', 'usb c' -> 'USB C'. The lowercased result is the
    input again (unlike str.title: "men's" -> "Men'S"), so attributes stay substrings."""
    words = text.split(" ")
    out = [
        w.upper()
        if w in _ACRONYMS
        else (w if (i and w in _SMALL_WORDS) or not w else w[0].upper() + w[1:])
        for i, w in enumerate(words)
    ]
    return " ".join(out)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def make_asin(index: int, seed: int) -> str:
    """A 10-character ASIN ("B0" + 8 base-36 digits), unique for every index < 36**8."""
    code = (index * _ASIN_STEP + (seed + 1) * 0x5DEECE66D) % _ASIN_SPACE
    digits = []
    for _ in range(8):
        code, r = divmod(code, 36)
        digits.append(_BASE36[r])
    return "B0" + "".join(reversed(digits))


@dataclass
class GeneratedProduct:
    """One product's records for the three files (`human` is empty for most products)."""

    product: dict[str, Any]
    ins: dict[str, Any]
    human: list[dict[str, Any]]


class _ProductMaker:
    """Generates product `index` of catalog `seed`, independently of every other product."""

    def __init__(self) -> None:
        self.plans = _build_plans()

    def make(self, index: int, seed: int) -> GeneratedProduct:
        rng = random.Random((seed << 40) | index)
        plan = self.plans[rng.randrange(len(self.plans))]
        ptype, category = plan.ptype, plan.category
        asin = make_asin(index, seed)
        brand = rng.choice(category.brands)

        attributes = self._attributes(rng, plan)
        options = self._options(rng, ptype)
        goal_attrs: list[Attribute] = []
        if attributes and rng.random() < INSTRUCTION_RATE:
            goal_attrs = rng.sample(attributes, min(len(attributes), rng.choice((1, 2, 2, 3, 3))))

        name = self._title(rng, plan, brand, attributes, goal_attrs)
        description = self._description(rng, plan, brand, attributes)
        bullets = self._bullets(rng, plan, brand, attributes, goal_attrs)
        product = {
            "asin": asin,
            "name": name,
            "full_description": description,
            "small_description": bullets,
            "pricing": self._pricing(rng, ptype, bool(options)),
            "product_category": plan.product_category,
            "category": category.name,
            "query": rng.choice(ptype.queries),
            "customization_options": self._customization(rng, options),
            # The original's load_products reads images[0] (shown as <img src>); no pictures.
            "images": [""],
        }
        ins: dict[str, Any] = {"attributes": [a.text for a in attributes]}
        human: list[dict[str, Any]] = []
        if goal_attrs:
            ins["instruction"] = self._instruction(rng, ptype, goal_attrs)
            ins["instruction_attributes"] = [a.text for a in goal_attrs]
            if rng.random() < HUMAN_GOAL_RATE:
                human = [
                    self._human_goal(rng, asin, ptype, attributes, options)
                    for _ in range(rng.choice((1, 1, 2)))
                ]
        return GeneratedProduct(product, ins, human)

    # -- attributes and options ------------------------------------------------------

    @staticmethod
    def _attributes(rng: random.Random, plan: _TypePlan) -> list[Attribute]:
        if rng.random() < NO_ATTRIBUTE_RATE:
            return []
        own = plan.ptype.attributes
        picked = rng.sample(own, min(len(own), rng.randint(2, 4)))
        extra = rng.choice((0, 1, 1, 2))
        if extra and plan.generic:
            picked += rng.sample(plan.generic, min(extra, len(plan.generic)))
        return picked

    @staticmethod
    def _options(rng: random.Random, ptype: ProductType) -> list[tuple[str, list[str]]]:
        """0-2 option names: one with 2-5 values or two with 2-4 each, so a product has
        at most 16 combinations (<= MAX_COMBINATIONS)."""
        pools = ptype.option_pools
        roll = rng.random()
        wanted = 0 if roll < 0.1 else (1 if roll < 0.5 else 2)
        chosen: list[tuple[str, tuple[str, ...]]] = []
        for pool in rng.sample(pools, len(pools)):
            name, values = OPTION_POOLS[pool]
            if len(chosen) < wanted and all(name != n for n, _ in chosen):
                chosen.append((name, values))
        options = []
        for name, values in chosen:
            count = min(len(values), rng.randint(2, 5 if len(chosen) == 1 else 4))
            idx = sorted(rng.sample(range(len(values)), count))
            options.append((name, [values[i] for i in idx]))
        return options

    @staticmethod
    def _customization(rng: random.Random, options: list[tuple[str, list[str]]]) -> Any:
        if not options:
            return "" if rng.random() < 0.8 else None
        return {name: [{"value": v, "image": None} for v in values] for name, values in options}

    @staticmethod
    def _pricing(rng: random.Random, ptype: ProductType, has_options: bool) -> str:
        if rng.random() < NO_PRICE_RATE:
            return ""
        lo, hi = ptype.price
        base = lo * (hi / lo) ** rng.random()
        price = int(base) + rng.choice((0.99, 0.95, 0.49, 0.0, 0.97, 0.99))
        if has_options and rng.random() < RANGE_PRICE_RATE:
            upper = int(price * rng.uniform(1.15, 2.2)) + rng.choice((0.99, 0.5, 0.0))
            return f"${price:.2f}${upper:.2f}"
        return f"${price:.2f}"

    # -- text ------------------------------------------------------------------------

    @staticmethod
    def _title(
        rng: random.Random,
        plan: _TypePlan,
        brand: str,
        attributes: list[Attribute],
        goal_attrs: list[Attribute],
    ) -> str:
        """Brand + adjectives + noun + with/for details + an extra; most instruction
        attributes appear here, the way sellers stuff keywords into titles."""
        shown = [a for a in goal_attrs if rng.random() < 0.8]
        shown += [a for a in attributes if a not in goal_attrs and rng.random() < 0.4]
        adjs = [_title_case(a.text) for a in shown if a.slot == "adj"]
        withs = [_title_case(a.text) for a in shown if a.slot == "with"]
        fors = [_title_case(a.text) for a in shown if a.slot == "for"]
        parts = [brand, *adjs, plan.title_noun]
        if withs:
            parts.append("with " + " and ".join(withs))
        title = " ".join(parts)
        if fors:
            title += (", for " if rng.random() < 0.5 else " for ") + " and ".join(fors)
        if rng.random() < 0.7:
            title += rng.choice((" - ", ", ", " | ")) + rng.choice(plan.category.title_extras)
        return title

    @staticmethod
    def _description(
        rng: random.Random, plan: _TypePlan, brand: str, attributes: list[Attribute]
    ) -> str:
        noun, plural = plan.ptype.noun, plan.ptype.plural
        lead = f"The {brand} {noun} {rng.choice(plan.category.intros)}."
        sentences = [lead]
        for attr in attributes:
            template = rng.choice(ph.DESCRIPTION_BY_SLOT[attr.slot])
            sentence = template.format(
                a=attr.text,
                A_cap=attr.text[0].upper() + attr.text[1:],
                noun=noun,
                plural=plural,
            )
            sentences.append(sentence[0].upper() + sentence[1:])
        sentences += rng.sample(plan.category.closings, rng.randint(1, 2))
        return " ".join(sentences)

    @staticmethod
    def _bullets(
        rng: random.Random,
        plan: _TypePlan,
        brand: str,
        attributes: list[Attribute],
        goal_attrs: list[Attribute],
    ) -> list[str]:
        """3-6 bullet points: one per (some) attribute, then generic selling points."""
        noun = plan.ptype.noun
        featured = [a for a in attributes if a in goal_attrs or rng.random() < 0.5]
        bullets = []
        for attr in featured[:5]:
            template = rng.choice(ph.BULLET_BY_SLOT[attr.slot])
            bullets.append(template.format(A=attr.text.upper(), a=attr.text, noun=noun))
        generic = rng.sample(ph.GENERIC_BULLETS, max(0, rng.randint(3, 6) - len(bullets)))
        intro = rng.choice(plan.category.intros)
        bullets += [
            g.format(noun=noun, brand=brand, BRAND=brand.upper(), intro=intro) for g in generic
        ]
        return bullets

    @staticmethod
    def _phrase_parts(goal_attrs: list[Attribute]) -> tuple[list[str], str]:
        adjs = [a.text for a in goal_attrs if a.slot == "adj"]
        withs = [a.text for a in goal_attrs if a.slot == "with"]
        fors = [a.text for a in goal_attrs if a.slot == "for"]
        tail = (" with " + " and ".join(withs) if withs else "") + (
            " for " + " and ".join(fors) if fors else ""
        )
        return adjs, tail

    def _instruction(
        self, rng: random.Random, ptype: ProductType, goal_attrs: list[Attribute]
    ) -> str:
        """A lowercase request naming the product noun and every instruction attribute."""
        adjs, tail = self._phrase_parts(goal_attrs)
        mass_noun = ptype.plural == ptype.noun
        roll = rng.random()
        if adjs and roll < 0.2 and not mass_noun:
            template = rng.choice(ph.INSTRUCTION_THAT_IS)
            return template.format(
                an=_article(ptype.noun), noun=ptype.noun, adjs=" and ".join(adjs), tail=tail
            )
        if roll < 0.45 or mass_noun:
            head = (", ".join(adjs) + " " if adjs else "") + ptype.plural
            return rng.choice(ph.INSTRUCTION_PLURAL).format(head=head, tail=tail)
        head = (", ".join(adjs) + " " if adjs else "") + ptype.noun
        return rng.choice(ph.INSTRUCTION_SINGULAR).format(an=_article(head), head=head, tail=tail)

    def _human_goal(
        self,
        rng: random.Random,
        asin: str,
        ptype: ProductType,
        attributes: list[Attribute],
        options: list[tuple[str, list[str]]],
    ) -> dict[str, Any]:
        """A human-style goal: fewer attributes, options named in words (values lowercased
        exactly as the loader normalises them, so they compare equal)."""
        goal_attrs = rng.sample(attributes, min(len(attributes), rng.choice((1, 1, 2, 3))))
        adjs, tail = self._phrase_parts(goal_attrs)
        head = (" ".join(adjs) + " " if adjs else "") + ptype.noun
        article = "some" if ptype.plural == ptype.noun else _article(head)
        text = f"{rng.choice(ph.HUMAN_OPENERS)} {article} {head}{tail}"
        picked: list[str] = []
        phrases = []
        for name, values in rng.sample(options, rng.randint(min(1, len(options)), len(options))):
            value = rng.choice(values).strip().lower()
            picked.append(value)
            templates = ph.OPTION_PHRASES.get(name, ph.OPTION_PHRASES["*"])
            label = ph.OPTION_LABELS.get(name, name)
            phrases.append(rng.choice(templates).format(v=value, label=label))
        if phrases:
            text += " " + " and ".join(phrases)
        return {
            "asin": asin,
            "instruction": text,
            "instruction_attributes": [a.text for a in goal_attrs],
            "instruction_options": picked,
        }


class _JsonStreamWriter:
    """Writes a JSON list or object one element at a time, one element per line."""

    def __init__(self, fh: BinaryIO, brackets: bytes) -> None:
        self.fh, self.close_bracket, self.first = fh, brackets[1:], True
        fh.write(brackets[:1])

    def _separate(self) -> None:
        self.fh.write(b"\n" if self.first else b",\n")
        self.first = False

    def item(self, value: Any) -> None:
        self._separate()
        self.fh.write(orjson.dumps(value))

    def entry(self, key: str, value: Any) -> None:
        self._separate()
        self.fh.write(orjson.dumps(key) + b": " + orjson.dumps(value))

    def close(self) -> None:
        self.fh.write((b"" if self.first else b"\n") + self.close_bracket + b"\n")


def iter_products(num_products: int, seed: int = 0) -> Iterator[GeneratedProduct]:
    """Yields the catalog's products in order, without writing anything."""
    maker = _ProductMaker()
    for index in range(num_products):
        yield maker.make(index, seed)


PROGRESS_EVERY = 1000  # products between two progress calls


def write_catalog(
    out_dir: Path,
    num_products: int,
    seed: int = 0,
    human_goals: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Path]:
    """Writes items_shuffle.json, items_ins_v2.json and (if `human_goals`)
    items_human_ins.json into `out_dir`; returns {file kind: path}. ``progress(written,
    num_products)`` is called at the start, every 1,000 products and at the end.

    Deterministic per (num_products, seed): same arguments, byte-identical files. Files
    are written under a temporary name of this writer's own and renamed at the end, so
    an interrupted run never leaves a half-written catalog and two writers of the same
    folder at once (each renaming identical files into place) do not collide. Without
    human goals, a stale items_human_ins.json in `out_dir` is removed so it cannot be
    mistaken for this catalog's.
    """
    if isinstance(num_products, bool) or not isinstance(num_products, int) or num_products < 1:
        raise ValueError(f"num_products must be a positive integer, got {num_products!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**24:
        raise ValueError(f"seed must be an integer in [0, 2**24), got {seed!r}")
    if num_products >= 2**40:
        raise ValueError("num_products must be below 2**40 (product seeds and ASINs stay unique)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    kinds = ["items_shuffle", "items_ins_v2"] + (["items_human_ins"] if human_goals else [])
    paths = {kind: out_dir / FILE_NAMES[kind] for kind in kinds}
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = {kind: path.with_name(f".{path.name}.{tag}.tmp") for kind, path in paths.items()}

    started = time.perf_counter()
    handles = {kind: open(tmp[kind], "wb", buffering=1 << 20) for kind in kinds}  # noqa: SIM115
    try:
        products = _JsonStreamWriter(handles["items_shuffle"], b"[]")
        ins = _JsonStreamWriter(handles["items_ins_v2"], b"{}")
        human = _JsonStreamWriter(handles["items_human_ins"], b"{}") if human_goals else None
        if progress is not None:
            progress(0, num_products)
        for written, generated in enumerate(iter_products(num_products, seed), start=1):
            asin = generated.product["asin"]
            products.item(generated.product)
            ins.entry(asin, generated.ins)
            if human is not None and generated.human:
                human.entry(asin, generated.human)
            if progress is not None and written % PROGRESS_EVERY == 0:
                progress(written, num_products)
        for writer in (products, ins, human):
            if writer is not None:
                writer.close()
    except BaseException:
        for kind in kinds:
            handles[kind].close()
            tmp[kind].unlink(missing_ok=True)
        raise
    for kind in kinds:
        handles[kind].close()
        os.replace(tmp[kind], paths[kind])
    if progress is not None:
        progress(num_products, num_products)
    if not human_goals:
        (out_dir / FILE_NAMES["items_human_ins"]).unlink(missing_ok=True)
    logger.info(
        "wrote %d products (seed %d) to %s in %.1f s",
        num_products,
        seed,
        out_dir,
        time.perf_counter() - started,
    )
    return paths
