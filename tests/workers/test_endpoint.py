"""Policy endpoint publication in a real Redis, and the LLM client following it."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.core.agent import AgentMode, AgentProtocol
from app.core.endpoint import (
    EndpointResolver,
    EndpointStatus,
    EndpointUnavailable,
    FollowedRecord,
    PolicyEndpoint,
    publish_endpoint,
    read_endpoint,
    restore_endpoint,
    withdraw_endpoint,
)
from app.core.llm import LLMUnavailable
from app.core.redis_client import db_channel
from app.db.lifecycle import PolicyVersionStatus
from app.db.models import PolicyVersion
from app.environments.webshop.agent import build_messages
from app.scripted_llm import create_app
from app.webshop.server.runner import serve_in_thread
from workers.llm_client import LLMClient

MESSAGES = build_messages(
    "a lamp", "WebShop [SEP] Search", {"has_search_bar": True, "clickables": ["search"]}, []
)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def key() -> str:
    """A key of this test alone, so tests never see each other's endpoints."""
    return f"wsrl:test:policy:{uuid.uuid4().hex}"


def test_the_protocol_travels_in_the_record_and_a_record_without_it_still_reads(
    redis_client: redis.Redis, key: str
) -> None:
    protocol = AgentProtocol(AgentMode.TEXT, history_steps=1, constrain_actions=True, max_steps=9)
    endpoint = PolicyEndpoint("http://127.0.0.1:9/v1", "tiny", 4, protocol=protocol)
    publish_endpoint(redis_client, endpoint, key=key)
    assert read_endpoint(redis_client, key=key) == endpoint
    # Records written before the protocol travelled (or by publishers that name none).
    redis_client.set(key, '{"base_url": "http://x/v1", "model": "m", "version": 2}')
    old = read_endpoint(redis_client, key=key)
    assert old is not None and old.protocol is None
    redis_client.set(key, '{"base_url": "http://x/v1", "model": "m", "version": 2, '
                     '"protocol": {"mode": "text"}}')  # fmt: skip
    with pytest.raises(ValueError, match="agent protocol lacks"):
        read_endpoint(redis_client, key=key)


def test_publish_then_read_round_trip_and_announce(redis_client: redis.Redis, key: str) -> None:
    channel = f"{key}:announce"
    pubsub = redis_client.pubsub()
    pubsub.subscribe(db_channel(redis_client, channel))
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    endpoint = PolicyEndpoint("http://127.0.0.1:9/v1", "qwen", 3, EndpointStatus.PAUSED)
    assert publish_endpoint(redis_client, endpoint, key=key, channel=channel) == 1
    assert read_endpoint(redis_client, key=key) == endpoint
    message = pubsub.get_message(timeout=1)
    assert PolicyEndpoint.from_json(message["data"]) == endpoint
    pubsub.close()


def _another_db(client: redis.Redis) -> redis.Redis:
    db = int(client.connection_pool.connection_kwargs.get("db") or 0)
    return redis.Redis(
        connection_pool=redis.ConnectionPool(
            **{**client.connection_pool.connection_kwargs, "db": db % 15 + 1}
        )
    )


def test_a_deployment_on_another_db_of_the_server_is_not_heard(
    redis_client: redis.Redis, key: str
) -> None:
    # Redis delivers Pub/Sub messages server-wide whatever db each side selected: two
    # stacks sharing a server on different dbs heard each other's announcements.
    other = _another_db(redis_client)
    pubsub = redis_client.pubsub()
    try:
        pubsub.subscribe(db_channel(redis_client, f"{key}:announce"))
        assert pubsub.get_message(timeout=1)["type"] == "subscribe"
        theirs = PolicyEndpoint("http://127.0.0.1:9/v1", "theirs", 8)
        assert publish_endpoint(other, theirs, key=key, channel=f"{key}:announce") == 0
        assert pubsub.get_message(timeout=0.3) is None
        ours = PolicyEndpoint("http://127.0.0.1:9/v1", "ours", 2)
        assert publish_endpoint(redis_client, ours, key=key, channel=f"{key}:announce") == 1
        assert PolicyEndpoint.from_json(pubsub.get_message(timeout=1)["data"]) == ours
    finally:
        pubsub.close()
        other.delete(key)
        other.close()


def test_read_nothing_published_is_none(redis_client: redis.Redis, key: str) -> None:
    assert read_endpoint(redis_client, key=key) is None


def test_resolver_falls_back_to_settings_as_version_0(
    redis_client: redis.Redis, key: str, make_settings
) -> None:
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(settings, redis_client, key=key)
    assert resolver.current() == PolicyEndpoint("http://127.0.0.1:9/v1", "base", 0)


RECORDED_VERSION = 930_000_001  # above any version other tests record


