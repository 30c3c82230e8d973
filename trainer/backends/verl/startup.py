"""Where the verl trainer's start-up goes: the parts of verl's ``init_workers`` timed.

Between Ray's start and vLLM's launch the first GPU runs spent about 120 s on a 2 M
model. :func:`timed_calls` wraps the calls of ``init_workers`` that start whole groups of
processes (the reward loop's workers, the vLLM servers, the agent loop's workers) while it
runs, and :func:`startup_lines` says what each took; the rest is verl's worker processes
and the actor's model. Imports nothing of verl: the trainer passes the classes in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimedCall:
    label: str
    began_s: float
    """Seconds from the start of the timed block."""
    took_s: float


@contextmanager
def timed_calls(targets: Sequence[tuple[Any, str, str]]) -> Iterator[list[TimedCall]]:
    """While the block runs, each ``(owner, name, label)``'s ``owner.name`` is timed: every
    call is logged and appended to the list the block gets. Restored afterwards, as it was
    (a classmethod stays one)."""
    calls: list[TimedCall] = []
    started = time.perf_counter()
    saved: list[tuple[Any, str, Any]] = []
    for owner, name, label in targets:
        saved.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, _timed(getattr(owner, name), label, started, calls))
    try:
        yield calls
    finally:
        for owner, name, raw in reversed(saved):
            if raw is None:
                delattr(owner, name)
            else:
                setattr(owner, name, raw)


def _timed(call: Any, label: str, started: float, calls: list[TimedCall]) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            done = TimedCall(label, began - started, time.perf_counter() - began)
            calls.append(done)
            logger.info("start-up: %s took %.1f s", label, done.took_s)

    return timed


def startup_lines(calls: Sequence[TimedCall], total_s: float) -> str:
    """One line: the block's seconds, what each timed call took, and the rest (before the
    first of them: verl's worker processes and the actor's model)."""
    first = min((c.began_s for c in calls), default=total_s)
    parts = [f"worker processes and the actor's model {first:.1f} s"]
    parts += [f"{c.label} {c.took_s:.1f} s" for c in sorted(calls, key=lambda c: c.began_s)]
    rest = total_s - first - sum(c.took_s for c in calls)
    parts.append(f"the rest {max(rest, 0.0):.1f} s")
    return f"verl's workers started in {total_s:.1f} s: " + ", ".join(parts)
