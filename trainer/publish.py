"""Weight sync and endpoint publication: paused -> swap -> serving, versions only going up.

A sync first publishes the new version as ``paused`` (workers wait instead of calling),
then lets the backend swap the trained weights into its inference server (the local
policy server, or verl's vLLM replicas), then publishes ``serving``. Each publication is a
``policy_versions`` row plus the Redis record, written by
:func:`app.core.endpoint.publish_policy`, so the API, ``wsrl status`` and the workers all
agree on the version, and on the agent protocol it is played with. Both backends publish
through this one class.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.agent import AgentProtocol
from app.core.endpoint import EndpointStatus, PolicyEndpoint, publish_policy
from app.db.models import TrainStep
from app.db.session import session_scope
from trainer.outages import OutageWait


def committed_step(session: Session) -> int:
    """The last train step committed to Postgres (0 when none)."""
    return int(session.scalar(select(func.max(TrainStep.step))) or 0)


@dataclass
class SyncTimes:
    sync_s: float
    publish_s: float


class Publisher:
    """Publishes the trainer's inference endpoint under increasing versions, each with the
    agent protocol the policy is trained for (workers play it)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        redis: Redis,
        base_url: str,
        model_name: str,
        protocol: AgentProtocol,
        base_model: str | None = None,
        outages: OutageWait | None = None,
    ) -> None:
        self.sessions, self.redis = sessions, redis
        self.outages = outages or OutageWait()
        self.base_url, self.model_name = base_url, model_name
        self.protocol = protocol
        self.base_model = base_model
        """A LoRA run's base weights, published with every version (None: whole weights)."""

    def endpoint(self, version: int, status: EndpointStatus) -> PolicyEndpoint:
        return PolicyEndpoint(
            self.base_url, self.model_name, version, status, self.protocol, self.base_model
        )

    def publish(self, version: int, status: EndpointStatus, checkpoint: str | None) -> None:
        """The version's row and Redis record (written again whole after an outage)."""

        def publish() -> None:
            with session_scope(self.sessions) as session:
                publish_policy(
                    session, self.redis, self.endpoint(version, status), checkpoint=checkpoint
                )

        self.outages(f"publishing v{version} {status}", publish)

    def sync(self, version: int, checkpoint: str | None, swap: Callable[[], None]) -> SyncTimes:
        """paused -> ``swap()`` (the backend loads the new weights) -> serving, as ``version``."""
        started = time.perf_counter()
        self.publish(version, EndpointStatus.PAUSED, checkpoint)
        paused_s = time.perf_counter() - started
        swap_started = time.perf_counter()
        swap()
        sync_s = time.perf_counter() - swap_started
        serving_started = time.perf_counter()
        self.publish(version, EndpointStatus.SERVING, checkpoint)
        return SyncTimes(sync_s=sync_s, publish_s=paused_s + time.perf_counter() - serving_started)
