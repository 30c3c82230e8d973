"""The one logging setup of the project: plain, greppable lines on stderr."""

from __future__ import annotations

import logging
import os

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: int | str | None = None, *, replace: bool = False) -> None:
    """Configure the root logger once; repeated calls only change the level.

    ``replace``: put our handler in place of the root's, for a process in which a library
    configured the root logger first. verl does at import (its own format, no logger
    names), and Ray's actors import it before they run our code.
    """
    resolved = level or os.environ.get("WSRL_LOG_LEVEL", "INFO")
    root = logging.getLogger()
    if replace or not root.handlers:
        logging.basicConfig(level=resolved, format=LOG_FORMAT, force=True)
    else:
        root.setLevel(resolved)
    # vLLM's API server imports model_hosting_container_standards, which on import sets the
    # root logger and its handlers to SAGEMAKER_CONTAINER_LOG_LEVEL (ERROR when unset). In
    # verl's task runner, which imports vLLM while it builds the workers, every line of the
    # trainer below ERROR was lost from then on (seen on a GPU). Our level, named there first,
    # is what it sets; the processes this one starts (Ray's actors) inherit it.
    os.environ.setdefault("SAGEMAKER_CONTAINER_LOG_LEVEL", logging.getLevelName(root.level))
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
