"""95 % confidence intervals of evaluation scores: success rates (the trainer's eval
metrics, the dashboard, ``wsrl report``, ``wsrl policy eval``) and mean rewards."""

from __future__ import annotations

import math

Z95 = 1.96


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """95 % Wilson score interval of a success rate (sound at 0 % and 100 %)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_half_width(rate: float, n: int) -> float:
    """Half-width of the normal (binomial) 95 % interval of a success ``rate`` over ``n``
    episodes (``n`` below 1 counts as 1)."""
    return Z95 * (rate * (1 - rate) / max(n, 1)) ** 0.5


def mean_half_width(std: float, n: int) -> float:
    """Half-width of the normal 95 % interval of a mean reward with sample standard
    deviation ``std`` over ``n`` episodes (``n`` below 1 counts as 1)."""
    return Z95 * std / max(n, 1) ** 0.5
