"""Wiring of a local training run: database, Redis, policy server, backend, scheduler, loop.

:func:`start_local_trainer` resumes from the newest committed checkpoint (or the given
model), serves those weights on an in-process policy server, publishes them as
``serving`` and returns a ready :class:`~trainer.loop.TrainLoop`. Used by ``wsrl train``,
the tests and the benchmark.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis import Redis
from sqlalchemy import Engine

from app.config import Settings
from app.core.celery import create_celery
from app.core.endpoint import EndpointStatus
from app.db.session import make_engine, make_sessionmaker
from trainer.backends.local import LocalBackend
from trainer.config import TrainerConfig
from trainer.loop import LoopOptions, TrainLoop
from trainer.policy_server import PolicyServer, ServerHandle
from trainer.publish import Publisher
from trainer.scheduler import Scheduler
from trainer.tracking import MetricsLogger

logger = logging.getLogger(__name__)


@dataclass
class LocalTrainer:
    """A started run; :meth:`close` stops the policy server and the clients."""

    loop: TrainLoop
    handle: ServerHandle
    engine: Engine
    redis: Redis
    resumed_from: Path | None

    @property
    def base_url(self) -> str:
        """The published base URL (the advertised host, when one was given)."""
        return self.loop.publisher.base_url

    def close(self) -> None:
        if self.loop.metrics is not None:
            self.loop.metrics.close()
        self.handle.stop()
        self.redis.close()
        self.engine.dispose()


def advertised_url(base_url: str, host: str | None) -> str:
    """``base_url`` with its host replaced by ``host`` (unchanged when ``host`` is None)."""
    if host is None:
        return base_url
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}"))


def default_checkpoint_dir(settings: Settings) -> Path:
    return settings.data_dir / "trainer" / "checkpoints"


def start_local_trainer(
    settings: Settings,
    config: TrainerConfig,
    model_path: Path,
    options: LoopOptions,
    *,
    enqueue: bool = True,
    sampling: dict[str, Any] | None = None,
    split: str = "train",
    train_starts: tuple[str, ...] = ("search",),
    eval_goals: int = 0,
    eval_sampling: dict[str, Any] | None = None,
    policy_host: str = "127.0.0.1",
    policy_port: int = 0,
    advertise_host: str | None = None,
    model_name: str = "policy",
    metrics: MetricsLogger | None = None,
) -> LocalTrainer:
    """Resume (or start) a run and publish its weights; the caller runs ``loop.run``.
    ``metrics`` receives every step (closed by :meth:`LocalTrainer.close`). Train groups
    start where ``train_starts`` says (:class:`~trainer.scheduler.Scheduler`).

    The policy server listens on ``policy_host:policy_port``; the published endpoint names
    ``advertise_host`` instead of the listening address when given (workers in other
    containers or on other hosts cannot reach 127.0.0.1 or 0.0.0.0)."""
    engine = make_engine(settings, pool_size=4)
    sessions = make_sessionmaker(engine)
    checkpoint, done, version = TrainLoop.resume_point(sessions, options.checkpoint_dir)
    source = checkpoint.path if checkpoint else model_path
    backend = LocalBackend(source, config, version=version)
    if checkpoint is not None:
        checkpoint.load_optimizer(backend.optimizer)
    logger.info("trainer starts after step %d from %s as policy version %d", done, source, version)
    server = PolicyServer(
        copy.deepcopy(backend.model),
        backend.tokenizer,
        version=version,
        model_name=model_name,
        default_max_tokens=settings.llm_max_tokens,
    )
    handle = server.start(policy_host, policy_port)
    redis = Redis.from_url(settings.resolved_redis_url())
    publisher = Publisher(sessions, redis, server, advertised_url(handle.base_url, advertise_host))
    scheduler = None
    if enqueue:
        scheduler = Scheduler(
            create_celery(settings),
            settings,
            group_size=config.group_size,
            target_groups=config.batch_groups * (1 + config.max_staleness),
            split=split,
            sampling=sampling,
            seed=config.seed + done,
            starts=train_starts,
            eval_goals=eval_goals,
            eval_sampling=eval_sampling,
        )
    loop = TrainLoop(
        config,
        options,
        sessions,
        backend,
        publisher,
        scheduler,
        step=done,
        version=version,
        metrics=metrics,
    )
    publisher.publish(version, EndpointStatus.SERVING, str(source))
    return LocalTrainer(loop, handle, engine, redis, checkpoint.path if checkpoint else None)
