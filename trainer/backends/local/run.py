"""Wiring of a local training run: database, Redis, policy server, backend, scheduler, loop.

:class:`LocalBackend` is the local backend as the shared loop sees it
(:class:`~trainer.loop.TrainBackend`), updating a :class:`~.learner.Learner`.
:func:`start_local_run` resumes from the newest committed checkpoint (or the given model),
serves those weights on an in-process policy server, publishes them as ``serving`` and
returns a ready :class:`LocalRun`. Used by ``wsrl train``, the tests and the benchmark.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis import Redis
from sqlalchemy import Engine

from app.config import Settings
from app.core.agent import AgentProtocol
from app.core.redis_client import connect_redis
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.advantages import rollout_advantages
from trainer.backends.local import checkpoints
from trainer.backends.local.learner import Learner
from trainer.backends.local.policy_server import PolicyServer, ServerHandle
from trainer.checkpoint_protocol import policy_protocol
from trainer.config import RunConfig, TrainerConfig
from trainer.loop import LoopOptions, TrainLoop, build_loop, resume
from trainer.lora import AdapterCopy
from trainer.publish import committed_step
from trainer.samples import RolloutRecord, Sample, build_samples
from trainer.tracking import MetricsLogger

logger = logging.getLogger(__name__)


class LocalBackend:
    """The local backend in the loop: samples with the advantages of
    :mod:`trainer.advantages`, an update in this process,
    :mod:`trainer.backends.local.checkpoints`, and a copy of the weights swapped into the
    in-process policy server (which keeps serving the previous version during the
    update)."""

    pauses_serving = False

    def __init__(
        self,
        learner: Learner,
        server: PolicyServer,
        config: TrainerConfig,
        options: LoopOptions,
        protocol: AgentProtocol | None = None,
    ) -> None:
        self.learner, self.server, self.config, self.options = learner, server, config, options
        self.protocol = protocol
        self._adapter_copy: AdapterCopy | None = None

    def prepare(
        self, records: Sequence[RolloutRecord], returns: Mapping[str, float]
    ) -> tuple[list[Sample] | None, dict]:
        advantages = rollout_advantages(
            [returns[r.rollout_id] for r in records],
            [r.group_id for r in records],
            self.config.adv_estimator,
            self.config.norm_adv_by_std,
        ).advantages
        samples, stats = build_samples(
            records,
            {r.rollout_id: a for r, a in zip(records, advantages, strict=True)},
            self.config.sample_mode,
            self.config.max_sample_tokens,
            self.config.sample_weighting,
        )
        return samples or None, stats.as_metrics()

    def update(self, batch: list[Sample], step: int, version: int) -> dict[str, float]:
        metrics = self.learner.update(batch)
        self.learner.version = version
        return metrics

    def save(self, step: int, version: int) -> str:
        """Step ``step``'s checkpoint; the older ones beyond ``keep_checkpoints`` go first
        (all of them are committed: an uncommitted one is removed on restart)."""
        directory = self.options.checkpoint_dir
        checkpoints.prune(directory, self.options.keep_checkpoints)
        extra = None if self.protocol is None else {"protocol": self.protocol.to_dict()}
        saved = checkpoints.save_checkpoint(directory, step, version, self.learner, extra)
        return str(saved.path)

    def swap(self, version: int) -> None:
        """The new weights to the policy server: with LoRA the adapter alone, else a copy
        of the whole model."""
        if self.learner.lora.enabled:
            if self._adapter_copy is None:  # the served model is the one the server started on
                self._adapter_copy = AdapterCopy(self.learner.model, self.server.model)
            self.server.load_adapter(self._adapter_copy, version)
        else:
            self.server.swap(copy.deepcopy(self.learner.model), version)


def resume_point(
    sessions: Any, checkpoint_dir: Path
) -> tuple[checkpoints.Checkpoint | None, int, int]:
    """(checkpoint to load or None, last committed step, version to serve it as)."""
    with session_scope(sessions) as session:
        checkpoint = checkpoints.usable_checkpoint(checkpoint_dir, committed_step(session))
    done, version = resume(sessions, checkpoint.version if checkpoint else None)
    if checkpoint is not None and checkpoint.step < done:
        logger.warning(
            "checkpoint of step %d is older than the last committed step %d (steps "
            "without an update, or removed checkpoints); continuing from its weights",
            checkpoint.step,
            done,
        )
    return checkpoint, done, version


@dataclass
class LocalRun:
    """A started run; :meth:`close` stops the policy server and the clients. ``learner``
    is the policy being trained (its model, optimizer and tokenizer)."""

    loop: TrainLoop
    learner: Learner
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


def start_local_run(
    settings: Settings,
    run: RunConfig,
    model_path: Path,
    options: LoopOptions,
    *,
    model_name: str = "policy",
    metrics: MetricsLogger | None = None,
) -> LocalRun:
    """Resume (or start) ``run`` and publish its weights; the caller runs ``loop.run``.
    ``metrics`` receives every step (closed by :meth:`LocalRun.close`).

    The policy server listens on ``run.local.policy_host:policy_port``; the published
    endpoint names ``advertise_host`` instead of the listening address when given (workers
    in other containers or on other hosts cannot reach 127.0.0.1 or 0.0.0.0). With
    ``run.lora`` the run trains and syncs an adapter on ``model_path`` (a LoRA checkpoint
    resumes on its base)."""
    config, lora, local = run.algorithm, run.lora, run.local
    protocol = policy_protocol(settings, model_path)
    engine = make_engine(settings, pool_size=4)
    sessions = make_sessionmaker(engine)
    checkpoint, done, version = resume_point(sessions, options.checkpoint_dir)
    source = checkpoint.path if checkpoint else model_path
    learner = Learner(source, config, version=version, lora=lora)
    if checkpoint is not None:
        checkpoint.load_optimizer(learner.optimizer)
    logger.info("trainer starts after step %d from %s as policy version %d", done, source, version)
    server = PolicyServer(
        copy.deepcopy(learner.model),
        learner.tokenizer,
        version=version,
        model_name=model_name,
        default_max_tokens=settings.llm_max_tokens,
    )
    handle = server.start(local.policy_host, local.policy_port)
    redis = connect_redis(settings)
    loop = build_loop(
        run,
        settings,
        sessions,
        redis,
        LocalBackend(learner, server, config, options, protocol),
        options,
        step=done,
        version=version,
        endpoint=(advertised_url(handle.base_url, local.advertise_host), server.model_name),
        protocol=protocol,
        base_model=str(Path(model_path).resolve()) if lora.enabled else None,
        enqueue=local.enqueue,
        metrics=metrics,
    )
    loop.publish_current(str(source))
    resumed_from = checkpoint.path if checkpoint else None
    return LocalRun(loop, learner, handle, engine, redis, resumed_from)
