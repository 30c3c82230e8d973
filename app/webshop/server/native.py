"""The native API: sessions by string id, goals, health (docs/webshop-protocol.md).

Every route is ``async`` and runs on the event loop: a step is pure CPU-bound Python
(under a millisecond; a search of 1M products about 2.4 ms), so FastAPI's thread pool
bought no parallelism under the GIL, only a thread hop per request. Running inline cut
the env server's CPU per 10-step episode by about a quarter (9.3-11.8 -> 7.4-8.1 ms in
``benchmarks/rollout_throughput.py``). The AgentGym and AGL families do the same. The
session's own lock stays: it costs nothing uncontended and keeps the store safe for
callers on other threads (tests, the in-process runner).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from starlette.types import ASGIApp, Receive, Scope, Send

from app.webshop.server.agentgym import KEY_PREFIX as AGENTGYM_PREFIX
from app.webshop.server.agl import KEY_PREFIX as AGL_PREFIX
from app.webshop.server.deps import ClientDep, ServiceDep
from app.webshop.server.limits import replaying
from app.webshop.server.responses import OrjsonResponse, client_error, send_error
from app.webshop.server.service import Action, WebShopService, goal_json, step_json
from app.webshop.server.sessions import SessionNotFoundError

router = APIRouter(tags=["native"])

Split = Literal["test", "eval", "train"]


class CreateSession(BaseModel):
    """``goal_id``, or ``split`` + ``index``, or neither (a goal drawn by weight)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    goal_id: int | None = None
    split: Split | None = None
    index: int | None = None
    seed: int | None = None

    @model_validator(mode="after")
    def _one_way_to_pick(self) -> Self:
        if (self.split is None) != (self.index is None):
            raise ValueError("split and index go together: give both or neither")
        if self.goal_id is not None and self.split is not None:
            raise ValueError("give goal_id or split + index, not both")
        return self


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    action: Action


@router.post("/sessions", status_code=201)
async def create_session(
    service: ServiceDep, client: ClientDep, body: Annotated[CreateSession | None, Body()] = None
) -> Response:
    """Start an episode. The answer carries everything an agent needs for its first step."""
    body = body or CreateSession()
    if body.goal_id is not None:
        goal = service.goal(body.goal_id)
    elif body.split is not None and body.index is not None:
        goal = service.goal_in_split(body.split, body.index)
    else:
        goal = None
    entry = service.start(goal, seed=body.seed, client=client)
    with entry.lock:
        session = entry.session
        payload = {
            "session_id": entry.key,
            "goal": goal_json(session.goal),
            "observation": session.observation(),
            "available_actions": session.available_actions(),
        }
    return OrjsonResponse(payload, status_code=201)


def _native(session_id: str) -> str:
    """Sessions of the AgentGym and AGL families can be read here but not changed: a
    step or delete naming one is a 404, as for an unknown id."""
    if session_id.startswith((AGENTGYM_PREFIX, AGL_PREFIX)):
        raise SessionNotFoundError(f"unknown session {session_id!r}")
    return session_id


@router.post("/sessions/{session_id}/step")
async def step(session_id: str, body: StepBody, service: ServiceDep) -> Response:
    """One action. An invalid action is a normal answer with ``info.valid`` false.

    ``available_actions`` is the page's actions after the step (null once done): the
    agent builds its next prompt without a second request."""
    return OrjsonResponse(_stepped(service, session_id, body.action))


def _stepped(service: WebShopService, session_id: str, action: str) -> dict[str, Any]:
    stepped = service.step(_native(session_id), action, with_actions=True)
    return {**step_json(stepped.result), "available_actions": stepped.available_actions}


_STEP_PATH = re.compile(r"/sessions/([^/]+)/step")


