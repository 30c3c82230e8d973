"""The published policy endpoint as the gateway reads it: kept current by announcements.

The trainer writes the endpoint record to :data:`~app.core.endpoint.ENDPOINT_KEY` and
announces it on :data:`~app.core.endpoint.ENDPOINT_CHANNEL`
(:func:`~app.core.endpoint.publish_endpoint`; :func:`~app.core.endpoint.withdraw_endpoint`
announces an empty record). A GET per call was 0.20 ms of the gateway's ~1 ms of its
own per call (measured on ``gateway_external.py``: Redis 0.20 ms, the call's insert
0.59 ms, parsing 0.07 ms), so the gateway subscribes to the announcements instead (a
listener task on the event loop) and reads the key again only when one came.

"From the next call on" still holds in practice: Redis sends an announcement to its
subscribers before it answers the publisher, so the event loop has it before any request
that follows the publication. A call racing the publication uses the previous record, as
it could with a GET just before the publication. Two safety nets cover what announcements
cannot:

- the key is read again (one GET) when the record is older than ``max_age_s``: a key
  written or deleted without an announcement (a flushed Redis, a hand-made ``SET``) is
  seen within that time;
- a subscription that breaks ends its listener, and the next call subscribes again and
  reads the key: a Redis restart costs a round trip or two, never a stale endpoint (and
  while Redis is down, calls fail as they did with a GET per call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from app.core.endpoint import ENDPOINT_CHANNEL, ENDPOINT_KEY
from app.core.redis_client import db_channel

logger = logging.getLogger(__name__)

# How stale an unannounced change of the key may get (see the module docstring).
MAX_AGE_S = 1.0
# How long a new subscription may take to be confirmed.
SUBSCRIBE_TIMEOUT_S = 5.0


class AnnouncedEndpoint:
    """The raw endpoint record (the key's bytes, None when nothing is published)."""

    def __init__(
        self,
        redis: AsyncRedis,
        *,
        key: str = ENDPOINT_KEY,
        channel: str = ENDPOINT_CHANNEL,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._key = key
        self._channel = db_channel(redis, channel)
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = asyncio.Lock()  # one subscription, one read of the key at a time
        self._listener: asyncio.Task[None] | None = None
        self._announced = False
        self._raw: bytes | None = None
        self._read_at = float("-inf")

    @property
    def subscribed(self) -> bool:
        return self._listener is not None and not self._listener.done()

    async def raw(self) -> bytes | None:
        """The record as published now; raises :class:`RedisError` when Redis fails."""
        fresh = self._clock() - self._read_at < self._max_age_s
        if fresh and self.subscribed and not self._announced:
            return self._raw  # the common case: no round trip
        async with self._lock:
            if not self.subscribed:
                await self._subscribe()
            elif self._announced or self._clock() - self._read_at >= self._max_age_s:
                await self._read_key()
            return self._raw

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                await listener

    async def _subscribe(self) -> None:
        """Subscribe, wait for the confirmation, then read the key: an announcement made
        after that read is sure to reach the listener."""
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            deadline = self._clock() + SUBSCRIBE_TIMEOUT_S
            while True:
                message = await pubsub.get_message(timeout=SUBSCRIBE_TIMEOUT_S)
                if message is not None and message["type"] == "subscribe":
                    break
                if self._clock() > deadline:
                    raise RedisError(f"subscription to {self._channel} not confirmed")
            await self._read_key()
        except BaseException:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()
            raise
        self._listener = asyncio.create_task(self._listen(pubsub))

    async def _listen(self, pubsub: PubSub) -> None:
        """Flag announcements; the next call reads the key.

        The announcement is only a hint, the key is the truth. When the subscription breaks, the
        task ends and the next call subscribes again.
        """
        try:
            async for message in pubsub.listen():
                if message["type"] == "message":
                    self._announced = True
        except (RedisError, OSError) as exc:
            logger.info("policy endpoint announcements lost (%s); resubscribing", exc)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    async def _read_key(self) -> None:
        self._announced = False  # before the GET: an announcement during it reads again
        raw = await self._redis.get(self._key)
        self._raw = None if raw is None else bytes(raw)
        self._read_at = self._clock()
