"""Weight sync and endpoint publication: paused -> swap -> serving, versions only going up.

The trainer serves its own weights with :class:`trainer.policy_server.PolicyServer`. A
sync first publishes the new version as ``paused`` (workers wait instead of calling), then
swaps a copy of the trained weights into the server (the server finishes the batch in
flight first), then publishes ``serving``. Each publication is a ``policy_versions`` row
plus the Redis record, written by :func:`app.core.endpoint.publish_policy`, so the
API, ``wsrl status`` and the workers all agree on the version.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.endpoint import EndpointStatus, PolicyEndpoint, publish_policy
from app.db.models import TrainStep
from app.db.session import session_scope
from trainer.policy_server import PolicyServer


def committed_step(session: Session) -> int:
    """The last train step committed to Postgres (0 when none)."""
    return int(session.scalar(select(func.max(TrainStep.step))) or 0)


@dataclass
class SyncTimes:
    sync_s: float
    publish_s: float


class Publisher:
    """Publishes the trainer's policy server under increasing versions."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        redis: Redis,
        server: PolicyServer,
        base_url: str,
    ) -> None:
        self.sessions, self.redis, self.server, self.base_url = sessions, redis, server, base_url

    def endpoint(self, version: int, status: EndpointStatus) -> PolicyEndpoint:
        return PolicyEndpoint(self.base_url, self.server.model_name, version, status)

    def publish(self, version: int, status: EndpointStatus, checkpoint: str | None) -> None:
        with session_scope(self.sessions) as session:
            publish_policy(
                session, self.redis, self.endpoint(version, status), checkpoint=checkpoint
            )

    def sync(self, model: object, version: int, checkpoint: str | None) -> SyncTimes:
        """paused -> swap a copy of ``model`` into the server -> serving, all as ``version``."""
        started = time.perf_counter()
        self.publish(version, EndpointStatus.PAUSED, checkpoint)
        paused_s = time.perf_counter() - started
        swap_started = time.perf_counter()
        self.server.swap(copy.deepcopy(model), version)
        sync_s = time.perf_counter() - swap_started
        serving_started = time.perf_counter()
        self.publish(version, EndpointStatus.SERVING, checkpoint)
        return SyncTimes(sync_s=sync_s, publish_s=paused_s + time.perf_counter() - serving_started)
