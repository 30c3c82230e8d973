"""Publishes a worker process's log messages from one background thread, in pipelines.

An episode publishes about 14 messages (``started``, one line per step, ``succeeded``).
Sent one by one from the episode's thread, each is a Redis round trip with its pool
checkout, two system calls and a reply to parse, on the episode's critical path. Here the
episode's thread only appends to a deque; a single thread wakes on the first message,
waits ``gather_s`` for more and sends everything pending as one pipeline, in order. The
busier the process, the larger the batches. Watchers see lines ``gather_s`` later.

Best effort like the direct publish it replaces: a Redis error drops that batch (logged
at debug level), and at most ``max_pending`` messages wait (older ones are dropped first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from redis import Redis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


class PublishQueue:
    """A per-process sender of pub/sub messages; ``close`` sends what is left."""

    def __init__(self, redis: Redis, *, gather_s: float = 0.01, max_pending: int = 10_000) -> None:
        self._redis = redis
        self._gather_s = gather_s
        self._pending: deque[tuple[str, bytes]] = deque(maxlen=max_pending)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="wsrl-log-publisher", daemon=True)
        self._thread.start()

    def put(self, channel: str, payload: bytes) -> None:
        """Queue one message (never blocks, never raises)."""
        self._pending.append((channel, payload))
        self._wake.set()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if not self._stop:
                time.sleep(self._gather_s)
            batch = []
            while self._pending:
                batch.append(self._pending.popleft())
            if batch:
                self._send(batch)
            if self._stop and not self._pending:
                return

    def _send(self, batch: list[tuple[str, bytes]]) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            for channel, payload in batch:
                pipe.publish(channel, payload)
            pipe.execute()
        except RedisError as exc:
            logger.debug("could not publish %d log messages: %s", len(batch), exc)