@pytest.fixture
def recorded(db_session: Session) -> sessionmaker[Session]:
    """An active policy version in Postgres, seen through sessions on the test's transaction."""
    db_session.add(
        PolicyVersion(
            version=RECORDED_VERSION,
            base_url="http://127.0.0.1:9/v1",
            model="trained",
            status=PolicyVersionStatus.ACTIVE,
        )
    )
    db_session.flush()
    return sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint")


def test_resolver_restores_a_lost_record_from_postgres_not_the_fallback(
    redis_client: redis.Redis, key: str, make_settings, recorded: sessionmaker[Session]
) -> None:
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(settings, redis_client, key=key, sessions=recorded)
    expected = PolicyEndpoint("http://127.0.0.1:9/v1", "trained", RECORDED_VERSION)
    assert resolver.current() == expected
    assert read_endpoint(redis_client, key=key) == expected, "written back to Redis"


def _counting(sessions: sessionmaker[Session], opened: list[int]) -> sessionmaker[Session]:
    def open_session() -> Session:
        opened.append(1)
        return sessions()

    return open_session  # type: ignore[return-value]


def test_resolver_asks_postgres_again_only_after_the_recheck_window(
    redis_client: redis.Redis, key: str, make_settings, db_session: Session
) -> None:
    """Nothing published anywhere: one query per ``recheck_s``, not one per call; a version
    recorded meanwhile (and missing from Redis) is restored once the window is over."""
    db_session.execute(
        update(PolicyVersion)
        .where(PolicyVersion.status == PolicyVersionStatus.ACTIVE)
        .values(status=PolicyVersionStatus.RETIRED)
    )
    db_session.flush()
    opened: list[int] = []
    inner = sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint")
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(
        settings, redis_client, key=key, sessions=_counting(inner, opened), recheck_s=0.5
    )
    fallback = PolicyEndpoint("http://127.0.0.1:9/v1", "base", 0)
    for _ in range(5):
        assert resolver.current() == fallback
    assert len(opened) == 1, "Postgres asked once in the window, not per call"
    db_session.add(
        PolicyVersion(
            version=RECORDED_VERSION,
            base_url="http://127.0.0.1:9/v1",
            model="trained",
            status=PolicyVersionStatus.ACTIVE,
        )
    )
    db_session.flush()
    time.sleep(0.6)
    expected = PolicyEndpoint("http://127.0.0.1:9/v1", "trained", RECORDED_VERSION)
    assert resolver.current() == expected
    assert read_endpoint(redis_client, key=key) == expected, "written back to Redis"


class _SlowSessions:
    """Sessions on the test's one connection, used by one thread at a time and held for
    ``hold_s`` each, so that threads calling together overlap with the first one's
    question to Postgres; ``opened`` counts the questions."""

    def __init__(self, sessions: sessionmaker[Session], hold_s: float) -> None:
        self.opened = 0
        self._sessions = sessions
        self._hold_s = hold_s
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[Session]:
        with self._lock:
            self.opened += 1
            time.sleep(self._hold_s)
            with self._sessions() as session:
                yield session


def _together(call, threads: int = 8) -> list:
    barrier = threading.Barrier(threads)
    results: list = [None] * threads

    def run(i: int) -> None:
        barrier.wait()
        results[i] = call()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    return results


def test_threads_calling_during_a_recheck_use_the_last_answer(
    redis_client: redis.Redis, key: str, make_settings, db_session: Session
) -> None:
    """A worker's threads start their episodes together: when the window ends, one of
    them asks Postgres again and the others keep the last "no active version" answer,
    instead of each asking."""
    db_session.execute(
        update(PolicyVersion)
        .where(PolicyVersion.status == PolicyVersionStatus.ACTIVE)
        .values(status=PolicyVersionStatus.RETIRED)
    )
    db_session.flush()
    inner = sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint")
    sessions = _SlowSessions(inner, hold_s=0.2)
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(
        settings,
        redis_client,
        key=key,
        sessions=sessions,  # type: ignore[arg-type]
        recheck_s=0.2,
    )
    fallback = PolicyEndpoint("http://127.0.0.1:9/v1", "base", 0)
    assert resolver.current() == fallback
    time.sleep(0.3)  # the window is over
    assert _together(resolver.current) == [fallback] * 8
    assert sessions.opened == 2, "one question to Postgres per window, not one per thread"


def test_threads_with_no_answer_yet_wait_for_the_restore_in_flight(
    redis_client: redis.Redis, key: str, make_settings, recorded: sessionmaker[Session]
) -> None:
    """With no answer to use yet, threads arriving during the first question wait for it:
    every one gets the version restored from Postgres, none the settings' fallback, and
    Postgres is asked once."""
    sessions = _SlowSessions(recorded, hold_s=0.2)
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(settings, redis_client, key=key, sessions=sessions)  # type: ignore[arg-type]
    expected = PolicyEndpoint("http://127.0.0.1:9/v1", "trained", RECORDED_VERSION)
    assert _together(resolver.current) == [expected] * 8
    assert sessions.opened == 1


