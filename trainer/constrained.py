"""Constrained decoding: a reply limited to a regular expression, as a mask over the vocabulary.

A request's ``structured_outputs`` (vLLM's field: ``{"regex": ...}`` or ``{"choice":
[...]}``) becomes a :class:`Pattern` (a small Thompson NFA over characters); with a
:class:`TokenIndex` (the tokenizer's tokens as a trie of their decoded text) it gives, at
each step of a reply, the ids of the tokens that keep the text a prefix of a match, plus
the end-of-turn token once the text is a whole match. The policy server samples from the
logits with every other token at ``-inf`` and records the log-probability renormalised
over the allowed tokens; the trainer replays the same states along the recorded tokens
(:func:`allowed_rows`) and renormalises its own logits the same way, so the importance
ratio compares like with like.

The regex subset: literal characters, ``\\`` escapes, ``.``, classes ``[...]`` and
``[^...]`` (with ranges), groups ``(...)`` / ``(?:...)``, ``|`` and the quantifiers
``*``, ``+`` and ``?``; anything else is a :class:`ConstraintError`. That covers what
:func:`app.core.agent.action_structured_outputs` builds and ``re.escape`` writes.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch


class ConstraintError(ValueError):
    """A ``structured_outputs`` value this server cannot honour (the reason says why)."""


# --- regex -> NFA --------------------------------------------------------------------------


@dataclass(frozen=True)
class _CharSet:
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...] = ()
    negated: bool = False

    def __contains__(self, c: str) -> bool:
        inside = c in self.chars or any(lo <= c <= hi for lo, hi in self.ranges)
        return inside != self.negated


_ANY = _CharSet(frozenset("\n"), negated=True)


@dataclass
class _Nfa:
    # edges[state] = [(charset or None for epsilon, target)]
    edges: list[list[tuple[_CharSet | None, int]]] = field(default_factory=list)

    def new(self) -> int:
        self.edges.append([])
        return len(self.edges) - 1


class _Parser:
    def __init__(self, source: str, nfa: _Nfa) -> None:
        self.s, self.i, self.nfa = source, 0, nfa

    def peek(self) -> str | None:
        return self.s[self.i] if self.i < len(self.s) else None

    def take(self) -> str:
        if self.i >= len(self.s):
            raise ConstraintError(f"regex ends early: {self.s!r}")
        self.i += 1
        return self.s[self.i - 1]

    def alternation(self) -> tuple[int, int]:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.take()
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        start, end = self.nfa.new(), self.nfa.new()
        for b_start, b_end in branches:
            self.nfa.edges[start].append((None, b_start))
            self.nfa.edges[b_end].append((None, end))
        return start, end

    def sequence(self) -> tuple[int, int]:
        start = end = self.nfa.new()
        while self.peek() not in (None, "|", ")"):
            a_start, a_end = self.quantified()
            self.nfa.edges[end].append((None, a_start))
            end = a_end
        return start, end

    def quantified(self) -> tuple[int, int]:
        start, end = self.atom()
        quantifier = self.peek()
        if quantifier not in ("*", "+", "?"):
            return start, end
        self.take()
        if self.peek() in ("*", "+", "?", "{"):
            raise ConstraintError(f"unsupported quantifier at {self.i} in {self.s!r}")
        outer_start, outer_end = self.nfa.new(), self.nfa.new()
        self.nfa.edges[outer_start].append((None, start))
        self.nfa.edges[end].append((None, outer_end))
        if quantifier in ("*", "?"):
            self.nfa.edges[outer_start].append((None, outer_end))
        if quantifier in ("*", "+"):
            self.nfa.edges[end].append((None, start))
        return outer_start, outer_end

    def atom(self) -> tuple[int, int]:
        c = self.take()
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise ConstraintError(f"unsupported group at {self.i} in {self.s!r}")
            inner = self.alternation()
            if self.take() != ")":
                raise ConstraintError(f"unbalanced group in {self.s!r}")
            return inner
        if c == "[":
            return self.edge(self.char_class())
        if c == ".":
            return self.edge(_ANY)
        if c == "\\":
            return self.edge(_CharSet(frozenset(self.escaped())))
        if c in "*+?{})^$":
            raise ConstraintError(f"unsupported {c!r} at {self.i - 1} in {self.s!r}")
        return self.edge(_CharSet(frozenset(c)))

    def escaped(self) -> str:
        c = self.take()
        if c.isalnum() and c not in "nt":
            raise ConstraintError(f"unsupported escape \\{c} in {self.s!r}")
        return {"n": "\n", "t": "\t"}.get(c, c)

    def char_class(self) -> _CharSet:
        negated = self.peek() == "^"
        if negated:
            self.take()
        chars: set[str] = set()
        ranges: list[tuple[str, str]] = []
        first = True
        while True:
            c = self.take()
            if c == "]" and not first:
                break
            first = False
            c = self.escaped() if c == "\\" else c
            if self.peek() == "-" and self.s[self.i + 1 : self.i + 2] not in ("]", ""):
                self.take()
                hi = self.take()
                ranges.append((c, self.escaped() if hi == "\\" else hi))
            else:
                chars.add(c)
        return _CharSet(frozenset(chars), tuple(ranges), negated)

    def edge(self, charset: _CharSet) -> tuple[int, int]:
        start, end = self.nfa.new(), self.nfa.new()
        self.nfa.edges[start].append((charset, end))
        return start, end


State = frozenset[int]


class Pattern:
    """A compiled regex: sets of NFA states, stepped one character at a time (memoised)."""

    def __init__(self, regex: str) -> None:
        self.regex = regex
        self._nfa = _Nfa()
        parser = _Parser(regex, self._nfa)
        first, self._accept = parser.alternation()
        if parser.i != len(regex):
            raise ConstraintError(f"unbalanced ')' at {parser.i} in {regex!r}")
        self.start = self._closure({first})
        self._steps: dict[tuple[State, str], State] = {}

    def _closure(self, states: set[int]) -> State:
        stack, seen = list(states), set(states)
        while stack:
            for charset, target in self._nfa.edges[stack.pop()]:
                if charset is None and target not in seen:
                    seen.add(target)
                    stack.append(target)
        return frozenset(seen)

    def step(self, state: State, c: str) -> State:
        key = (state, c)
        found = self._steps.get(key)
        if found is None:
            moved = {t for s in state for cs, t in self._nfa.edges[s] if cs is not None and c in cs}
            found = self._steps[key] = self._closure(moved) if moved else frozenset()
        return found

    def walk(self, state: State, text: str) -> State:
        for c in text:
            state = self.step(state, c)
            if not state:
                break
        return state

    def accepts(self, state: State) -> bool:
        return self._accept in state

    def matches(self, text: str) -> bool:
        return self.accepts(self.walk(self.start, text))


def regex_of(structured_outputs: dict[str, Any]) -> str:
    """The regex of a ``structured_outputs`` value: ``regex`` as is, ``choice`` as the
    alternation of its escaped strings."""
    if not isinstance(structured_outputs, dict):
        raise ConstraintError("structured_outputs must be an object")
    if isinstance(structured_outputs.get("regex"), str):
        return structured_outputs["regex"]
    choice = structured_outputs.get("choice")
    if isinstance(choice, list) and choice and all(isinstance(c, str) for c in choice):
        return "(?:" + "|".join(re.escape(c) for c in choice) + ")"
    raise ConstraintError(
        "structured_outputs: this server honours {'regex': str} or {'choice': [str, ...]}"
    )


@lru_cache(maxsize=256)
def compile_pattern(regex: str) -> Pattern:
    """A compiled :class:`Pattern`, shared between requests with the same regex."""
    return Pattern(regex)


# --- the vocabulary as a trie ----------------------------------------------------------------


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)


class TokenIndex:
    """A tokenizer's tokens as a trie of their decoded text, and its end-of-turn ids.

    Special tokens and tokens that decode to no text or to a broken UTF-8 piece are left
    out (never allowed inside a constrained reply); ``eos_ids`` are allowed once the text
    is a whole match.
    """

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int]) -> None:
        self.eos_ids = sorted(set(eos_ids))
        # the allowed ids of a pattern's state are this vocabulary's: cached here, never on
        # the pattern, which processes share between tokenizers (compile_pattern's cache)
        self._allowed: weakref.WeakKeyDictionary[Pattern, dict[State, list[int]]] = (
            weakref.WeakKeyDictionary()
        )
        self.text: dict[int, str] = {}
        self.root = _Node()
        special = set(getattr(tokenizer, "all_special_ids", []))
        for token_id in range(len(tokenizer)):
            if token_id in special:
                continue
            text = tokenizer.decode([token_id])
            if not text or "\ufffd" in text:
                continue
            self.text[token_id] = text
            node = self.root
            for c in text:
                node = node.children.setdefault(c, _Node())
            node.ids.append(token_id)

    def allowed(self, pattern: Pattern, state: State) -> list[int]:
        """Token ids that keep the reply a prefix of a match from ``state`` (the end of turn
        too when ``state`` accepts; only the end of turn when nothing else can follow)."""
        cache = self._allowed.setdefault(pattern, {})
        cached = cache.get(state)
        if cached is not None:
            return cached
        ids: list[int] = list(self.eos_ids) if pattern.accepts(state) else []
        stack = [(self.root, state)]
        while stack:
            node, at = stack.pop()
            for c, child in node.children.items():
                after = pattern.step(at, c)
                if after:
                    ids.extend(child.ids)
                    if child.children:
                        stack.append((child, after))
        ids = sorted(ids) if ids else list(self.eos_ids)
        cache[state] = ids
        return ids


_INDEXES: dict[int, tuple[Any, TokenIndex]] = {}


def token_index(tokenizer: Any, eos_ids: Sequence[int]) -> TokenIndex:
    """The :class:`TokenIndex` of ``tokenizer`` (built once per tokenizer object: about a
    second for the tiny policy's 12,000 tokens)."""
    key = id(tokenizer)
    found = _INDEXES.get(key)
    if found is None or found[0] is not tokenizer:
        found = _INDEXES[key] = (tokenizer, TokenIndex(tokenizer, eos_ids))
    return found[1]


class TokenConstraint:
    """One reply being decoded under a pattern: what may come next, and the state so far."""

    def __init__(self, pattern: Pattern, index: TokenIndex) -> None:
        self.pattern, self.index = pattern, index
        self.state = pattern.start

    def allowed(self) -> list[int]:
        return self.index.allowed(self.pattern, self.state)

    def advance(self, token_id: int) -> None:
        text = self.index.text.get(token_id)
        self.state = self.pattern.walk(self.state, text) if text is not None else frozenset()


def vocab_mask(allowed: Sequence[int], vocab: int) -> torch.Tensor:
    """(V,) bool: True at ``allowed``."""
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[torch.tensor(list(allowed), dtype=torch.long)] = True
    return mask


def allowed_rows(
    structured_outputs: dict[str, Any], response_ids: Sequence[int], index: TokenIndex
) -> list[list[int]]:
    """The allowed ids before each token of a recorded reply (the server's masks, replayed)."""
    constraint = TokenConstraint(compile_pattern(regex_of(structured_outputs)), index)
    rows = []
    for token in response_ids:
        rows.append(constraint.allowed())
        constraint.advance(token)
    return rows


def masked_log_softmax(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """log_softmax over the allowed entries only (others -inf). logits, allowed: (..., V)."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.log_softmax(logits.float(), dim=-1)
