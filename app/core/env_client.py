"""A small client for the env server's native HTTP API (``app/webshop/server``).

Every failure is an :class:`EnvError` with a reason that names the call and, for HTTP
errors, the server's ``detail``; ``retryable`` tells a caller whether trying the attempt
again later can help (connection errors, timeouts, 5xx, 429) or not (404, 410, 422).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.core.http_pool import HttpError, HttpPool, HttpResponse, HttpTimeout

logger = logging.getLogger(__name__)


class EnvError(RuntimeError):
    """A failed env server call; ``status_code`` is None when no HTTP answer came."""

    def __init__(self, reason: str, *, status_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status_code = status_code

    @property
    def retryable(self) -> bool:
        return self.status_code is None or self.status_code >= 500 or self.status_code == 429


@dataclass(frozen=True)
class EnvSession:
    """A started episode: everything the agent needs for its first step."""

    session_id: str
    goal: dict[str, Any]
    observation: str
    available_actions: dict[str, Any]

    @property
    def goal_id(self) -> int:
        return int(self.goal["id"])

    @property
    def instruction(self) -> str:
        return str(self.goal.get("instruction", ""))


@dataclass(frozen=True)
class EnvStep:
    """One step's answer. ``available_actions`` is the page's actions after the step when
    the server sends them (the native API does; None once done or from older servers)."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any]
    available_actions: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        """False when the env says the action did nothing (``info.valid``)."""
        return bool(self.info.get("valid", True))


class EnvClient:
    """Thread-safe (one keep-alive connection pool, :mod:`app.core.http_pool`); close it
    when done."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = HttpPool(self.base_url, timeout_s=timeout_s, headers=headers)

    @classmethod
    def from_settings(cls, settings: Settings) -> EnvClient:
        return cls(settings.env_url, timeout_s=settings.env_timeout_s, token=settings.env_token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> HttpResponse:
        what = f"{method} {path}"
        try:
            response = self._http.request(method, path, **kwargs)
        except HttpTimeout as exc:
            raise EnvError(f"env server {self.base_url}: {what} timed out") from exc
        except HttpError as exc:
            raise EnvError(f"env server {self.base_url} unreachable: {what}: {exc}") from exc
        if response.status_code >= 400:
            raise EnvError(
                f"env server {what} -> {response.status_code}: {_detail(response)}",
                status_code=response.status_code,
            )
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise EnvError(
                f"env server {method} {path}: answer is not JSON: {response.text[:200]!r}",
                status_code=response.status_code,
            ) from exc

    def create_session(
        self,
        goal_id: int | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        seed: int | None = None,
    ) -> EnvSession:
        """Start an episode on a goal id, or split + index, or a weighted random goal."""
        body: dict[str, Any] = {}
        if goal_id is not None:
            body["goal_id"] = goal_id
        if split is not None:
            body["split"] = split
        if index is not None:
            body["index"] = index
        if seed is not None:
            body["seed"] = seed
        data = self._json("POST", "/sessions", json=body)
        return EnvSession(
            session_id=str(data["session_id"]),
            goal=data["goal"],
            observation=data["observation"],
            available_actions=data["available_actions"],
        )

    def step(self, session_id: str, action: str) -> EnvStep:
        data = self._json("POST", f"/sessions/{session_id}/step", json={"action": action})
        return EnvStep(
            observation=data["observation"],
            reward=float(data["reward"]),
            done=bool(data["done"]),
            info=data.get("info") or {},
            available_actions=data.get("available_actions"),
        )

    def available_actions(self, session_id: str) -> dict[str, Any]:
        return self._json("GET", f"/sessions/{session_id}/available_actions")

    def get_session(self, session_id: str, *, steps: bool = False) -> dict[str, Any]:
        """``{session_id, goal_id, done, reward, reward_parts, num_steps, purchased_asin}``,
        plus ``steps`` (one dict per step taken) when ``steps`` is true."""
        params = {"steps": "true"} if steps else None
        return self._json("GET", f"/sessions/{session_id}", params=params)

    def close_session(self, session_id: str) -> None:
        """Idempotent: closing a session the server no longer holds (404, 410) is not an
        error."""
        try:
            self._call("DELETE", f"/sessions/{session_id}")
        except EnvError as exc:
            if exc.status_code not in (404, 410):
                raise

    def goals(self, *, split: str | None = None, offset: int = 0, limit: int = 1000) -> Any:
        """A page of the server's goals: ``{"total": n, "goals": [...]}`` (of ``split``, or
        all); a split the server does not have is an :class:`EnvError` naming its splits."""
        params = {"offset": str(offset), "limit": str(limit)}
        if split is not None:
            params["split"] = split
        return self._json("GET", "/goals", params=params)

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/health")


def _detail(response: HttpResponse) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:300]
    return str(body)[:300]
