"""The session store on its own: TTL, cap, expiry memory, per-session serialisation."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.webshop.server.sessions import (
    SessionExpiredError,
    SessionNotFoundError,
    SessionStore,
    TooManySessionsError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_get_unknown_raises_not_found() -> None:
    with pytest.raises(SessionNotFoundError, match="unknown session"):
        SessionStore().get("x")


def test_idle_session_expires_and_is_remembered() -> None:
    clock = Clock()
    store = SessionStore(ttl_s=10, clock=clock)
    key = store.add(object()).key
    clock.now = 9
    store.get(key)  # use renews the lease
    clock.now = 18
    assert store.get(key).key == key
    clock.now = 28.5
    with pytest.raises(SessionExpiredError, match="expired"):
        store.get(key)
    with pytest.raises(SessionExpiredError):
        store.get(key)
    assert len(store) == 0


def test_sweep_moves_idle_sessions_to_expired() -> None:
    clock = Clock()
    store = SessionStore(ttl_s=5, clock=clock)
    old = store.add(object()).key
    clock.now = 4
    fresh = store.add(object()).key
    clock.now = 6
    assert store.sweep() == 1
    assert store.ids() == [fresh]
    with pytest.raises(SessionExpiredError):
        store.get(old)


def test_expired_memory_is_bounded() -> None:
    clock = Clock()
    store = SessionStore(ttl_s=1, remember_expired=2, clock=clock)
    keys = [store.add(object()).key for _ in range(3)]
    clock.now = 2
    store.sweep()
    with pytest.raises(SessionNotFoundError):
        store.get(keys[0])
    with pytest.raises(SessionExpiredError):
        store.get(keys[2])


def test_cap_counts_live_sessions_and_replacing_is_free() -> None:
    clock = Clock()
    store = SessionStore(ttl_s=10, max_sessions=2, clock=clock)
    store.add(object(), key="a")
    store.add(object(), key="b")
    with pytest.raises(TooManySessionsError, match="too many live sessions"):
        store.add(object())
    store.add(object(), key="a")  # a reset under the same key takes no new slot
    clock.now = 11
    store.add(object())  # the idle ones are swept to make room
    assert len(store) == 1


def test_delete_missing_is_noop() -> None:
    store = SessionStore()
    assert store.delete("nothing") is False
    key = store.add(object()).key
    assert store.delete(key) is True


def test_using_serialises_work_on_one_session() -> None:
    store = SessionStore()
    key = store.add(object()).key
    inside = 0
    overlap = threading.Event()
    guard = threading.Lock()

    def work(_: int) -> None:
        nonlocal inside
        with store.using(key):
            with guard:
                inside += 1
                if inside > 1:
                    overlap.set()
            time.sleep(0.002)
            with guard:
                inside -= 1

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(work, range(64)))
    assert not overlap.is_set()


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="TTL"):
        SessionStore(ttl_s=0)
    with pytest.raises(ValueError, match="max_sessions"):
        SessionStore(max_sessions=0)
