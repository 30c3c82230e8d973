"""The policy endpoint: what workers and the gateway call (GET), publishing a new one (PUT)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, HTTPException, status
from redis.exceptions import RedisError
from sqlalchemy import select

from app.api.deps import RedisDep, SessionDep, SettingsDep, WriteAuth
from app.api.schemas import (
    UNAUTHORIZED,
    UNPARSABLE,
    PolicyEndpointIn,
    PolicyEndpointOut,
    PolicyVersionOut,
    error_responses,
)
from app.core.agent import AgentProtocol
from app.core.endpoint import (
    EndpointStatus,
    PolicyEndpoint,
    RetiredVersionError,
    fallback_endpoint,
    publish_policy,
    read_endpoint,
)
from app.db.models import PolicyVersion

router = APIRouter(prefix="/v1/policy", tags=["policy"])
writes = APIRouter(
    prefix="/v1/policy",
    tags=["policy"],
    dependencies=[WriteAuth],
    responses=error_responses(UNAUTHORIZED),
)


@router.get(
    "",
    response_model=PolicyEndpointOut,
    responses=error_responses(
        {404: "None published and none in the settings.", 503: "Redis unreadable."}
    ),
)
def get_policy(redis: RedisDep, settings: SettingsDep) -> PolicyEndpointOut:
    """The endpoint published in Redis, else the settings' one (version 0); 404 when neither."""
    try:
        published = read_endpoint(redis)
    except (RedisError, ValueError) as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, f"cannot read the policy endpoint: {exc}"
        ) from exc
    if published is not None:
        return _out(published, "redis")
    fallback = fallback_endpoint(settings)
    if fallback is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            "no policy endpoint: none published and WSRL_LLM_BASE_URL / OPENAI_API_BASE unset",
        )
    return _out(fallback, "settings")


@writes.put(
    "",
    response_model=PolicyEndpointOut,
    responses=error_responses(
        {
            **UNPARSABLE,
            409: "A retired version, or one below the highest recorded.",
            422: "Invalid body.",
        }
    ),
)
def put_policy(body: PolicyEndpointIn, session: SessionDep, redis: RedisDep) -> PolicyEndpointOut:
    """Publish an endpoint (workers use it from their next call) and record its version.

    Re-publishing the same version is allowed (a move back to serving after a pause);
    a retired version is a 409. With a ``protocol`` the workers play it (as they play
    what a trainer publishes); without one, their own settings.
    """
    endpoint = PolicyEndpoint(
        base_url=str(body.base_url).rstrip("/"),
        model=body.model,
        version=body.version,
        status=EndpointStatus(body.status),
        protocol=None if body.protocol is None else AgentProtocol(**body.protocol.model_dump()),
        base_model=body.base_model,
    )
    try:
        publish_policy(session, redis, endpoint, checkpoint=body.checkpoint)
    except RetiredVersionError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    return _out(endpoint, "redis")


@router.get("/versions", response_model=list[PolicyVersionOut])
def list_policy_versions(session: SessionDep) -> list[PolicyVersionOut]:
    """Every recorded version, newest first."""
    rows = session.scalars(select(PolicyVersion).order_by(PolicyVersion.version.desc())).all()
    return [PolicyVersionOut.model_validate(row) for row in rows]


def _out(endpoint: PolicyEndpoint, source: Literal["redis", "settings"]) -> PolicyEndpointOut:
    return PolicyEndpointOut(
        base_url=endpoint.base_url,
        model=endpoint.model,
        version=endpoint.version,
        status=str(endpoint.status),
        source=source,
        protocol=None if endpoint.protocol is None else endpoint.protocol.to_dict(),
        base_model=endpoint.base_model,
    )
