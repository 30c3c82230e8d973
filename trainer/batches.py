"""Which GRPO groups go into the next update: pure selection over group summaries.

A group is trained only when every rollout of it has finished, when its oldest LLM call
is within ``max_staleness`` versions of the current policy, and never twice. The SQL
that produces :class:`GroupSummary` rows lives in :mod:`trainer.ready_groups`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

FINISHED = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class GroupSummary:
    """What selection needs to know of one group."""

    group_id: str
    statuses: tuple[str, ...]
    """Status of each rollout of the group (queued, running, succeeded, failed, cancelled)."""
    min_policy_version: int | None
    """Oldest policy version among the group's recorded LLM calls (None: no calls)."""
    trained: bool = False
    """True once any rollout of the group was used by a train step."""

    @property
    def complete(self) -> bool:
        return all(s in FINISHED for s in self.statuses)

    @property
    def succeeded(self) -> int:
        return sum(s == "succeeded" for s in self.statuses)


@dataclass
class Selection:
    """The chosen groups and why the others were left out."""

    selected: list[GroupSummary] = field(default_factory=list)
    incomplete: int = 0
    stale: int = 0
    already_trained: int = 0
    too_few_succeeded: int = 0
    over_limit: int = 0
    staleness_histogram: dict[int, int] = field(default_factory=dict)
    """Versions behind the current policy -> number of selected groups."""
    discarded: list[GroupSummary] = field(default_factory=list)
    """Complete groups that can never be trained: stale (versions only go up, so a stale
    group stays stale) or with too few succeeded rollouts. The loop retires them."""

    def as_metrics(self) -> dict[str, float]:
        metrics = {
            f"batch/{name}": float(getattr(self, name))
            for name in ("incomplete", "stale", "already_trained", "too_few_succeeded")
        }
        metrics["batch/groups"] = float(len(self.selected))
        for behind, count in sorted(self.staleness_histogram.items()):
            metrics[f"staleness/behind_{behind}"] = float(count)
        return metrics


def staleness(group: GroupSummary, current_version: int) -> int | None:
    """How many versions behind the current policy the group's oldest call is."""
    if group.min_policy_version is None:
        return None
    return current_version - group.min_policy_version


def is_fresh(group: GroupSummary, current_version: int, max_staleness: int) -> bool:
    """Within the staleness bound: min version >= current - max_staleness."""
    behind = staleness(group, current_version)
    return behind is not None and behind <= max_staleness


def select_groups(
    groups: Iterable[GroupSummary],
    current_version: int,
    max_staleness: int,
    limit: int,
    min_succeeded: int = 2,
) -> Selection:
    """Up to ``limit`` trainable groups, in the order given (callers pass oldest first)."""
    result = Selection()
    for group in groups:
        if group.trained:
            result.already_trained += 1
        elif not group.complete:
            result.incomplete += 1
        elif group.succeeded < min_succeeded:
            result.too_few_succeeded += 1
            result.discarded.append(group)
        elif not is_fresh(group, current_version, max_staleness):
            result.stale += 1
            result.discarded.append(group)
        elif len(result.selected) >= limit:
            result.over_limit += 1
        else:
            result.selected.append(group)
    behind = Counter(staleness(g, current_version) for g in result.selected)
    result.staleness_histogram = {int(k): v for k, v in behind.items() if k is not None}
    return result
