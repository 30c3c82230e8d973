"""The live-session store shared by every route family of the env server.

A session is one episode of :class:`app.webshop.env.Session` plus the bookkeeping the HTTP
API reports (steps taken, last use, the purchased product). The store is safe under
concurrent requests: its dict is guarded by one lock, and each entry carries its own lock
so that two steps on the same session run one after the other while steps on different
sessions do not wait for each other.

Sessions expire after ``ttl_s`` seconds without use. An expired id is remembered (a
bounded number of them, for a while) so that the API can answer 410 Gone instead of 404.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class SessionError(Exception):
    """Base of the store's errors; ``status`` is the HTTP status the API answers with."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionNotFoundError(SessionError):
    status = 404


class SessionExpiredError(SessionError):
    status = 410


class TooManySessionsError(SessionError):
    status = 429


@dataclass
class SessionEntry:
    """One live episode. ``lock`` serialises every use of ``session``."""

    key: str
    session: Any
    last_used: float
    client: str | None = None  # who created it (the peer's address), for the per-client cap
    num_steps: int = 0
    purchased_asin: str | None = None
    # One dict per step (index, action, observation, reward, done, valid): agents that
    # drive the env themselves (external agents) have their steps recorded from here.
    steps: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class SessionStore:
    """Sessions by key, with an idle TTL, a cap on live sessions, a cap per client and a
    memory of expiries.

    The per-client cap (half the total by default) keeps one client that opens sessions
    without closing them (a flood, a leaking agent) from taking every slot: others can
    still start episodes while it gets 429.

    ``clock`` is injectable so that tests can move time; it defaults to a monotonic clock.
    Keys are strings; callers that need their own key scheme (the AgentGym integer ids)
    pass ``key`` to :meth:`add`.
    """

    def __init__(
        self,
        ttl_s: float = 600.0,
        max_sessions: int = 10_000,
        *,
        max_per_client: int | None = None,
        remember_expired: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"session TTL must be positive, got {ttl_s}")
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_per_client = (
            max(1, max_sessions // 2) if max_per_client is None else max_per_client
        )
        self._per_client: dict[str, int] = {}
        self._remember_expired = remember_expired
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, SessionEntry] = {}
        self._expired: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, session: Any, key: str | None = None, client: str | None = None) -> SessionEntry:
        """Store a new session; an existing entry under ``key`` is replaced (a reset).

        Raises :class:`TooManySessionsError` when the cap, or ``client``'s share of it, is
        reached even after dropping the sessions that have expired.
        """
        now = self._clock()
        with self._lock:
            replacing = key is not None and key in self._entries
            if not replacing and len(self._entries) >= self.max_sessions:
                self._sweep_locked(now)
                if len(self._entries) >= self.max_sessions:
                    raise TooManySessionsError(
                        f"too many live sessions ({self.max_sessions}); delete finished "
                        f"sessions or wait for idle ones to expire after {self.ttl_s:g} s"
                    )
            if not replacing and client is not None and self._full_locked(client):
                self._sweep_locked(now)
                if self._full_locked(client):
                    raise TooManySessionsError(
                        f"too many live sessions from {client} ({self.max_per_client}); "
                        "delete finished sessions or wait for idle ones to expire after "
                        f"{self.ttl_s:g} s"
                    )
            if key is None:
                key = uuid.uuid4().hex
            self._expired.pop(key, None)
            old = self._entries.get(key)
            if old is not None:
                self._forget_locked(old)
            entry = SessionEntry(key=key, session=session, last_used=now, client=client)
            self._entries[key] = entry
            if client is not None:
                self._per_client[client] = self._per_client.get(client, 0) + 1
            return entry

    def _full_locked(self, client: str) -> bool:
        return self._per_client.get(client, 0) >= self.max_per_client

    def _forget_locked(self, entry: SessionEntry) -> None:
        """Drop ``entry`` from its client's count (the caller removes it from the dict)."""
        if entry.client is None:
            return
        left = self._per_client.get(entry.client, 0) - 1
        if left > 0:
            self._per_client[entry.client] = left
        else:
            self._per_client.pop(entry.client, None)

    def get(self, key: str, shown: object = None) -> SessionEntry:
        """The live entry for ``key``, marked as used now.

        Raises :class:`SessionExpiredError` for an id that expired and
        :class:`SessionNotFoundError` for one never seen (or deleted, or forgotten); their
        messages name ``shown``, the id as the caller sent it, when the key differs (the
        AgentGym and AGL families store theirs under a prefix).
        """
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry.last_used > self.ttl_s:
                self._expire_locked(entry, now)
                entry = None
            if entry is None:
                named = key if shown is None else shown
                if key in self._expired:
                    raise SessionExpiredError(
                        f"session {named!r} expired after {self.ttl_s:g} s without use; "
                        "start a new one"
                    )
                raise SessionNotFoundError(f"unknown session {named!r}")
            entry.last_used = now
            return entry

    def contains(self, key: str) -> bool:
        """Whether ``key`` names a live (not yet expired) session; does not touch it."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and now - entry.last_used <= self.ttl_s

    def ids(self) -> list[str]:
        """The keys of the sessions held now (expired ones included until swept)."""
        with self._lock:
            return list(self._entries)

    def delete(self, key: str) -> bool:
        """Remove a session; deleting a missing id is a no-op. True when one was removed."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return False
            self._forget_locked(entry)
            return True

    def sweep(self) -> int:
        """Drop every session idle past the TTL; returns how many were dropped."""
        with self._lock:
            return self._sweep_locked(self._clock())

    @contextmanager
    def using(self, key: str, shown: object = None) -> Iterator[SessionEntry]:
        """The entry for ``key``, held under its own lock for the duration of the block
        (``shown``: as for :meth:`get`)."""
        entry = self.get(key, shown)
        with entry.lock:
            entry.last_used = self._clock()
            yield entry

    def _sweep_locked(self, now: float) -> int:
        stale = [e for e in self._entries.values() if now - e.last_used > self.ttl_s]
        for entry in stale:
            self._expire_locked(entry, now)
        return len(stale)

    def _expire_locked(self, entry: SessionEntry, now: float) -> None:
        del self._entries[entry.key]
        self._forget_locked(entry)
        self._expired[entry.key] = now
        while len(self._expired) > self._remember_expired:
            self._expired.popitem(last=False)
