"""``wsrl watch``: messages from the logs channel, counted and formatted."""

from __future__ import annotations

import threading
import uuid

import redis

from app.config import Settings
from app.progress import EpisodeTally, follow, format_message
from workers.log_queue import PublishQueue
from workers.recording import LogPublisher


def test_progress_counts_outcomes() -> None:
    progress = EpisodeTally()
    base = {"rollout": "r1", "attempt": 1, "worker": "w"}
    progress.update({**base, "kind": "started"})
    progress.update({**base, "kind": "failed", "retry": True, "reason": "x"})
    progress.update({**base, "attempt": 2, "kind": "started"})
    progress.update({**base, "attempt": 2, "kind": "succeeded", "reward": 1.0})
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
