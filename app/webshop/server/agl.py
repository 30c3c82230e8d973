"""Routes of the Agent Lightning WebShop example's server (mounted under ``/agl``).

That server speaks ``POST /reset {session_id?, instruction?}``, ``POST /step {session_id,
action}`` and ``GET /health``; bad bodies are 400 and errors carry ``"error"``. Here:

- ``session_id`` that is an integer (or a string of digits) is a goal index: a new
  session on that goal, under a fresh id returned in the answer;
- ``session_id`` that is any other string is the caller's own session key: the session
  under it starts a new episode on its goal, or is created (weighted random goal) when
  the key is new, as the example's server does. Caller keys live in this family's own
  namespace (stored as ``agl-<key>``), so no key reaches a native or AgentGym session
  (``"ag-3"`` once reset AgentGym's env 3);
- ``instruction`` picks the goal with that instruction text (404 when none has it);
- neither: a new session on a weighted random goal.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Response
from pydantic import AliasChoices, BaseModel, Field

from app.webshop.server.deps import ClientDep, ServiceDep
from app.webshop.server.responses import OrjsonResponse
from app.webshop.server.service import MAX_ACTION_CHARS, SessionEntry, WebShopService
from app.webshop.server.sessions import SessionError

router = APIRouter(prefix="/agl", tags=["agent-lightning"])

KEY_PREFIX = "agl-"
_ID_ALIASES = AliasChoices("session_id", "sessionId")


class ResetBody(BaseModel):
    session_id: int | str | None = Field(default=None, validation_alias=_ID_ALIASES)
    instruction: str | None = Field(default=None, max_length=MAX_ACTION_CHARS)


class StepBody(BaseModel):
    session_id: str = Field(min_length=1, validation_alias=_ID_ALIASES)
    action: str = Field(min_length=1, max_length=MAX_ACTION_CHARS)


class BadRequestError(SessionError):
    status = 400


def _goal_index(session_id: int | str | None) -> int | None:
    if isinstance(session_id, int):
        return session_id
    if isinstance(session_id, str) and session_id.strip().isdigit():
        return int(session_id)
    return None


def _store_key(session_id: str) -> str:
    """This family's store key for a session id: ids it generated carry the prefix."""
    return session_id if session_id.startswith(KEY_PREFIX) else KEY_PREFIX + session_id


def _reset(service: WebShopService, body: ResetBody, client: str | None) -> SessionEntry:
    goal_index = _goal_index(body.session_id)
    if goal_index is not None:
        if body.instruction:
            raise BadRequestError("give a goal index (session_id) or an instruction, not both")
        return service.start(
            service.goal(goal_index), key=KEY_PREFIX + uuid.uuid4().hex, client=client
        )
    goal = service.goal_by_instruction(body.instruction) if body.instruction else None
    key = body.session_id if isinstance(body.session_id, str) and body.session_id else None
    if key is None:
        return service.start(goal, key=KEY_PREFIX + uuid.uuid4().hex, client=client)
    key = _store_key(key)
    if goal is None and service.store.contains(key):
        goal = service.store.get(key).session.goal
    return service.start(goal, key=key, client=client)


@router.post("/reset")
async def reset(service: ServiceDep, client: ClientDep, body: ResetBody | None = None) -> Response:
    body = body or ResetBody()
    entry = _reset(service, body, client)
    own_key = isinstance(body.session_id, str) and _goal_index(body.session_id) is None
    with entry.lock:
        session = entry.session
        info: dict[str, Any] = {
            "goal_id": session.goal.index,
            "instruction": session.goal.instruction,
            "available_actions": session.available_actions(),
        }
        payload = {
            "session_id": body.session_id if own_key else entry.key,
            "observation": session.observation(),
            "done": False,
            "reward": 0.0,
            "info": info,
        }
    return OrjsonResponse(payload)


@router.post("/step")
async def step(body: StepBody, service: ServiceDep) -> Response:
    result = service.step(_store_key(body.session_id), body.action).result
    return OrjsonResponse(
        {
            "session_id": body.session_id,
            "observation": result.observation,
            "done": result.done,
            "reward": result.reward,
            "info": result.info,
        }
    )


@router.get("/health")
async def health(service: ServiceDep) -> Response:
    live = len(service.store)
    status = "saturated" if live >= service.store.max_sessions else "ok"
    return OrjsonResponse({"status": status, "sessions": live})
