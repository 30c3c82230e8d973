"""The control-plane API: ``create_app(settings)`` joins one router per resource.

Long-lived clients (database engine, Redis, the Celery app, the gateway's HTTP pool) are
built in the lifespan, kept on ``app.state`` and closed on shutdown; importing this
module connects to nothing. Reads are open; writes need ``Bearer $WSRL_API_TOKEN``
(attached once per write router). OpenAPI docs are at ``/docs``; the web dashboard
(:mod:`app.api.dashboard`) at ``/dashboard``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError

from app.api.body_limit import BodySizeLimit
from app.api.dashboard import routes as dashboard
from app.api.errors import NotFoundError
from app.api.gateway_fast_path import GatewayFastPath
from app.api.metrics import ApiMetrics, RequestMetricsMiddleware
from app.api.routes import gateway, health, metrics, policy, rollouts, stats, trajectories
from app.api.services.gateway import Gateway
from app.api.services.gateway_endpoint import AnnouncedEndpoint
from app.api.services.gateway_store import CallStore, libpq_url
from app.config import Settings
from app.core.celery import create_celery
from app.core.redis_client import connect_async_redis, connect_redis
from app.db.lifecycle import IllegalTransition
from app.db.session import make_engine, make_sessionmaker

logger = logging.getLogger(__name__)

# Gateway calls are many and short; keep enough warm connections to the LLM server.
HTTP_POOL_SIZE = 256
# Concurrent gateway writes of this process; more calls than this wait for a connection.
GATEWAY_DB_CONNECTIONS = 30


def create_app(settings: Settings) -> FastAPI:
    """The API for ``settings``; services are connected when the app starts serving."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings, pool_size=10, max_overflow=20)
        sessions = make_sessionmaker(engine)
        # The gateway's own async connections: see app.api.services.gateway_store.
        store = CallStore(libpq_url(settings.resolved_database_url()), GATEWAY_DB_CONNECTIONS)
        sync_redis = connect_redis(settings)
        async_redis = connect_async_redis(settings)
        http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=settings.llm_timeout_s),
            connector=aiohttp.TCPConnector(limit=HTTP_POOL_SIZE, limit_per_host=HTTP_POOL_SIZE),
        )
        app.state.engine = engine
        # The dashboard reads as the read-only role (connects on its first page).
        app.state.dashboard_engine = dashboard.readonly_engine(settings)
        app.state.sessionmaker = sessions
        app.state.redis = sync_redis
        app.state.celery = create_celery(settings)
        endpoint_record = AnnouncedEndpoint(async_redis)
        app.state.gateway = Gateway(settings, http, endpoint_record, store)
        app.state.metrics.watch_pipeline(sessions, sync_redis)
        logger.info("API ready (database and Redis from settings)")
        try:
            yield
        finally:
            await http.close()
            await endpoint_record.close()
            await async_redis.aclose()
            sync_redis.close()
            app.state.celery.close()
            engine.dispose()
            app.state.dashboard_engine.dispose()
            await store.close()

    app = FastAPI(
        title="webshop-rl control plane",
        summary="Enqueue rollouts, read trajectories, publish the policy, proxy LLM calls.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = ApiMetrics()
    app.add_middleware(RequestMetricsMiddleware, metrics=app.state.metrics)
    # Added last, so it runs first: well-formed gateway calls skip the routing and metrics
    # layers (and count themselves).
    app.add_middleware(GatewayFastPath, metrics=app.state.metrics, token=settings.api_token)
    # Outermost: no layer reads a body over the cap.
    app.add_middleware(BodySizeLimit, max_bytes=settings.api_max_body_bytes)
    for module in (rollouts, policy):
        app.include_router(module.writes)
    for module in (rollouts, trajectories, policy, stats, health, metrics, gateway):
        app.include_router(module.router)
    app.include_router(dashboard.router)
    for page_error in dashboard.EXCEPTIONS:
        app.add_exception_handler(page_error, dashboard.dashboard_error)
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(DataError, _data_error)
    app.add_exception_handler(IllegalTransition, _illegal_transition)
    return app


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _data_error(request: Request, exc: Exception) -> JSONResponse:
    """A value the database rejects (out of range, malformed) is the caller's error."""
    origin = getattr(exc, "orig", exc)
    return JSONResponse({"detail": f"invalid value: {origin}"}, status_code=422)


async def _illegal_transition(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)
