"""A client of env servers that speak AgentGym's HTTP protocol, played like :class:`EnvClient`.

AgentGym (``agentenv-*`` servers, one per environment) serves each environment by the same
few calls: ``POST /create`` -> ``{"id": int}`` (an env id, no episode yet), ``POST /reset``
``{"id", "data_idx"}`` (an episode: ``data_idx`` picks the task), ``POST /step`` ``{"id",
"action"}`` -> ``{"observation", "reward", "score", "done"}``, ``GET /observation?id=``
and ``POST /close`` ``{"id"}``. Our BabyAI server (``app/babyai``) adds ``GET
/available_actions?id=``; servers without it list the actions on the observation's last
line, ``Available actions: [...]``.

A step's ``reward`` here is the answer's ``score``, the episode's total so far, not the
answer's ``reward`` (that step's alone): the worker takes the last step's reward as the
episode's, as AgentGym's own clients report ``score``. The step's own reward travels in
``info["step_reward"]``.

AgentGym's own servers answer errors with a 200 and ``{"error": ...}``, ours with a 4xx;
both are an :class:`EnvError` (with the answer's status), retryable only when no answer
came, or a 5xx or 429 did.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from app.core.env_client import EnvError, EnvSession, EnvStep
from app.core.http_pool import HttpError, HttpPool, HttpResponse, HttpTimeout

ACTIONS_LINE = "Available actions: "
STEP_KEYS = ("observation", "reward", "score", "done")


def actions_in(observation: str) -> list[str]:
    """The actions the observation's last line lists (``Available actions: [json]``), or
    none when it lists none or not as a JSON list of strings."""
    last = observation.rstrip().rpartition("\n")[2]
    if not last.startswith(ACTIONS_LINE):
        return []
    try:
        actions = json.loads(last.removeprefix(ACTIONS_LINE))
    except ValueError:
        return []
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        return []
    return actions


class AgentGymClient:
    """Thread-safe (one keep-alive pool, :mod:`app.core.http_pool`); close it when done.

    It keeps each open session's last observation, where a server without
    ``/available_actions`` lists the actions; whether the server has that route is
    learnt from the first answer to it.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = HttpPool(self.base_url, timeout_s=timeout_s)
        self._observations: dict[str, str] = {}
        self._actions_route: bool | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgentGymClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> HttpResponse:
        what = f"{method} {path}"
        try:
            return self._http.request(method, path, **kwargs)
        except HttpTimeout as exc:
            raise EnvError(f"env server {self.base_url}: {what} timed out") from exc
        except HttpError as exc:
            raise EnvError(f"env server {self.base_url} unreachable: {what}: {exc}") from exc

    def _json(self, method: str, path: str, *keys: str, **kwargs: Any) -> Any:
        """The answer's JSON, an object with ``keys`` when any are named."""
        return _answer(f"{method} {path}", self._request(method, path, **kwargs), *keys)

    def create_session(self, data_idx: int, instruction: str) -> EnvSession:
        """A new env id with an episode on ``data_idx``; the id is closed again if the reset
        fails."""
        env_id = self._json("POST", "/create", "id")["id"]
        session_id = str(env_id)
        try:
            body = {"id": env_id, "data_idx": data_idx}
            observation = str(self._json("POST", "/reset", "observation", json=body)["observation"])
        except EnvError:
            with contextlib.suppress(EnvError):  # the reset's error is the one to report
                self.close_session(session_id)
            raise
        self._observations[session_id] = observation
        return EnvSession(
            session_id=session_id,
            goal={"id": data_idx, "instruction": instruction},
            observation=observation,
            available_actions=self.available_actions(session_id),
        )

    def step(self, session_id: str, action: str) -> EnvStep:
        body = {"id": _env_id(session_id), "action": action}
        data = self._json("POST", "/step", *STEP_KEYS, json=body)
        observation, done = str(data["observation"]), bool(data["done"])
        self._observations[session_id] = observation
        return EnvStep(
            observation=observation,
            reward=float(data["score"]),
            done=done,
            info={"valid": True, "step_reward": float(data["reward"])},
            available_actions=None if done else self.available_actions(session_id),
        )

    def available_actions(self, session_id: str) -> dict[str, Any]:
        """``{"actions": [...]}``: the server's ``/available_actions`` where it has one, else
        the list on the last observation's last line, else none."""
        if self._actions_route is not False:
            params = {"id": str(_env_id(session_id))}
            response = self._request("GET", "/available_actions", params=params)
            if not _route_missing(response):
                self._actions_route = True
                return {"actions": list(_answer("GET /available_actions", response))}
            self._actions_route = False
        return {"actions": actions_in(self._observations.get(session_id, ""))}

    def close_session(self, session_id: str) -> None:
        """Idempotent: closing an id the server no longer holds is not an error (ours
        answers ``false``, others a 404, or a 200 with ``{"error": ...}``)."""
        self._observations.pop(session_id, None)
        try:
            self._json("POST", "/close", json={"id": _env_id(session_id)})
        except EnvError as exc:
            if exc.status_code not in (200, 404, 410):
                raise


def _env_id(session_id: str) -> int:
    """AgentGym's ids are integers; any other session id is one no server holds."""
    try:
        return int(session_id)
    except ValueError:
        raise EnvError(f"unknown env id {session_id!r}: not an integer", status_code=404) from None


def _body(response: HttpResponse) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _answer(what: str, response: HttpResponse, *keys: str) -> Any:
    """The answer's JSON; an error status, an ``{"error": ...}`` answer, one that is not
    JSON or an object without ``keys`` raise (with the answer's status)."""
    body = _body(response)
    error = body.get("error") if isinstance(body, dict) else None
    if response.status_code >= 400 or error:
        message = error or (body.get("detail") if isinstance(body, dict) else None)
        message = str(message or response.text[:300] or response.reason_phrase)[:300]
        raise EnvError(
            f"env server {what} -> {response.status_code}: {message}",
            status_code=response.status_code,
        )
    if body is None:
        problem = f"answer is not JSON: {response.text[:200]!r}"
    elif keys and not (isinstance(body, dict) and all(k in body for k in keys)):
        problem = f"answer lacks one of {', '.join(keys)}: {str(body)[:200]}"
    else:
        return body
    raise EnvError(f"env server {what}: {problem}", status_code=response.status_code)


def _route_missing(response: HttpResponse) -> bool:
    """A 405, or a 404 that is not the server's own error (which names an unknown id):
    the route is not served."""
    if response.status_code == 405:
        return True
    body = _body(response)
    return response.status_code == 404 and not (isinstance(body, dict) and "error" in body)
