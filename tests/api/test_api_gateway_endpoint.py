"""The gateway's view of the published endpoint (real Redis): announcements apply from
the next read on, without a GET per read; unannounced changes within ``max_age_s``; a
broken subscription is replaced by the next read; another db's announcements change
nothing.

Publications run on a thread while the event loop runs, as they do for a real API
process (the trainer is another process), and the reads come a moment later, as a
gateway call that follows a publication does. (A read racing the publication may see the
previous record, just as a GET just before the publication would.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
import redis
import redis.asyncio

from app.api.services.gateway_endpoint import AnnouncedEndpoint
from app.core.endpoint import PolicyEndpoint, publish_endpoint, withdraw_endpoint

T = TypeVar("T")
# Time for the event loop to receive an announcement before the next read.
ANNOUNCEMENT_S = 0.05
V1 = PolicyEndpoint("http://llm-a/v1", "policy", 1)
V2 = PolicyEndpoint("http://llm-b/v1", "policy", 2)


class CountingRedis(redis.asyncio.Redis):
    """A real async client that counts the GETs it sends: the server's ``commandstats``
    would count other test sessions' GETs too (they share the server)."""

    gets = 0

    async def execute_command(self, *args, **options):
        if str(args[0]).upper() == "GET":
            self.gets += 1
        return await super().execute_command(*args, **options)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def names(redis_url: str) -> Iterator[tuple[str, str]]:
    """A key and a channel of this test's own."""
    tag = uuid.uuid4().hex[:8]
    key, channel = f"test:endpoint:{tag}", f"test:endpoint:{tag}:announce"
    yield key, channel
    client = redis.Redis.from_url(redis_url)
    client.delete(key)
    client.close()


def _run(
    redis_url: str,
    names: tuple[str, str],
    body: Callable[[AnnouncedEndpoint, redis.Redis, Clock], Awaitable[T]],
) -> T:
    """Run ``body`` with an :class:`AnnouncedEndpoint` (large max age: only announcements
    and the first read update it), a sync client of the same db and the record's clock.
    The record's client is a :class:`CountingRedis` (``record._redis.gets``)."""
    key, channel = names
    clock = Clock()

    async def main() -> T:
        # Named, so that a test can find its subscription among the server's clients.
        async_client = CountingRedis.from_url(redis_url, client_name=_client_name(key))
        record = AnnouncedEndpoint(
            async_client, key=key, channel=channel, max_age_s=60.0, clock=clock
        )
        sync_client = redis.Redis.from_url(redis_url)
        try:
            return await body(record, sync_client, clock)
        finally:
            await record.close()
            await async_client.aclose()
            sync_client.close()

    return asyncio.run(main())


async def _publish(client: redis.Redis, endpoint: PolicyEndpoint, key: str, channel: str) -> None:
    await asyncio.to_thread(publish_endpoint, client, endpoint, key=key, channel=channel)
    await asyncio.sleep(ANNOUNCEMENT_S)


async def _withdraw(client: redis.Redis, key: str, channel: str) -> None:
    await asyncio.to_thread(withdraw_endpoint, client, key=key, channel=channel)
    await asyncio.sleep(ANNOUNCEMENT_S)


async def _endpoint(record: AnnouncedEndpoint) -> PolicyEndpoint | None:
    raw = await record.raw()
    return None if raw is None else PolicyEndpoint.from_json(raw)


def _client_name(key: str) -> str:
    return key.replace(":", "-")


def _count_gets(record: AnnouncedEndpoint) -> int:
    """The GETs the record's own client has sent."""
    client = record._redis
    assert isinstance(client, CountingRedis)
    return client.gets


def test_announcements_apply_without_a_get_per_read(redis_url: str, names: tuple[str, str]) -> None:
    key, channel = names

    async def body(record: AnnouncedEndpoint, client: redis.Redis, _: Clock) -> None:
        assert await _endpoint(record) is None  # nothing published yet
        await _publish(client, V1, key, channel)
        assert await _endpoint(record) == V1
        gets = _count_gets(record)
        assert gets >= 1  # the first read GETs the key: the count sees this client's GETs
        for _ in range(20):
            assert await _endpoint(record) == V1
        assert _count_gets(record) == gets  # no announcement, no round trip
        await _publish(client, V2, key, channel)
        assert await _endpoint(record) == V2
        await _withdraw(client, key, channel)
        assert await _endpoint(record) is None

    _run(redis_url, names, body)


def test_an_unannounced_change_is_read_once_the_record_is_max_age_old(
    redis_url: str, names: tuple[str, str]
) -> None:
    key, _ = names

    async def body(record: AnnouncedEndpoint, client: redis.Redis, clock: Clock) -> None:
        client.set(key, V1.to_json())
        assert await _endpoint(record) == V1
        client.set(key, V2.to_json())  # no announcement: a hand-made SET
        clock.now += 59.0
        assert await _endpoint(record) == V1
        clock.now += 1.0
        assert await _endpoint(record) == V2
        client.delete(key)  # a flushed Redis announces nothing either
        clock.now += 60.0
        assert await _endpoint(record) is None

    _run(redis_url, names, body)


def test_a_killed_subscription_is_replaced_by_the_next_read(
    redis_url: str, names: tuple[str, str]
) -> None:
    key, channel = names

    async def body(record: AnnouncedEndpoint, client: redis.Redis, _: Clock) -> None:
        await _publish(client, V1, key, channel)
        assert await _endpoint(record) == V1
        subscriptions = [
            entry
            for entry in client.client_list(_type="pubsub")
            if entry.get("name") == _client_name(key)
        ]
        assert len(subscriptions) == 1
        assert client.client_kill_filter(_id=subscriptions[0]["id"]) == 1
        for _ in range(200):  # the loop sees the connection close
            if not record.subscribed:
                break
            await asyncio.sleep(0.01)
        assert not record.subscribed
        # Published while no subscription listens: only a fresh read can know it.
        await _publish(client, V2, key, channel)
        assert await _endpoint(record) == V2
        assert record.subscribed
        await _publish(client, V1, key, channel)
        assert await _endpoint(record) == V1

    _run(redis_url, names, body)


def test_another_dbs_announcement_leaves_this_dbs_record(
    redis_url: str, names: tuple[str, str]
) -> None:
    """Channels are server-wide; the announcement only makes the record read its own key."""
    key, channel = names
    client = redis.Redis.from_url(redis_url)
    this_db = int(client.connection_pool.connection_kwargs.get("db", 0))
    other = redis.Redis(**{**client.connection_pool.connection_kwargs, "db": (this_db + 1) % 16})
    client.close()

    async def body(record: AnnouncedEndpoint, client: redis.Redis, _: Clock) -> None:
        await _publish(client, V1, key, channel)
        assert await _endpoint(record) == V1
        try:
            await _publish(other, V2, key, channel)
            assert await _endpoint(record) == V1
        finally:
            other.delete(key)
            other.close()

    _run(redis_url, names, body)
