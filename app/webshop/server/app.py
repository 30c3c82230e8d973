"""``create_app``: the env server as a FastAPI app around one loaded :class:`WebShopEnv`.

The env is loaded by the caller (the CLI, a test) and shared read-only by every session;
the app only adds the session store, the route families and a background sweep that
drops idle sessions so that the cap counts live ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from app.webshop.env import WebShopEnv
from app.webshop.nouns import NounTagger
from app.webshop.server import agentgym, agl, native
from app.webshop.server.auth import SessionToken
from app.webshop.server.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimit
from app.webshop.server.responses import OrjsonResponse, install_error_handlers
from app.webshop.server.service import Unmatched, WebShopService
from app.webshop.server.sessions import SessionStore

logger = logging.getLogger(__name__)


async def _sweep_forever(store: SessionStore, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        dropped = store.sweep()
        if dropped:
            logger.info("dropped %d idle sessions (%d live)", dropped, len(store))


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    store: SessionStore = app.state.service.store
    sweeper = asyncio.create_task(_sweep_forever(store, min(max(store.ttl_s / 2, 0.5), 30.0)))
    try:
        yield
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper


class LoadTaggerAfterFirstAnswer:
    """Starts loading the reward's noun tagger once the first request has been answered.

    spaCy's model takes about 2 s of CPU to import and load; loaded beside the start-up it
    would slow the first answer (the health check that says the server is up). Loaded
    after it, start-up costs what it costs without spaCy, and the first purchase waits
    for the model if it comes sooner."""

    def __init__(self, app: ASGIApp, tagger: NounTagger) -> None:
        self.app = app
        self.tagger = tagger
        self.pending = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        if self.pending and scope["type"] == "http":
            self.pending = False
            self.tagger.start_loading()


def create_app(
    env: WebShopEnv,
    *,
    session_ttl_s: float = 600,
    max_sessions: int = 10_000,
    max_sessions_per_client: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    token: str | None = None,
    unmatched: Unmatched | str = Unmatched.RANDOM,
) -> FastAPI:
    """The server: native API at ``/``, AgentGym's at ``/agentgym``, AGL's at ``/agl``.

    ``session_ttl_s``: idle seconds before a session expires (then 410 for a while).
    ``max_sessions``: live sessions across all route families (429 beyond).
    ``max_sessions_per_client``: live sessions one client address may hold (429 beyond;
    default half of ``max_sessions``), so one flooding client cannot take every slot.
    ``max_body_bytes``: larger request bodies are refused with 413 before parsing.
    ``token``: session routes need ``Authorization: Bearer <token>`` (see ``auth``).
    ``unmatched``: what an AGL reset whose instruction matches no goal gets (``random``:
    a random goal; ``refuse``: a 409); either way it is logged and counted in ``/health``.
    """
    app = FastAPI(
        title="WebShop environment",
        summary="Sessions of the WebShop environment over HTTP (native, AgentGym, AGL).",
        default_response_class=OrjsonResponse,
        lifespan=_lifespan,
    )
    store = SessionStore(
        ttl_s=session_ttl_s, max_sessions=max_sessions, max_per_client=max_sessions_per_client
    )
    app.state.service = WebShopService(env, store, Unmatched(unmatched))
    app.state.agentgym_ids = agentgym.EnvIds()
    install_error_handlers(app)
    app.include_router(native.router)
    app.include_router(agentgym.router)
    app.include_router(agl.router)
    app.add_middleware(native.StepAhead, service=app.state.service)
    app.add_middleware(LoadTaggerAfterFirstAnswer, tagger=env.nouns)
    app.add_middleware(BodySizeLimit, max_body_bytes=max_body_bytes)
    if token:
        app.add_middleware(SessionToken, token=token)  # outermost: refused before anything
    return app
