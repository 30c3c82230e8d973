"""The trainer waits out a Postgres or Redis outage instead of exiting.

Every statement the training loop runs, and every publication, goes through
:class:`OutageWait`: while the database or Redis does not answer (stopped, restarting,
unreachable), the action is retried with a backoff of 1, 2, 4 ... 30 s, one warning when
the outage begins and one line when it ends. A stop (SIGTERM) during the wait ends it with
the outage's error. Only idempotent actions may be retried this way; the step's commit is
made so (:meth:`trainer.loop.TrainLoop.train_on`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kombu.exceptions import OperationalError as BrokerDown
from redis import RedisError

from app.db.session import DATABASE_DOWN

logger = logging.getLogger(__name__)

OUTAGE = (*DATABASE_DOWN, RedisError, BrokerDown)
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 30.0
T = TypeVar("T")


class OutageWait:
    """``wait(what, action)``: ``action()``, retried through outages until ``stop`` is set."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()

    def __call__(self, what: str, action: Callable[[], T]) -> T:
        wait_s, since = FIRST_WAIT_S, None
        while True:
            try:
                result = action()
            except OUTAGE as exc:
                if since is None:
                    since = time.monotonic()
                    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
                    logger.warning("%s: %s; retrying until it answers", what, reason)
                if self.stop.wait(wait_s):
                    raise
                wait_s = min(wait_s * 2, MAX_WAIT_S)
                continue
            if since is not None:
                logger.info("%s: done after %.0f s of outage", what, time.monotonic() - since)
            return result
