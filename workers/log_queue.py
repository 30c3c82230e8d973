"""Publishes a worker process's log messages from one background thread, in pipelines.

An episode publishes about 14 messages (``started``, one line per step, ``succeeded``).
Sent one by one from the episode's thread, each is a Redis round trip with its pool
checkout, two system calls and a reply to parse, on the episode's critical path. Here the
episode's thread only appends to a deque; a single thread wakes on the first message,
waits ``gather_s`` for more and sends everything pending as one pipeline, in order. The
busier the process, the larger the batches. Watchers see lines ``gather_s`` later.

Best effort like the direct publish it replaces: a Redis error drops that batch (logged
at debug level), and at most ``max_pending`` messages wait (older ones are dropped first).

A channel nobody listens to is not published to: PUBLISH answers how many subscribers
(pattern subscribers included) received each message, and when a batch on a channel
reached none, that channel's messages are dropped before they are built
(:meth:`PublishQueue.wanted`) for ``unheard_s``; then the next batch asks again. Pub/sub
keeps no history, so a message nobody hears is lost either way; the only difference is a
watcher that subscribes sees lines from at most ``unheard_s`` later. At 32 concurrent
episodes without a watcher this was 16 PUBLISH per episode and about a tenth of a worker's
CPU (docs/benchmarks.md).
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

    def __init__(
        self,
        redis: Redis,
        *,
        gather_s: float = 0.01,
        max_pending: int = 10_000,
        unheard_s: float = 1.0,
    ) -> None:
        self._redis = redis
        self._gather_s = gather_s
        self._unheard_s = unheard_s
        # channel -> until when (monotonic) its messages are dropped: nobody heard the last batch
        self._unheard_until: dict[str, float] = {}
        self._pending: deque[tuple[str, bytes]] = deque(maxlen=max_pending)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="wsrl-log-publisher", daemon=True)
        self._thread.start()

    def wanted(self, channel: str) -> bool:
        """Whether a message on ``channel`` may reach someone (cheap; no round trip)."""
        return time.monotonic() >= self._unheard_until.get(channel, float("-inf"))

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
            receivers = pipe.execute()
        except RedisError as exc:
            logger.debug("could not publish %d log messages: %s", len(batch), exc)
            return
        heard: dict[str, bool] = {}
        for (channel, _), count in zip(batch, receivers, strict=True):
            heard[channel] = heard.get(channel, False) or bool(count)
        now = time.monotonic()
        for channel, anyone in heard.items():
            if anyone:
                self._unheard_until.pop(channel, None)
            else:
                self._unheard_until[channel] = now + self._unheard_s
