"""``wsrl watch``: messages from the logs channel, counted and formatted."""

from __future__ import annotations

import threading
import time
import uuid

import redis

from app.config import Settings
from app.core.redis_client import db_channel
from app.progress import EpisodeTally, follow, format_message
from workers.log_queue import PublishQueue
from workers.recording import LogPublisher


def test_progress_counts_outcomes() -> None:
    progress = EpisodeTally()
    base = {"rollout": "r1", "attempt": 1, "worker": "w"}
    progress.update({**base, "kind": "started"})
    progress.update({**base, "kind": "failed", "retry": True, "reason": "x"})
    progress.update({**base, "attempt": 2, "kind": "started"})
    progress.update({**base, "attempt": 2, "kind": "succeeded", "reward": 1.0, "success": True})
    assert (progress.succeeded, progress.retried, progress.failed) == (1, 1, 0)
    assert not progress.running
    assert "success 1/1" in progress.summary()


def test_format_message_shows_worker_rollout_and_line() -> None:
    line = format_message(
        {"rollout": "abcdef123456", "attempt": 2, "worker": "w1", "kind": "log", "line": "[DONE] 1"}
    )
    assert line == "w1 abcdef12#2 [DONE] 1"
    failed = format_message({"rollout": "r", "attempt": 1, "kind": "failed", "reason": "boom"})
    assert "[FAILED] boom (giving up)" in failed


def test_published_lines_reach_a_follower(test_settings: Settings) -> None:
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    channel = f"wsrl:logs:test:{uuid.uuid4().hex[:8]}"
    stream = follow(client, channel, poll_s=0.1)
    assert next(stream) is None  # subscribed, nothing yet
    publisher = LogPublisher(client, channel, rollout_id=uuid.uuid4(), attempt=1, worker="w")
    publisher.publish("log", line="[TASK] buy a lamp")
    message = next(m for m in stream if m is not None)
    assert message["kind"] == "log" and message["line"] == "[TASK] buy a lamp"
    stream.close()
    client.close()


def test_queued_lines_reach_a_follower_in_order(test_settings: Settings) -> None:
    """The worker's path: messages from several threads through one PublishQueue."""
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    channel = f"wsrl:logs:test:{uuid.uuid4().hex[:8]}"
    stream = follow(client, channel, poll_s=0.1)
    assert next(stream) is None
    queue = PublishQueue(client)
    rollouts = [uuid.uuid4() for _ in range(4)]
    publishers = [
        LogPublisher(client, channel, rollout_id=r, attempt=1, worker="w", queue=queue)
        for r in rollouts
    ]

    def play(publisher: LogPublisher) -> None:
        for step in range(25):
            publisher.publish("log", line=f"[STEP] {step}")

    threads = [threading.Thread(target=play, args=(p,)) for p in publishers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.close()  # sends what is still pending
    received = [m for _, m in zip(range(100), (m for m in stream if m is not None), strict=False)]
    stream.close()
    client.close()
    assert len(received) == 100
    for rollout in rollouts:
        lines = [m["line"] for m in received if m["rollout"] == str(rollout)]
        assert lines == [f"[STEP] {step}" for step in range(25)]


def _wait(predicate, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


def test_nobody_listening_means_nothing_is_published_until_someone_does(
    test_settings: Settings,
) -> None:
    """A batch that reached no subscriber stops the channel's messages for ``unheard_s``;
    then one batch asks again, and a watcher that subscribed meanwhile gets the lines."""
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    channel = f"wsrl:logs:test:{uuid.uuid4().hex[:8]}"
    heard = db_channel(client, channel)  # what the publisher sends on: this db's
    queue = PublishQueue(client, unheard_s=0.5)
    publisher = LogPublisher(
        client, channel, rollout_id=uuid.uuid4(), attempt=1, worker="w", queue=queue
    )
    try:
        publisher.publish("log", line="[TASK] heard by no one")
        assert _wait(lambda: not queue.wanted(heard)), "a batch nobody heard stops the channel"
        publisher.publish("log", line="[STEP] dropped before it is built")
        stream = follow(client, channel, poll_s=0.1)
        assert next(stream) is None  # subscribed
        assert _wait(lambda: queue.wanted(heard)), "asked again after unheard_s"
        publisher.publish("log", line="[DONE] heard")
        message = next(m for m in stream if m is not None)
        assert message["line"] == "[DONE] heard"  # the dropped line never arrives
        assert queue.wanted(heard)
        stream.close()
    finally:
        queue.close()
        client.close()


def test_a_pattern_subscriber_counts_as_listening(test_settings: Settings) -> None:
    client = redis.Redis.from_url(test_settings.resolved_redis_url())
    channel = f"wsrl:logs:test:{uuid.uuid4().hex[:8]}"
    pubsub = client.pubsub()
    pubsub.psubscribe(f"{channel[:-2]}*")
    assert pubsub.get_message(timeout=1)["type"] == "psubscribe"
    queue = PublishQueue(client, unheard_s=60)
    try:
        queue.put(channel, b"{}")
        message = None
        deadline = time.monotonic() + 3
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.2)
        assert message is not None and message["type"] == "pmessage"
        time.sleep(0.05)  # the sender has read PUBLISH's answer
        assert queue.wanted(channel)
    finally:
        queue.close()
        pubsub.close()
        client.close()
