"""Why a rollout failed: a part of the deployment, or the episode itself.

A failed rollout's ``last_error`` names its last attempt's reason. Substrings that name a
part of the deployment (env server, LLM server, policy endpoint, database, Redis, a lost
worker, a budget that ran out while waiting on one of them) make it an *infrastructure*
failure: an outage, not a score of the policy. ``wsrl eval`` and the API's stats count
those apart.
"""

from __future__ import annotations

INFRASTRUCTURE_MARKERS = (
    "env error",
    "LLMUnavailable",
    "policy endpoint",
    "lost",
    "timeout",
    "OperationalError",
    "InterfaceError",
    "Redis",
    "ConnectionError",
    "unreachable",
)


def infrastructure_reason(reason: str | None) -> bool:
    """True when ``reason`` (a rollout's ``last_error``) names a part of the deployment."""
    return reason is not None and any(marker in reason for marker in INFRASTRUCTURE_MARKERS)
