"""AgentGym-compatible routes (mounted under ``/agentgym``).

AgentGym's WebShop client talks to integer env ids: ``/create`` opens one (already reset
on a weighted random goal), ``/reset`` starts a new episode on it with ``session_id`` as
the goal index (negative counts from the end, as Python indexing does in the real server;
out of range is a 404 where the real server fails with a 500), ``/step`` answers
``{state, reward, done, info}`` with ``info`` null as the real server does, ``/close``
ends it and answers whether it was open.

Bodies are typed strictly, as the other families' (``env_idx: "10"`` is a 422; the real
server's pydantic coerced it, but AgentGym's client sends the integers ``/create``
returned); unknown fields are ignored, as there. An empty action is played, as the real
server plays it (a no-op step): AgentGym's client sends whatever its parser read after a
reply's ``Action:``, empty too, and asserts a 200 on every step, so a 422 would end its
run. Its sessions live in the same store as the native ones (same TTL and cap); an env id is
kept as the store key ``ag-<id>``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.webshop.env import Session
from app.webshop.pages import Page
from app.webshop.server.deps import ServiceDep
from app.webshop.server.responses import OrjsonResponse
from app.webshop.server.service import MAX_ACTION_CHARS, GoalNotFoundError, WebShopService

router = APIRouter(prefix="/agentgym", tags=["agentgym"])

KEY_PREFIX = "ag-"
EnvIdx = Annotated[int, Query(description="id returned by /create")]


class EnvIds:
    """Hands out increasing integer env ids; safe across the server's threads."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._counter)


class StepQuery(BaseModel):
    model_config = ConfigDict(strict=True)

    env_idx: int
    action: str = Field(max_length=MAX_ACTION_CHARS)


class ResetQuery(BaseModel):
    model_config = ConfigDict(strict=True)

    env_idx: int
    session_id: int | None = None


class CloseQuery(BaseModel):
    model_config = ConfigDict(strict=True)

    env_idx: int


def _key(env_idx: int) -> str:
    return f"{KEY_PREFIX}{env_idx}"


@router.get("/")
async def ok() -> Response:
    return OrjsonResponse("ok")


@router.get("/list_envs")
async def list_envs(service: ServiceDep) -> Response:
    ids = [int(k[len(KEY_PREFIX) :]) for k in service.store.ids() if k.startswith(KEY_PREFIX)]
    return OrjsonResponse(sorted(ids))


@router.post("/create")
async def create(request: Request, service: ServiceDep) -> Response:
    """A new env id with an episode already started on a weighted random goal."""
    env_idx = request.app.state.agentgym_ids.next()
    service.start(None, key=_key(env_idx), client=request.client.host if request.client else None)
    return OrjsonResponse(env_idx)


@router.post("/step")
async def step(body: StepQuery, service: ServiceDep) -> Response:
    result = service.step(_key(body.env_idx), body.action, shown=body.env_idx).result
    return OrjsonResponse(
        {"state": result.observation, "reward": result.reward, "done": result.done, "info": None}
    )


@router.post("/reset")
async def reset(body: ResetQuery, service: ServiceDep) -> Response:
    """A new episode on the same env id: goal ``session_id``, or weighted random."""
    key = _key(body.env_idx)
    client = service.store.get(key, body.env_idx).client  # 404 / 410 before any work
    goal = None
    if body.session_id is not None:
        index, total = body.session_id, len(service.env.goals)
        if not -total <= index < total:
            raise GoalNotFoundError(
                f"unknown goal {index}: session_id runs from {-total} to {total - 1}"
            )
        goal = service.goal(index % total)
    entry = service.start(goal, key=key, client=client)
    with entry.lock:
        return OrjsonResponse([entry.session.observation(), None])


def _read(service: WebShopService, env_idx: int, read: Callable[[Session], Any]) -> Response:
    with service.store.using(_key(env_idx), env_idx) as entry:
        return OrjsonResponse(read(entry.session))


@router.get("/observation")
async def observation(env_idx: EnvIdx, service: ServiceDep) -> Response:
    return _read(service, env_idx, lambda s: s.observation())


@router.get("/available_actions")
async def available_actions(env_idx: EnvIdx, service: ServiceDep) -> Response:
    return _read(service, env_idx, lambda s: s.available_actions())


def _instruction_heading(session: Session, page: Page | None = None) -> str:
    """The text of the page's ``#instruction-text`` heading, which the real server returns:
    ``Instruction: <text>`` on the search page, ``Instruction:<text>`` (no space) on the
    others. The done page has none (the real server fails there): it answers as the
    search page."""
    page = session.page if page is None else page
    prefix = "Instruction: " if page in (Page.SEARCH, Page.DONE) else "Instruction:"
    return prefix + session.instruction_text


@router.get("/instruction_text")
async def instruction_text(env_idx: EnvIdx, service: ServiceDep) -> Response:
    """The instruction as the current page shows it (see :func:`_instruction_heading`)."""
    return _read(service, env_idx, _instruction_heading)


@router.get("/state")
async def state(env_idx: EnvIdx, service: ServiceDep) -> Response:
    """The page as HTML (there is no URL: pages are not served as a web site here) and
    the instruction as read at reset, from the search page."""
    return _read(
        service,
        env_idx,
        lambda s: {
            "url": "",
            "html": s.observation("html"),
            "instruction_text": _instruction_heading(s, Page.SEARCH),
        },
    )


@router.post("/close")
async def close(body: CloseQuery, service: ServiceDep) -> Response:
    """``true`` when the env was open and is now closed, ``false`` when it was not open."""
    return OrjsonResponse(service.store.delete(_key(body.env_idx)))
