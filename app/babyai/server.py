"""The BabyAI env server: AgentGym's BabyAI HTTP protocol over :mod:`.game`.

The protocol, as AgentGym's ``agentenv-babyai`` server answers it and its
``BabyAIEnvClient`` (agentenv/envs/babyai.py) reads it:

- ``POST /create`` (no body) -> ``{"id": int}``: a new env id; no episode yet.
- ``POST /reset`` ``{"id": int, "data_idx": int}`` -> ``{"observation": str, "reward":
  0.0, "score": 0.0, "done": false, "deleted": false}``: a new episode on that id, level
  ``data_idx % 40`` of AgentGym's table, seed ``data_idx // 40``. The observation opens
  with ``Your goal: <mission>``.
- ``POST /step`` ``{"id": int, "action": str}`` -> ``{"observation": str, "reward": float,
  "score": float, "done": bool}``: ``reward`` is this step's, ``score`` the episode's sum
  so far (AgentGym's client reports ``score`` as the step's reward). An action that is
  not available is answered (200) with why, as the real server does; so is an empty one,
  which the client sends when a reply has no ``Action:`` line.
- ``GET /observation?id=`` -> the reset answer's fields for the current state, the goal
  included.
- ``POST /close`` ``{"id": int}`` -> ``true`` when the id was open, ``false`` when not.

Every observation ends with ``Available actions: [...]``, the actions as a JSON list.
Added here: ``GET /available_actions?id=`` -> that list as JSON (for valid-action
decoding). Left out: ``/render`` (an image, for AgentGym's visual mode only).

Where this server differs, it is to fail clearly: the real one answers every error with a
200 and ``{"error": ...}``; here an error has a 4xx status and ``{"detail": message,
"error": message}`` (404 unknown or closed id, 409 a step before any reset or after the
episode ended, 422 a malformed body, 429 too many open ids). Ids idle for ``session_ttl_s``
are closed when ids are created, so clients that never close cannot fill the server.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app.babyai.game import MAX_TURNS, BabyAIGame, GameOverError

logger = logging.getLogger(__name__)

MAX_ACTION_CHARS = 1_000
MAX_DATA_IDX = 2**31 - 1


class EnvError(Exception):
    """An error of the request; ``status`` is what the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Env:
    """One env id: its episode (None before the first reset), the last step's reward and
    the episode's score."""

    game: BabyAIGame | None = None
    reward: float = 0.0
    score: float = 0.0
    last_used: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Envs:
    """The open env ids. The dict has one lock; each env has its own, so that steps on one
    id run one after the other while different ids do not wait for each other."""

    def __init__(
        self,
        max_envs: int,
        ttl_s: float,
        max_turns: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_envs = max_envs
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self.clock = clock
        self._envs: dict[int, _Env] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def create(self) -> int:
        now = self.clock()
        with self._lock:
            idle = [i for i, e in self._envs.items() if now - e.last_used > self.ttl_s]
            for env_id in idle:
                del self._envs[env_id]
            if len(self._envs) >= self.max_envs:
                raise EnvError(429, f"too many open envs ({self.max_envs}); close some first")
            env_id = next(self._ids)
            self._envs[env_id] = _Env(last_used=now)
        if idle:
            logger.info("closed %d idle BabyAI envs", len(idle))
        return env_id

    @contextmanager
    def using(self, env_id: int) -> Iterator[_Env]:
        with self._lock:
            env = self._envs.get(env_id)
        if env is None:
            raise EnvError(404, f"unknown env id {env_id} (never created, or closed)")
        with env.lock:
            env.last_used = self.clock()
            yield env

    def close(self, env_id: int) -> bool:
        with self._lock:
            return self._envs.pop(env_id, None) is not None


class StrictBody(BaseModel):
    # AgentGym's client sends the integers /create returned; "3" for an id is a mistake.
    model_config = ConfigDict(strict=True)


class IdBody(StrictBody):
    id: int


class ResetBody(IdBody):
    data_idx: int = Field(ge=0, le=MAX_DATA_IDX)


class StepBody(IdBody):
    action: str = Field(max_length=MAX_ACTION_CHARS)


def _envs(request: Request) -> Envs:
    envs: Envs = request.app.state.envs
    return envs


EnvsDep = Annotated[Envs, Depends(_envs)]
IdQuery = Annotated[int, Query(description="the id /create returned")]
router = APIRouter()


def _game(env: _Env) -> BabyAIGame:
    if env.game is None:
        raise EnvError(409, "no episode yet: POST /reset first")
    return env.game


def _state(env: _Env) -> dict[str, Any]:
    """The answer of /reset and /observation: the goal, the view and the episode so far."""
    game = _game(env)
    return {
        "observation": game.observation(with_goal=True),
        "reward": env.reward,
        "score": env.score,
        "done": game.done,
        "deleted": False,
    }


@router.get("/")
def hello() -> str:
    return "BabyAI environment (AgentGym's BabyAI protocol)"


@router.post("/create")
def create(envs: EnvsDep) -> dict[str, int]:
    return {"id": envs.create()}


@router.post("/reset")
def reset(body: ResetBody, envs: EnvsDep) -> dict[str, Any]:
    """A new episode on ``id`` (one ``data_idx`` always starts the same one); the episode
    before it, ended or not, is dropped."""
    with envs.using(body.id) as env:
        env.game = BabyAIGame.from_data_idx(body.data_idx, max_turns=envs.max_turns)
        env.reward = env.score = 0.0
        return _state(env)


@router.post("/step")
def step(body: StepBody, envs: EnvsDep) -> dict[str, Any]:
    with envs.using(body.id) as env:
        try:
            result = _game(env).step(body.action)
        except GameOverError as exc:
            raise EnvError(409, f"env {body.id}: {exc}") from exc
        env.reward = result.reward
        env.score += result.reward
        return {
            "observation": result.observation,
            "reward": result.reward,
            "score": env.score,
            "done": result.done,
        }


@router.get("/observation")
def observation(id: IdQuery, envs: EnvsDep) -> dict[str, Any]:
    with envs.using(id) as env:
        return _state(env)


@router.get("/available_actions")
def available_actions(id: IdQuery, envs: EnvsDep) -> list[str]:
    with envs.using(id) as env:
        return _game(env).available_actions


@router.post("/close")
def close(body: IdBody, envs: EnvsDep) -> bool:
    """Closing an id that is not open is not an error: ``false``."""
    return envs.close(body.id)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message, "error": message}, status_code=status)


async def _env_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EnvError)
    return _error(exc.status, exc.message)


async def _bad_request(_: Request, exc: Exception) -> JSONResponse:
    """One line for the first problem: ``body.action: Field required``."""
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return _error(422, f"{where}: {first['msg']}")


def create_app(
    *, max_turns: int = MAX_TURNS, max_envs: int = 10_000, session_ttl_s: float = 3_600.0
) -> FastAPI:
    """The BabyAI env server.

    ``max_turns``: actions per episode before it ends unsolved (refused ones count).
    ``max_envs``: open ids at once (429 beyond). ``session_ttl_s``: idle seconds after
    which an id is closed.
    """
    app = FastAPI(
        title="BabyAI environment",
        summary="BabyAI levels of minigrid as text, over AgentGym's BabyAI protocol.",
    )
    app.state.envs = Envs(max_envs=max_envs, ttl_s=session_ttl_s, max_turns=max_turns)
    app.add_exception_handler(EnvError, _env_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
    app.include_router(router)
    return app