def test_resolver_restores_a_record_lost_right_after_it_was_read(
    redis_client: redis.Redis, key: str, make_settings, recorded: sessionmaker[Session]
) -> None:
    """A record read from Redis ends the window: lost the next moment (Redis flushed), it
    is restored from Postgres on the next call, not replaced by the fallback."""
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="base")
    resolver = EndpointResolver(settings, redis_client, key=key, sessions=recorded, recheck_s=60)
    resolver._unrecorded_until = time.monotonic() + 60  # as if Postgres had said "none" just now
    expected = PolicyEndpoint("http://127.0.0.1:9/v1", "trained", RECORDED_VERSION)
    publish_endpoint(redis_client, expected, key=key)
    assert resolver.current() == expected
    redis_client.delete(key)
    assert resolver.current() == expected, "restored, not the settings' fallback"
    assert read_endpoint(redis_client, key=key) == expected


def test_restore_never_overwrites_a_published_record(
    redis_client: redis.Redis, key: str, db_session: Session, recorded: sessionmaker[Session]
) -> None:
    newer = PolicyEndpoint("http://127.0.0.1:8/v1", "newer", RECORDED_VERSION + 1)
    publish_endpoint(redis_client, newer, key=key)
    assert restore_endpoint(db_session, redis_client, key=key) is None
    assert read_endpoint(redis_client, key=key) == newer


def test_bad_record_is_an_error(redis_client: redis.Redis, key: str, make_settings) -> None:
    redis_client.set(key, '{"base_url": "http://x/v1"}')
    resolver = EndpointResolver(make_settings(llm_base_url="http://y/v1"), redis_client, key=key)
    with pytest.raises(EndpointUnavailable, match="lacks model, version"):
        resolver.current()


def test_redis_down_is_unavailable_not_fallback(make_settings) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    llm = LLMClient(
        make_settings(llm_base_url="http://127.0.0.1:9/v1"), EndpointResolver(make_settings(), dead)
    )
    with pytest.raises(LLMUnavailable, match="cannot read policy endpoint from Redis"):
        llm.chat(MESSAGES)


def test_new_version_is_used_from_the_next_call(
    redis_client: redis.Redis, key: str, make_settings
) -> None:
    settings = make_settings(llm_base_url=None)
    with (
        serve_in_thread(create_app("rule", None)) as first,
        serve_in_thread(create_app("rule", None)) as second,
        LLMClient(settings, EndpointResolver(settings, redis_client, key=key)) as llm,
    ):
        publish_endpoint(redis_client, PolicyEndpoint(f"{first.url}/v1", "m1", 1), key=key)
        one = llm.chat(MESSAGES)
        publish_endpoint(redis_client, PolicyEndpoint(f"{second.url}/v1", "m2", 2), key=key)
        two = llm.chat(MESSAGES)
    assert (one.policy_version, one.model, one.base_url) == (1, "m1", f"{first.url}/v1")
    assert (two.policy_version, two.model, two.base_url) == (2, "m2", f"{second.url}/v1")


def test_paused_waits_then_resumes_with_new_version(
    redis_client: redis.Redis, key: str, make_settings, rule_llm
) -> None:
    url = f"{rule_llm.url}/v1"
    settings = make_settings(llm_base_url=None)
    publish_endpoint(redis_client, PolicyEndpoint(url, "m", 4, EndpointStatus.PAUSED), key=key)
    resume = threading.Timer(
        0.6, publish_endpoint, args=(redis_client, PolicyEndpoint(url, "m", 5)), kwargs={"key": key}
    )
    started = time.monotonic()
    resume.start()
    try:
        with LLMClient(settings, EndpointResolver(settings, redis_client, key=key)) as llm:
            call = llm.chat(MESSAGES)
    finally:
        resume.cancel()
    assert time.monotonic() - started >= 0.6
    assert call.policy_version == 5
    assert call.trainable


def test_paused_backoff_is_capped(redis_client: redis.Redis, key: str, make_settings) -> None:
    paused = PolicyEndpoint("http://x/v1", "m", 1, EndpointStatus.PAUSED)
    publish_endpoint(redis_client, paused, key=key)
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 6:
            publish_endpoint(redis_client, PolicyEndpoint("http://x/v1", "m", 2), key=key)

    settings = make_settings(llm_backoff_initial_s=0.05, llm_backoff_max_s=0.2)
    endpoint = EndpointResolver(settings, redis_client, key=key, sleep=sleep).wait_until_serving()
    assert endpoint.version == 2
    assert delays == [0.05, 0.1, 0.2, 0.2, 0.2, 0.2]


