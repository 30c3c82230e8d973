"""The read-only web dashboard: runs, rollouts and whole episodes, in a browser.

Pages are rendered on the server (Jinja2 templates, inline SVG charts, HTML forms; no
script, nothing from a CDN) from a read-only connection as the ``wsrl_readonly`` role
(:mod:`app.api.dashboard.routes`). See docs/decisions/0022-web-dashboard.md.
"""

from __future__ import annotations

import uuid

PATH = "/dashboard"


def dashboard_url(api_url: str) -> str:
    return f"{api_url.rstrip('/')}{PATH}"


def rollout_url(api_url: str, rollout_id: uuid.UUID | str) -> str:
    """The page of one rollout (a deep link to paste into an issue)."""
    return f"{dashboard_url(api_url)}/rollouts/{rollout_id}"
