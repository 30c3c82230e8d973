"""The client of WebShop's env server, its native HTTP API (``app/webshop/server``).

Every failure is an :class:`~app.core.env_client.EnvError` with a reason that names the
call and, for HTTP errors, the server's ``detail``.
"""

from __future__ import annotations

import logging
from typing import Any

from app.config import Settings
from app.core.env_client import EnvError, EnvSession, EnvStep
from app.core.http_pool import HttpError, HttpPool, HttpResponse, HttpTimeout

logger = logging.getLogger(__name__)


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


def probe(settings: Settings) -> str:
    """``wsrl doctor``'s check of the env server: reachable, its goals, its reward tagger
    (a 503 when its tagger failed to load is an error here)."""
    with EnvClient(settings.env_url, timeout_s=5.0) as client:
        health = client.health()
    return f"{settings.env_url}: {health.get('goals')} goals, {_tagger_text(health)}"


def _tagger_text(health: dict[str, Any]) -> str:
    """The reward's noun tagger as the env server's ``/health`` names it."""
    tagger = health.get("noun_tagger")
    if not isinstance(tagger, dict):
        return "reward noun tagger not reported (an env server older than this wsrl)"
    if tagger.get("exact"):
        return f"reward noun tagger {tagger.get('name')} (the original's; {tagger.get('state')})"
    return (
        f"reward noun tagger {tagger.get('name')} (approximate, chosen with "
        "WSRL_NOUN_TAGGER: rewards differ from the original's on about 1 % of purchases)"
    )
