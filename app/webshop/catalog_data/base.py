"""The building blocks of the catalog vocabulary: product types, attributes, categories.

A product type is everything the generator needs to invent believable products of one
kind (a shampoo, a coffee table): where it sits in the store, how shoppers search for it,
which attributes it can have and which option lists (colour, size, ...) it can offer.
Types are written compactly (`T(...)`) and parsed once at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Slot = Literal["adj", "with", "for"]


@dataclass(frozen=True)
class Attribute:
    """An attribute phrase ("sulfate free") and where it reads naturally in a sentence:
    before the noun ("adj"), after "with", or after "for" ("for dry hair")."""

    text: str
    slot: Slot


@dataclass(frozen=True)
class ProductType:
    """One kind of product; `path` is the product category below the category's root."""

    path: str
    noun: str
    plural: str
    queries: tuple[str, ...]
    attributes: tuple[Attribute, ...]
    option_pools: tuple[str, ...]
    price: tuple[float, float]


@dataclass(frozen=True)
class Category:
    """A WebShop category with its store root, brands and shared wording."""

    name: str
    root: str
    brands: tuple[str, ...]
    generic_attributes: tuple[Attribute, ...]
    title_extras: tuple[str, ...]
    intros: tuple[str, ...]
    closings: tuple[str, ...]
    types: tuple[ProductType, ...]


def parse_attribute(phrase: str) -> Attribute:
    """`"for dry hair"` -> ("dry hair", for); `"with argan oil"` -> ("argan oil", with)."""
    for slot in ("for", "with"):
        if phrase.startswith(slot + " "):
            return Attribute(phrase[len(slot) + 1 :], slot)  # type: ignore[arg-type]
    return Attribute(phrase, "adj")


def plural_of(noun: str) -> str:
    """English plural of the last word, good enough for product nouns."""
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def T(
    path: str,
    noun: str,
    q: str,
    a: str,
    o: str,
    price: tuple[float, float],
    plural: str | None = None,
) -> ProductType:
    """Builds a type from the compact form: `|`-separated queries and attributes,
    space-separated option pool names (see `options.OPTION_POOLS`)."""
    return ProductType(
        path=path,
        noun=noun,
        plural=plural or plural_of(noun),
        queries=tuple(q.split("|")),
        attributes=tuple(parse_attribute(p) for p in a.split("|")),
        option_pools=tuple(o.split()),
        price=price,
    )


def split(text: str) -> tuple[str, ...]:
    """`"a|b|c"` -> ("a", "b", "c"): lets long word lists stay compact and readable."""
    return tuple(text.split("|"))


def attrs(text: str) -> tuple[Attribute, ...]:
    """Parses a `|`-separated attribute list (see `parse_attribute`)."""
    return tuple(parse_attribute(p) for p in text.split("|"))
