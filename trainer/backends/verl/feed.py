"""What the verl trainer needs from the rest of the pipeline, as a protocol.

The verl backend does not query Postgres or Celery itself: the same selection the local
backend uses (complete groups, staleness bound, never twice) lives with the trainer loop.
A feed hands over finished groups as :class:`~trainer.samples.RolloutRecord` lists, so
verl trains on exactly the token ids the workers recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainer.samples import RolloutRecord


@dataclass(frozen=True)
class ReadyBatch:
    """Complete groups chosen for one update, with why others were left out."""

    rollouts: Sequence[RolloutRecord]
    metrics: dict[str, float]


class RolloutFeed(Protocol):
    """Enqueues GRPO groups and returns them once complete (Postgres decides what is done)."""

    def resume(self, checkpoint_version: int | None) -> tuple[int, int]:
        """(last committed step, version to serve loaded weights as), from Postgres."""
        ...

    def request_groups(self, groups: int, group_size: int, split: str) -> None:
        """Enqueue ``groups`` new goals with ``group_size`` rollouts each."""
        ...

    def ready(
        self, current_version: int, max_staleness: int, groups: int, min_succeeded: int
    ) -> ReadyBatch:
        """Up to ``groups`` complete, fresh, untrained groups (possibly none yet)."""
        ...

    def record_step(
        self, step: int, version: int, rollout_ids: Sequence[str], metrics: dict[str, float]
    ) -> None:
        """Store a train step: marks its rollouts trained and keeps its metrics."""
        ...
