"""The one logging setup of the project: plain, greppable lines on stderr."""

from __future__ import annotations

import logging
import os

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: int | str | None = None) -> None:
    """Configure the root logger once; repeated calls only change the level."""
    resolved = level or os.environ.get("WSRL_LOG_LEVEL", "INFO")
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=resolved, format=LOG_FORMAT)
    else:
        root.setLevel(resolved)
    noisy_loggers = (
        "httpx",
        "httpx2",
        "httpcore",
        "urllib3",
        "openai._base_client",
        "alembic.runtime.plugins",
    )
    for noisy in noisy_loggers:
        logging.getLogger(noisy).setLevel(logging.WARNING)
