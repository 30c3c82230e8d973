"""Dependency aliases every route uses: settings, a database session, Redis, the write token.

The cheap ones are ``async`` so that they run on the event loop instead of costing a
thread hop each (the gateway counts every tenth of a millisecond).

A request's session commits when the route returns without error and rolls back
otherwise, *before* the response is sent (``scope="function"``): a client that gets a
2xx can read what it wrote with its next request, and routes never commit themselves.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Iterator
from typing import Annotated

import redis
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.config import Settings
from app.core.gateway_keys import gateway_credentials_ok
from app.db.session import session_scope

_bearer = HTTPBearer(auto_error=False, description="WSRL_API_TOKEN, required for writes.")


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.sessionmaker) as session:
        yield session


async def get_redis(request: Request) -> redis.Redis:
    return request.app.state.redis


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
RedisDep = Annotated[redis.Redis, Depends(get_redis)]


async def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Writes need ``Authorization: Bearer $WSRL_API_TOKEN``; compared in constant time."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <WSRL_API_TOKEN>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), settings.api_token.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "wrong bearer token: it must equal WSRL_API_TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )


WriteAuth = Depends(require_token)


async def require_gateway_key(
    rollout_id: uuid.UUID,
    number: int,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Gateway calls need the API token or the attempt's own key
    (:func:`app.core.gateway_keys.attempt_key`), the one an external agent is given."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send the attempt's gateway key (the api_key the worker "
            "gave the agent) or WSRL_API_TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not gateway_credentials_ok(
        credentials.credentials.encode(), settings.api_token, rollout_id, number
    ):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "wrong bearer token: not this attempt's gateway key nor WSRL_API_TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )


GatewayAuth = Depends(require_gateway_key)
