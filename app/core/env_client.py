"""What a player gets from any env server's client: a session, a step, an error.

Each environment's client (``app/environments``) answers with these: an
:class:`EnvSession` when an episode opens, an :class:`EnvStep` per action, and an
:class:`EnvError` for every failure, with a reason that names the call and, for HTTP
errors, the server's message; ``retryable`` tells a caller whether trying the attempt
again later can help (connection errors, timeouts, 5xx, 429) or not (404, 410, 422).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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


class EnvServer(Protocol):
    """What a player needs of an env server's client once a session is open (the session
    itself is opened the environment's way, ``Environment.open_session``)."""

    def step(self, session_id: str, action: str) -> EnvStep: ...

    def available_actions(self, session_id: str) -> dict[str, Any]: ...

    def close_session(self, session_id: str) -> None: ...

    def close(self) -> None: ...
