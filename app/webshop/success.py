"""Success, as WebShop defines it: an episode that earned the full reward, 1.0.

WebShop reports the score (100 x mean reward) and the success rate (the share of
successes) side by side (docs/webshop.md). This is the only place that says what a success
is: the rollout row's ``success`` column is written from :func:`is_success`
(``workers/persistence.py``), and the SQL of the dashboard and the reports reads that
column.
"""

from __future__ import annotations

from collections.abc import Sequence

FULL_REWARD = 1.0


def is_success(reward: float | None) -> bool:
    """Whether an episode with ``reward`` succeeded (None, no reward: no)."""
    return reward == FULL_REWARD


def success_rate(rewards: Sequence[float | None]) -> float:
    """The share of successes among ``rewards`` (0.0 when there are none)."""
    return sum(map(is_success, rewards)) / len(rewards) if rewards else 0.0
