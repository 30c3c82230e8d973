"""``wsrl watch``: follow every worker's episode logs live, with a running summary.

Workers publish JSON messages on the ``logs_channel`` pub/sub channel
(:mod:`workers.recording`): ``log`` lines (``[TASK]/[STEP]/[DONE]``) and lifecycle events
(``started``, ``succeeded``, ``failed``, ``superseded``). Pub/sub is fire-and-forget:
a watcher sees what is published while it listens, nothing from before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from redis import Redis


@dataclass
class Progress:
    """Counts of what the watcher has seen since it started."""

    started: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    superseded: int = 0
    rewards: list[float] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    since: float = field(default_factory=time.monotonic)

    def update(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        key = f"{message.get('rollout')}#{message.get('attempt')}"
        if kind == "started":
            self.started += 1
            self.running.add(key)
        elif kind == "succeeded":
            self.succeeded += 1
            self.rewards.append(float(message.get("reward", 0.0)))
            self.running.discard(key)
        elif kind == "failed":
            self.running.discard(key)
            if message.get("retry"):
                self.retried += 1
            else:
                self.failed += 1
        elif kind == "superseded":
            self.superseded += 1
            self.running.discard(key)

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.since, 1e-9)
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else 0.0
        solved = sum(r == 1.0 for r in self.rewards)
        return (
            f"running {len(self.running)} | succeeded {self.succeeded} "
            f"({self.succeeded / elapsed:.2f}/s) | failed {self.failed} | "
            f"retried {self.retried} | lost {self.superseded} | "
            f"mean reward {mean:.3f} | success {solved}/{len(self.rewards)}"
        )


def format_message(message: dict[str, Any]) -> str:
    """One display line: ``worker rollout#attempt text``."""
    rollout = str(message.get("rollout", "?"))[:8]
    who = f"{message.get('worker', '?')} {rollout}#{message.get('attempt')}"
    kind = message.get("kind")
    if kind == "log":
        return f"{who} {message.get('line', '')}"
    if kind == "failed":
        action = "retrying" if message.get("retry") else "giving up"
        return f"{who} [FAILED] {message.get('reason')} ({action})"
    if kind == "succeeded":
        return f"{who} [SUCCEEDED] reward {message.get('reward')} in {message.get('steps')} steps"
    return f"{who} [{str(kind).upper()}]"


def follow(redis: Redis, channel: str, *, poll_s: float = 0.5) -> Iterator[dict[str, Any] | None]:
    """Messages of ``channel`` as dicts; ``None`` every ``poll_s`` without one (to redraw)."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    try:
        while True:
            raw = pubsub.get_message(timeout=poll_s)
            if raw is None:
                yield None
                continue
            try:
                yield json.loads(raw["data"])
            except (TypeError, ValueError):
                continue
    finally:
        pubsub.close()