def test_paused_too_long_raises_unavailable(
    redis_client: redis.Redis, key: str, make_settings
) -> None:
    paused = PolicyEndpoint("http://x/v1", "m", 9, EndpointStatus.PAUSED)
    publish_endpoint(redis_client, paused, key=key)
    settings = make_settings(llm_paused_max_wait_s=0.3)
    with (
        LLMClient(settings, EndpointResolver(settings, redis_client, key=key)) as llm,
        pytest.raises(LLMUnavailable, match=r"policy endpoint v9 paused for more than 0\.3s"),
    ):
        llm.chat(MESSAGES)


class CountingRedis(redis.Redis):
    """A real client that counts its GETs (the round trips following saves)."""

    gets = 0

    def get(self, name):  # type: ignore[override]
        self.gets += 1
        return super().get(name)


def _until(predicate, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_followed_record_reads_the_key_again_only_after_an_announcement(
    redis_url: str, redis_client: redis.Redis, key: str
) -> None:
    channel = f"{key}:announce"
    counting = CountingRedis.from_url(redis_url)
    record = FollowedRecord(counting, key=key, channel=channel, max_age_s=60)
    try:
        v1 = PolicyEndpoint("http://127.0.0.1:9/v1", "qwen", 1)
        publish_endpoint(redis_client, v1, key=key, channel=channel)
        assert PolicyEndpoint.from_json(record.raw()) == v1
        gets = counting.gets
        for _ in range(50):
            assert PolicyEndpoint.from_json(record.raw()) == v1
        assert counting.gets == gets  # no round trip while nothing is announced

        paused = PolicyEndpoint("http://127.0.0.1:9/v1", "qwen", 1, EndpointStatus.PAUSED)
        publish_endpoint(redis_client, paused, key=key, channel=channel)
        assert _until(lambda: PolicyEndpoint.from_json(record.raw()) == paused)
        assert counting.gets == gets + 1

        withdraw_endpoint(redis_client, key=key, channel=channel)
        assert _until(lambda: record.raw() is None)
    finally:
        record.close()
        counting.close()


def test_followed_record_sees_an_unannounced_change_within_max_age(
    redis_client: redis.Redis, key: str
) -> None:
    record = FollowedRecord(redis_client, key=key, channel=f"{key}:announce", max_age_s=0.2)
    try:
        assert record.raw() is None
        redis_client.set(key, PolicyEndpoint("http://x/v1", "m", 4).to_json())  # no announcement
        assert record.raw() is None  # within max_age_s the last read stands
        time.sleep(0.25)
        assert PolicyEndpoint.from_json(record.raw()).version == 4
        redis_client.delete(key)
        assert record.raw(fresh=True) is None  # fresh: whatever the announcements say
    finally:
        record.close()


def test_followed_record_resubscribes_after_its_connection_is_killed(
    redis_client: redis.Redis, key: str
) -> None:
    channel = f"{key}:announce"
    record = FollowedRecord(redis_client, key=key, channel=channel, max_age_s=60)
    try:
        publish_endpoint(
            redis_client, PolicyEndpoint("http://x/v1", "m", 1), key=key, channel=channel
        )
        assert PolicyEndpoint.from_json(record.raw()).version == 1
        host, port = record._pubsub.connection._sock.getsockname()[:2]
        redis_client.client_kill_filter(_id=None, addr=f"{host}:{port}")
        # Lost with the connection: this announcement reaches no one ...
        redis_client.set(key, PolicyEndpoint("http://x/v1", "m", 2).to_json())
        assert _until(lambda: not record._listening())
        # ... and the next read subscribes again and reads the key.
        assert PolicyEndpoint.from_json(record.raw()).version == 2
        publish_endpoint(
            redis_client, PolicyEndpoint("http://x/v1", "m", 3), key=key, channel=channel
        )
        assert _until(lambda: PolicyEndpoint.from_json(record.raw()).version == 3)
    finally:
        record.close()


def test_following_resolver_restores_a_lost_record_at_the_next_call(
    redis_client: redis.Redis, key: str, make_settings, recorded
) -> None:
    """Postgres still holds the active version: a record deleted from Redis without an
    announcement is restored once the follower's last read is older than its max age."""
    settings = make_settings(llm_base_url="http://127.0.0.1:9/v1")
    resolver = EndpointResolver(settings, redis_client, key=key, sessions=recorded, follow=True)
    expected = PolicyEndpoint("http://127.0.0.1:9/v1", "trained", RECORDED_VERSION)
    try:
        assert resolver.current() == expected
        redis_client.delete(key)
        assert resolver.current() == expected  # the last read stands (max age 1 s) ...
        time.sleep(1.05)
        assert resolver.current() == expected  # ... then the key is read, found missing
        assert read_endpoint(redis_client, key=key) == expected, "written back to Redis"
    finally:
        resolver.close()
