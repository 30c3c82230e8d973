"""Publishing a policy endpoint: a ``policy_versions`` row in Postgres plus the Redis record.

The row is written (and flushed, so constraint errors surface) before the endpoint is
published, so a version that workers can see always has its row once the request's
transaction commits. Status moves go through the transition table:

* ``serving`` makes the version ``active`` and retires every other active version;
* ``paused`` (weights syncing) creates the row as ``syncing`` and leaves an existing
  row's status alone: pausing an active version is a publication state, not a lifecycle move.
"""

from __future__ import annotations

from redis import Redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.lifecycle import PolicyVersionStatus, check_transition
from app.db.models import PolicyVersion
from workers.endpoint import EndpointStatus, PolicyEndpoint, publish_endpoint


class RetiredVersionError(ValueError):
    """Publishing a version that was already superseded."""


def publish_policy(
    session: Session, redis: Redis, endpoint: PolicyEndpoint, *, checkpoint: str | None = None
) -> PolicyVersion:
    """Record ``endpoint`` as a policy version, then publish it; returns the row."""
    row = session.get(PolicyVersion, endpoint.version, with_for_update=True)
    if row is not None and row.status == PolicyVersionStatus.RETIRED:
        raise RetiredVersionError(
            f"policy version {endpoint.version} is retired; publish a newer version"
        )
    if row is None:
        row = PolicyVersion(version=endpoint.version, status=PolicyVersionStatus.SYNCING)
        session.add(row)
    row.base_url = endpoint.base_url
    row.model = endpoint.model
    if checkpoint is not None:
        row.checkpoint = checkpoint
    if endpoint.status == EndpointStatus.SERVING:
        _activate(session, row)
    session.flush()
    publish_endpoint(redis, endpoint)
    return row


def _activate(session: Session, row: PolicyVersion) -> None:
    if row.status != PolicyVersionStatus.ACTIVE:
        check_transition("policy_version", row.status, PolicyVersionStatus.ACTIVE)
        row.status = PolicyVersionStatus.ACTIVE
    others = session.scalars(
        select(PolicyVersion).where(
            PolicyVersion.status == PolicyVersionStatus.ACTIVE,
            PolicyVersion.version != row.version,
        )
    ).all()
    for other in others:
        check_transition("policy_version", other.status, PolicyVersionStatus.RETIRED)
        other.status = PolicyVersionStatus.RETIRED
