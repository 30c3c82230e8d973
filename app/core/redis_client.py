"""The project's clients of the configured Redis, made in one place so that each gives up
connecting after :data:`REDIS_CONNECT_TIMEOUT_S`.

redis-py waits for a connection as long as the operating system does: a host that drops
packets (a firewall, a wrong address in another network) held a command for about two
minutes (Linux's SYN retries) before any error. Celery's broker connections take the same
limit (:func:`app.core.celery.create_celery`). Not a setting: a connection on a working
network takes milliseconds, and the URL cannot carry it (Celery refuses its query).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis import Redis

from app.config import Settings

REDIS_CONNECT_TIMEOUT_S = 10.0


def connect_redis(settings: Settings, **options: Any) -> Redis:
    """A client of ``settings``' Redis (connecting on its first command)."""
    return Redis.from_url(settings.resolved_redis_url(), **_with_timeout(options))


def connect_async_redis(settings: Settings, **options: Any) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`connect_redis`."""
    return redis.asyncio.Redis.from_url(settings.resolved_redis_url(), **_with_timeout(options))


def db_channel(client: Redis | redis.asyncio.Redis, name: str) -> str:
    """The Pub/Sub channel ``name`` of ``client``'s db: ``name`` itself on db 0, else
    ``name:db<N>``. Redis delivers a message to every subscriber of the channel on the
    server, whatever db either selected, so two deployments sharing a server on different
    dbs would otherwise hear each other's announcements and log lines."""
    db = int(client.connection_pool.connection_kwargs.get("db") or 0)
    return name if db == 0 else f"{name}:db{db}"


def _with_timeout(options: dict[str, Any]) -> dict[str, Any]:
    return {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S, **options}