class StepAhead:
    """Answers a well-formed ``POST /sessions/{id}/step`` ahead of FastAPI's own stack.

    The step is the request of every turn of every native episode; FastAPI's middleware,
    routing, dependencies and body handling cost the server more than the step itself
    (decision 0032). A pure ASGI middleware, innermost of the app's, so the token and the
    body cap apply as to every route: a body that :class:`StepBody` accepts is stepped
    and answered here with the route's own function; anything else (another media type,
    a body the model refuses) goes on, its body replayed, to the route, which words the
    error as ever. The route stays the API's description and the fallback."""

    def __init__(self, app: ASGIApp, service: WebShopService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _step_target(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client went away before its body came: nothing to answer
        try:
            action = StepBody.model_validate_json(body).action
        except ValidationError:
            await self.app(scope, replaying(body, receive), send)
            return
        try:
            answer = _stepped(self.service, target, action)
        except Exception as exc:
            known = client_error(exc)
            if known is None:
                raise  # the app's outer handler logs it and answers 500, as for a route
            await send_error(send, scope["path"], *known)
            return
        await OrjsonResponse(answer)(scope, receive, send)


def _step_target(scope: Scope) -> str | None:
    """The session id of a native step with a JSON body (or none declared, which FastAPI
    reads as JSON too), else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    matched = _STEP_PATH.fullmatch(scope["path"])
    if matched is None:
        return None
    for name, value in scope["headers"]:
        if name == b"content-type" and value.split(b";", 1)[0].strip() != b"application/json":
            return None
    return matched.group(1)


async def _body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, service: ServiceDep, steps: bool = False) -> Response:
    """The episode's outcome; ``?steps=true`` adds every step taken (action, observation,
    reward, done, valid), which is how external agents' steps get recorded."""
    return OrjsonResponse(service.summary(session_id, with_steps=steps))


@router.get("/sessions/{session_id}/observation")
async def get_observation(
    session_id: str,
    service: ServiceDep,
    mode: Literal["text", "text_rich", "html"] = "text",
) -> Response:
    with service.store.using(session_id) as entry:
        return OrjsonResponse({"observation": entry.session.observation(mode)})


@router.get("/sessions/{session_id}/available_actions")
async def get_available_actions(session_id: str, service: ServiceDep) -> Response:
    with service.store.using(session_id) as entry:
        return OrjsonResponse(entry.session.available_actions())


@router.delete("/sessions/{session_id}", status_code=204, responses={404: {}})
async def delete_session(session_id: str, service: ServiceDep) -> Response:
    """204 when the session was removed; 404 for an id it does not hold (never created,
    deleted already, or forgotten by a restart), as for every other session route."""
    if not service.store.delete(_native(session_id)):
        raise SessionNotFoundError(f"unknown session {session_id!r}")
    return Response(status_code=204)


@router.get("/goals")
async def list_goals(
    service: ServiceDep,
    split: Split | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    total, goals = service.list_goals(split, offset, limit)
    return OrjsonResponse({"total": total, "goals": [goal_json(g) for g in goals]})


@router.get("/goals/{goal_id}")
async def get_goal(goal_id: int, service: ServiceDep) -> Response:
    """A goal of the served set (the ids ``POST /sessions`` takes)."""
    return OrjsonResponse(goal_json(service.goal(goal_id)))


@router.get("/goals/{goal_set}/{goal_id}")
async def get_goal_in_set(goal_set: str, goal_id: int, service: ServiceDep) -> Response:
    """A goal of the catalog's ``synthetic`` or ``human`` set, served or not: the goal an
    AGL reset's ``info`` names by ``goal_set`` and ``goal_id``."""
    goal = service.goal_in_set(goal_set, goal_id)
    return OrjsonResponse({**goal_json(goal), "goal_set": goal_set})


@router.get("/health")
async def health(service: ServiceDep) -> Response:
    """``status`` is ``saturated`` while the live sessions fill the cap (new sessions get
    429 until some are deleted or expire), else ``ok``; the answer is 200 either way, so a
    container health check does not restart a busy server. ``noun_tagger`` names the
    reward's tagger (``exact``: the original's spaCy model) and its ``state`` (``loading``,
    ``ready``); one that ``failed`` to load makes the answer 503 with ``status: error``,
    since no purchase could be scored. ``unmatched_instructions`` counts the AGL resets
    whose instruction matched no goal since the start; ``unmatched`` says what they got
    (``random``: a random goal; ``refuse``: a 409)."""
    live, cap = len(service.store), service.store.max_sessions
    tagger = service.env.nouns
    state = tagger.state()
    failed = state.startswith("failed")
    return OrjsonResponse(
        {
            "status": "error" if failed else "saturated" if live >= cap else "ok",
            "products": service.num_products,
            "goals": len(service.env.goals),
            "sessions": live,
            "max_sessions": cap,
            "noun_tagger": {"name": tagger.name, "exact": tagger.exact, "state": state},
            "unmatched_instructions": service.unmatched_instructions,
            "unmatched": service.unmatched.value,
        },
        status_code=503 if failed else 200,
    )
