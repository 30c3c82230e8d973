"""The faults ``wsrl chaos`` injects, and the seeded order it picks them in.

Each kind names its target: a process the operator's supervisor restarts after
:data:`RESTART_S` (``kill -9`` of its process group first), a service restarted in place,
or a worker host's link. One fault per target at a time; the others go on meanwhile.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

RESTART_S = 3.0
CUT_S = 60.0
SLOW_S = 120.0

KILLS = ("worker", "env", "trainer", "api", "reconciler")
"""``kill -9``, then started again as it was. The local trainer serves the policy in its own
process: killing it kills the policy server too."""
KINDS = (*KILLS, "redis_restart", "redis_flush", "postgres_restart", "link_cut", "link_slow")
ON_A_HOST = ("worker", "link_cut", "link_slow")
ONCE = ("redis_flush",)


@dataclass
class Fault:
    """One injected fault: when it began and when its target was back (UTC), and the
    seconds from then until the pipeline made progress again (:mod:`app.chaos.report`)."""

    kind: str
    target: str
    began: datetime
    ended: datetime | None = None
    recovered_s: float | None = None
    notes: list[str] = field(default_factory=list)


def target_of(kind: str, host: str | None) -> str:
    if kind in ON_A_HOST:
        assert host is not None
        return host
    return {"redis_restart": "redis", "redis_flush": "redis", "postgres_restart": "postgres"}.get(
        kind, kind
    )


class Schedule:
    """Seeded choices: every kind once first (shuffled), then any kind but the ``ONCE``
    ones; a host for those on a host; a wait of ``every`` seconds (low, high) between."""

    def __init__(self, seed: int, hosts: Sequence[str], every: tuple[float, float]) -> None:
        self.random = random.Random(seed)
        self.hosts = list(hosts)
        self.every = every
        self.first = list(KINDS)
        self.random.shuffle(self.first)

    def wait_s(self) -> float:
        return self.random.uniform(*self.every)

    def next(self, busy: Iterable[str]) -> tuple[str, str] | None:
        """``(kind, target)`` of the next fault whose target is not ``busy``; None: all are."""
        busy = set(busy)
        free_hosts = [h for h in self.hosts if h not in busy]
        for position, kind in enumerate(self.first):
            target = self._target(kind, free_hosts, busy)
            if target is not None:
                del self.first[position]
                return kind, target
        if self.first:
            return None
        kinds = [k for k in KINDS if k not in ONCE]
        self.random.shuffle(kinds)
        for kind in kinds:
            target = self._target(kind, free_hosts, busy)
            if target is not None:
                return kind, target
        return None

    def _target(self, kind: str, free_hosts: list[str], busy: set[str]) -> str | None:
        if kind in ON_A_HOST:
            return self.random.choice(free_hosts) if free_hosts else None
        target = target_of(kind, None)
        return None if target in busy else target
