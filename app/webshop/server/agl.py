"""Routes of the Agent Lightning WebShop example's server (mounted under ``/agl``).

That server speaks ``POST /reset {session_id?, instruction?, task_id?}``, ``POST /step
{session_id, action}`` and ``GET /health``; bad bodies are 400 (an empty action too: "action
is required" there) and errors carry ``"error"``. Bodies are typed strictly, as the other
families' (``goal_id: true`` is a 400, not goal 1); unknown fields are ignored, as there.
The goal of a reset:

- ``instruction`` picks the goal with that instruction text (case, spacing and the price
  text ignored): a served goal, else one of the catalog's human goals (the
  ``items_human_ins.json`` instructions that the example's ``generate_tasks.py`` turns
  into tasks, also when the server serves synthetic goals); ``info.goal_set`` says which
  set ``info.goal_id`` counts in. One that no goal has gets a weighted random goal with
  ``info.instruction_matched`` false (true when it matched), is logged as a warning and
  counted in ``/health``; a server run with ``WSRL_ENV_UNMATCHED=refuse`` answers it 409
  instead. With an instruction, ``goal_id`` is ignored, as the example's server ignores it;
- else ``goal_id`` (or a ``session_id`` that is an integer or a string of digits) is a
  goal index of the served set; an unknown one is a 404;
- else a weighted random goal, also when an existing session is reset (as the example's
  server draws a new goal for it).

The session: a ``session_id`` that is not a goal index is the caller's own key (the
session under it starts a new episode, or is created); otherwise a fresh id is returned.
Caller keys live in this family's own namespace (stored as ``agl-<key>``), so no key
reaches a native or AgentGym session (``"ag-3"`` once reset AgentGym's env 3).
``task_id`` is accepted and ignored.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Response
from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from app.webshop.env import Goal
from app.webshop.server.deps import ClientDep, ServiceDep
from app.webshop.server.responses import OrjsonResponse
from app.webshop.server.service import MAX_ACTION_CHARS, Action, SessionEntry, WebShopService

router = APIRouter(prefix="/agl", tags=["agent-lightning"])

KEY_PREFIX = "agl-"
_ID_ALIASES = AliasChoices("session_id", "sessionId")


def _index_or_key(value: object) -> object:
    """One message for a reset's ``session_id`` of neither type (pydantic words one per
    member of the union, under ``session_id.int`` and ``session_id.str``)."""
    if value is None or (isinstance(value, int | str) and not isinstance(value, bool)):
        return value
    raise PydanticCustomError(
        "index_or_key", "Input should be a goal index (an integer) or a session id (a string)"
    )


IndexOrKey = Annotated[int | str | None, BeforeValidator(_index_or_key)]


class ResetBody(BaseModel):
    model_config = ConfigDict(strict=True)

    session_id: IndexOrKey = Field(default=None, validation_alias=_ID_ALIASES)
    goal_id: int | None = Field(default=None, validation_alias=AliasChoices("goal_id", "goalId"))
    instruction: str | None = Field(default=None, max_length=MAX_ACTION_CHARS)


class StepBody(BaseModel):
    model_config = ConfigDict(strict=True)

    session_id: str = Field(min_length=1, validation_alias=_ID_ALIASES)
    action: Action


def _goal_index(session_id: int | str | None) -> int | None:
    if isinstance(session_id, int):
        return session_id
    if isinstance(session_id, str) and session_id.strip().isdigit():
        return int(session_id)
    return None


def _store_key(session_id: str) -> str:
    """This family's store key for a session id: ids it generated carry the prefix."""
    return session_id if session_id.startswith(KEY_PREFIX) else KEY_PREFIX + session_id


def _own_key(session_id: int | str | None) -> str | None:
    """The caller's own session key: a ``session_id`` that is not a goal index."""
    if isinstance(session_id, str) and session_id and _goal_index(session_id) is None:
        return session_id
    return None


def _reset(
    service: WebShopService, body: ResetBody, client: str | None
) -> tuple[SessionEntry, str, bool | None]:
    """The started entry, its goal set, and whether ``instruction`` matched a goal (None:
    not given). An instruction decides the goal; ``goal_id`` is then ignored, as the
    example's server ignores it."""
    goal: Goal | None = None
    goal_set = service.env.goal_kind
    matched: bool | None = None
    if body.instruction:
        found = service.goal_for_instruction(body.instruction)
        if found is not None:
            goal, goal_set = found
        matched = found is not None
    else:
        digits = _goal_index(body.session_id)
        goal_index = body.goal_id if body.goal_id is not None else digits
        if goal_index is not None:
            goal = service.goal(goal_index)
    own = _own_key(body.session_id)
    key = _store_key(own) if own else KEY_PREFIX + uuid.uuid4().hex
    entry = service.start(goal, key=key, client=client, goal_set=goal_set if goal else None)
    return entry, goal_set if goal else service.env.goal_kind, matched


@router.post("/reset")
async def reset(service: ServiceDep, client: ClientDep, body: ResetBody | None = None) -> Response:
    body = body or ResetBody()
    entry, goal_set, matched = _reset(service, body, client)
    own_key = _own_key(body.session_id) is not None
    with entry.lock:
        session = entry.session
        info: dict[str, Any] = {
            "goal_id": session.goal.index,
            "goal_set": goal_set,
            "instruction": session.goal.instruction,
            "available_actions": session.available_actions(),
        }
        if matched is not None:
            info["instruction_matched"] = matched
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
    result = service.step(_store_key(body.session_id), body.action, shown=body.session_id).result
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
    """The example server's ``{status, sessions}``, plus ``unmatched_instructions``: the
    resets whose instruction matched no goal (see the native ``/health``)."""
    live = len(service.store)
    status = "saturated" if live >= service.store.max_sessions else "ok"
    return OrjsonResponse(
        {
            "status": status,
            "sessions": live,
            "unmatched_instructions": service.unmatched_instructions,
        }
    )
