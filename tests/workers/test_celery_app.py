"""The Celery app's delivery settings, derived from Settings."""

from __future__ import annotations

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
from workers.celery_app import LoopWaker, worker_celery


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
    assert options["unacked_restore_interval"] == 3 and options["unacked_restore_throttle"] == 1
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


def test_the_redis_transport_takes_the_restore_cadence(redis_url: str) -> None:
    """kombu before 5.7 ignored these two options and scanned every 100 s, so a dead
    worker's messages came back up to 100 s after the visibility timeout: the channel the
    workers consume on must carry them."""
    settings = Settings(_env_file=None, redis_url=redis_url, broker_visibility_timeout_s=16)
    celery = create_celery(settings)
    with celery.connection_for_read() as connection:
        channel = connection.default_channel
        assert channel.visibility_timeout == 16
        assert channel.unacked_restore_interval == 4
        assert channel.unacked_restore_throttle == 1
