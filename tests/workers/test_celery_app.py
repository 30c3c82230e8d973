"""The Celery app's delivery settings, derived from Settings."""

from __future__ import annotations

import time
import uuid

from kombu import Queue

from app.config import Settings
from app.core.celery import (
    QUEUE_EVAL,
    QUEUE_ROLLOUTS,
    ROLLOUT_TASK,
    create_celery,
    queue_for_mode,
    restore_interval_s,
    time_limits,
)
from workers.celery_app import LoopWaker, RestoreUnacked, restore_expired, worker_celery


def _settings(**kwargs: object) -> Settings:
    return Settings(_env_file=None, redis_url="redis://127.0.0.1:6379/0", **kwargs)


def test_time_limits_follow_the_longest_episode() -> None:
    limits = time_limits(_settings(max_steps=10, step_timeout_s=30, episode_margin_s=60))
    assert limits.episode_s == 10 * 30 + 60
    assert limits.soft_s == limits.episode_s
    assert limits.hard_s == limits.soft_s + 30
    assert limits.visibility_s == limits.hard_s + 60


def test_visibility_timeout_override_is_used() -> None:
    assert time_limits(_settings(broker_visibility_timeout_s=12)).visibility_s == 12


def test_create_celery_delivery_settings() -> None:
    celery = create_celery(_settings(worker_concurrency=5, broker_visibility_timeout_s=12))
    conf = celery.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_ignore_result and not conf.result_backend
    assert conf.worker_send_task_events and conf.task_send_sent_event
    assert conf.worker_pool == "threads" and conf.worker_concurrency == 5
    options = conf.broker_transport_options
    assert options["visibility_timeout"] == 12
    assert conf.task_routes[ROLLOUT_TASK]["queue"] == QUEUE_ROLLOUTS
    assert not conf.include  # producers do not import the task module


def test_the_worker_app_registers_the_rollout_task_and_the_waker() -> None:
    celery = worker_celery(_settings())
    assert celery.conf.include == ["workers.tasks"]
    assert LoopWaker in celery.steps["worker"]


def test_eval_rollouts_go_to_the_eval_queue() -> None:
    assert queue_for_mode("eval") == QUEUE_EVAL
    assert queue_for_mode("train") == QUEUE_ROLLOUTS


def test_restore_interval_is_bounded() -> None:
    assert restore_interval_s(2) == 1
    assert restore_interval_s(17) == 4
    assert restore_interval_s(10_000) == 10


def test_the_worker_scans_for_expired_messages_at_its_own_cadence() -> None:
    celery = worker_celery(_settings(broker_visibility_timeout_s=16))
    assert RestoreUnacked in celery.steps["consumer"]
    assert celery.conf.wsrl_restore_interval_s == 4


def test_a_dead_consumers_message_comes_back_after_the_visibility_timeout(
    redis_url: str,
) -> None:
    """What :class:`RestoreUnacked` runs: a message delivered and never acknowledged (its
    worker was killed) is back on its queue once the visibility timeout has passed; before
    that it stays where it is (the worker may still be running it)."""
    settings = Settings(_env_file=None, redis_url=redis_url, broker_visibility_timeout_s=1)
    celery = create_celery(settings)
    queue = Queue(f"restore-test-{uuid.uuid4().hex[:8]}")
    with celery.connection_for_write() as producer_connection:
        producer_connection.default_channel.queue_declare(queue.name, auto_delete=False)
        producer_connection.Producer().publish({"n": 1}, routing_key=queue.name)
    dead = celery.connection_for_read()
    received = dead.SimpleQueue(queue, no_ack=False).get(timeout=5)
    assert received.payload == {"n": 1}
    dead.default_channel.qos._delivered.clear()  # a kill: no shutdown restores it
    dead.release()
    with celery.connection_for_read() as live:
        restore_expired(live)  # too early: still within the visibility timeout
        assert live.default_channel.client.llen(queue.name) == 0
        time.sleep(1.5)
        restore_expired(live)
        assert live.default_channel.client.llen(queue.name) == 1
        live.default_channel.client.delete(queue.name)
