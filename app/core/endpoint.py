"""Where the policy is served: a ``policy_versions`` row, one Redis key and an announcement.

:func:`publish_policy` is the only publisher (the trainers, the API's ``PUT /v1/policy``
and ``wsrl eval --publish`` all call it): it records the version in Postgres, then writes
``{base_url, model, version, status, protocol}`` to :data:`ENDPOINT_KEY` and publishes the
same JSON on :data:`ENDPOINT_CHANNEL` (an empty message: withdrawn). ``protocol`` is the
agent protocol the policy was trained for (:class:`app.core.agent.AgentProtocol`; workers
play it). Versions only go up. Workers and the API's gateway follow the announcements
(:class:`FollowedRecord`; :mod:`app.api.services.gateway_endpoint`) and read the key again
when one comes, and at least once a second, so a new version is used from the next call on
without a restart (decision 0028).
While weights sync the status is ``paused``: callers wait (capped backoff) instead of
failing. Postgres is the truth: when Redis lost the record (flushed, restarted without its
files) :func:`restore_endpoint` writes it back from the ``active`` row, and the resolver
does so before it falls back. With nothing published at all, the endpoint of the settings
(``llm_base_url``, version 0) is used, so a plain OpenAI-compatible server works without a
trainer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.agent import AgentProtocol
from app.core.redis_client import db_channel
from app.db.lifecycle import PolicyVersionStatus, check_transition
from app.db.models import PolicyVersion

logger = logging.getLogger(__name__)

ENDPOINT_KEY = "wsrl:policy:endpoint"
ENDPOINT_CHANNEL = "wsrl:policy:endpoint:announce"


class EndpointStatus(StrEnum):
    SERVING = "serving"
    PAUSED = "paused"


class EndpointUnavailable(RuntimeError):
    """No endpoint can be used: none configured, Redis unreachable, or paused too long."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PolicyEndpoint:
    """An OpenAI-compatible endpoint serving one policy version."""

    base_url: str
    model: str
    version: int
    status: EndpointStatus = EndpointStatus.SERVING
    protocol: AgentProtocol | None = None
    """The agent protocol the policy was trained for (its trainer publishes it, ``PUT
    /v1/policy`` may); None: the publisher did not say (``wsrl eval --publish``, the
    settings' fallback, a ``PUT`` without one), and workers play their own settings."""
    base_model: str | None = None
    """The base weights under this version's LoRA adapter (a ``--lora-rank`` run: ``model``
    names the adapter the server serves); None: the version is whole weights."""

    @property
    def serving(self) -> bool:
        return self.status == EndpointStatus.SERVING

    def to_json(self) -> str:
        record: dict[str, Any] = {
            "base_url": self.base_url,
            "model": self.model,
            "version": self.version,
            "status": str(self.status),
        }
        if self.protocol is not None:
            record["protocol"] = self.protocol.to_dict()
        if self.base_model is not None:
            record["base_model"] = self.base_model
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyEndpoint:
        """Strict: a record without base_url/model/version (or with an incomplete protocol)
        is an error, not a default."""
        missing = [k for k in ("base_url", "model", "version") if k not in data]
        if missing:
            raise ValueError(f"policy endpoint record lacks {', '.join(missing)}: {data!r}")
        protocol = data.get("protocol")
        return cls(
            base_url=str(data["base_url"]),
            model=str(data["model"]),
            version=int(data["version"]),
            status=EndpointStatus(data.get("status", EndpointStatus.SERVING)),
            protocol=None if protocol is None else AgentProtocol.from_dict(protocol),
            base_model=None if data.get("base_model") is None else str(data["base_model"]),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> PolicyEndpoint:
        return cls.from_dict(json.loads(raw))


class RetiredVersionError(ValueError):
    """Publishing a version that was superseded, or one below the highest recorded."""


def published_max_version(session: Session) -> int | None:
    """The highest version ever recorded (by a trainer or anyone publishing one)."""
    return session.scalar(select(func.max(PolicyVersion.version)))


def next_version(session: Session, current: int) -> int:
    """The version a new update gets: above the current one and above any published one."""
    published = published_max_version(session)
    return max(current, -1 if published is None else published) + 1


def resume_version(session: Session, checkpoint_version: int | None) -> int:
    """The version to serve restored weights as, so that versions never go down.

    The checkpoint's own version is reused when nothing newer was published (the same
    weights, published again); otherwise, and for weights without a checkpoint, the
    weights get a fresh version above everything published.
    """
    published = published_max_version(session)
    if checkpoint_version is not None and (published is None or published <= checkpoint_version):
        return checkpoint_version
    return 0 if published is None else published + 1


def publish_policy(
    session: Session, redis: Redis, endpoint: PolicyEndpoint, *, checkpoint: str | None = None
) -> PolicyVersion:
    """Record ``endpoint`` as a policy version, then publish it; returns the row.

    The row is written (and flushed, so constraint errors surface) before the Redis
    record, so a version workers can see always has its row once the caller's transaction
    commits. ``serving`` makes the version ``active`` and retires every other active one;
    ``paused`` (weights syncing) creates the row as ``syncing`` and leaves an existing
    row's status alone. A retired version, or a new one below the highest recorded, is
    refused (:class:`RetiredVersionError`): versions only go up.
    """
    row = session.get(PolicyVersion, endpoint.version, with_for_update=True)
    if row is not None and row.status == PolicyVersionStatus.RETIRED:
        raise RetiredVersionError(
            f"policy version {endpoint.version} is retired; publish a newer version"
        )
    if row is None:
        highest = published_max_version(session)
        if highest is not None and endpoint.version < highest:
            raise RetiredVersionError(
                f"policy version {endpoint.version} is below the highest recorded "
                f"({highest}); versions only go up"
            )
        row = PolicyVersion(version=endpoint.version, status=PolicyVersionStatus.SYNCING)
        session.add(row)
    row.base_url = endpoint.base_url
    row.model = endpoint.model
    row.protocol = None if endpoint.protocol is None else endpoint.protocol.to_dict()
    row.base_model = endpoint.base_model
    if checkpoint is not None:
        row.checkpoint = checkpoint
    if endpoint.status == EndpointStatus.SERVING:
        _activate(session, row)
    session.flush()
    publish_endpoint(redis, endpoint)
    return row


def _activate(session: Session, row: PolicyVersion) -> None:
    if row.status != PolicyVersionStatus.ACTIVE:
        check_transition("policy_version", row.status, PolicyVersionStatus.ACTIVE)
        row.status = PolicyVersionStatus.ACTIVE
    others = session.scalars(
        select(PolicyVersion).where(
            PolicyVersion.status == PolicyVersionStatus.ACTIVE,
            PolicyVersion.version != row.version,
        )
    ).all()
    for other in others:
        check_transition("policy_version", other.status, PolicyVersionStatus.RETIRED)
        other.status = PolicyVersionStatus.RETIRED


def publish_endpoint(
    redis: Redis,
    endpoint: PolicyEndpoint,
    *,
    key: str = ENDPOINT_KEY,
    channel: str = ENDPOINT_CHANNEL,
) -> int:
    """The Redis half of :func:`publish_policy`: store the record, then announce it;
    returns how many subscribers heard it. Code outside tests publishes through
    :func:`publish_policy`, which also records the version.

    The key is written first so that a subscriber reacting to the announcement reads the
    new record. The key is the truth; the announcement is only a hint.
    """
    payload = endpoint.to_json()
    redis.set(key, payload)
    receivers = cast(int, redis.publish(db_channel(redis, channel), payload))
    logger.info(
        "published policy endpoint v%d %s (%s) at %s",
        endpoint.version,
        endpoint.model,
        endpoint.status,
        endpoint.base_url,
    )
    return receivers


def withdraw_policy(session: Session, redis: Redis) -> int:
    """Unpublish for good: retire the active version(s) in Postgres, then withdraw the
    Redis record; returns how many versions were retired. Withdrawing only the record
    (:func:`withdraw_endpoint`) looks like Redis having lost it, and the active version
    would be restored (:func:`restore_endpoint`)."""
    active = session.scalars(
        select(PolicyVersion).where(PolicyVersion.status == PolicyVersionStatus.ACTIVE)
    ).all()
    for row in active:
        check_transition("policy_version", row.status, PolicyVersionStatus.RETIRED)
        row.status = PolicyVersionStatus.RETIRED
    session.flush()
    withdraw_endpoint(redis)
    return len(active)


def withdraw_endpoint(
    redis: Redis, *, key: str = ENDPOINT_KEY, channel: str = ENDPOINT_CHANNEL
) -> None:
    """Unpublish the Redis record: delete it, then announce an empty one, so that readers
    that follow the announcements (the API's gateway) fall back to the settings at once.
    While Postgres records an active version, workers and the reconciler write the record
    back: use :func:`withdraw_policy` to unpublish for good."""
    redis.delete(key)
    redis.publish(db_channel(redis, channel), b"")
    logger.info("withdrew the published policy endpoint")


def recorded_endpoint(session: Session) -> PolicyEndpoint | None:
    """The ``active`` policy version as a serving endpoint, or None when none is active."""
    row = session.scalars(
        select(PolicyVersion)
        .where(PolicyVersion.status == PolicyVersionStatus.ACTIVE)
        .order_by(PolicyVersion.version.desc())
        .limit(1)
    ).first()
    if row is None or not row.base_url or not row.model:
        return None
    protocol = None if row.protocol is None else AgentProtocol.from_dict(row.protocol)
    return PolicyEndpoint(
        row.base_url, row.model, row.version, protocol=protocol, base_model=row.base_model
    )


def restore_endpoint(
    session: Session,
    redis: Redis,
    *,
    key: str = ENDPOINT_KEY,
    channel: str = ENDPOINT_CHANNEL,
) -> PolicyEndpoint | None:
    """Write the active version's record back to Redis when Redis lost it; returns it.

    Postgres is the truth: a flushed or restarted Redis must not send workers to the
    settings' fallback (another model, its samples mislabelled as version 0) or fail them
    with "no policy endpoint". The key is set only if absent (``SET NX``), so a record
    published meanwhile by :func:`publish_policy` is never overwritten; the announcement
    follows only when this call wrote the key. Returns None when Redis holds a record or no
    version is active.
    """
    if redis.exists(key):
        return None
    endpoint = recorded_endpoint(session)
    if endpoint is None:
        return None
    if not redis.set(key, endpoint.to_json(), nx=True):
        return None
    redis.publish(db_channel(redis, channel), endpoint.to_json())
    logger.warning(
        "policy endpoint record was missing from Redis; restored v%d from Postgres",
        endpoint.version,
    )
    return endpoint


def read_endpoint(redis: Redis, *, key: str = ENDPOINT_KEY) -> PolicyEndpoint | None:
    """The published endpoint (one GET), or None when nothing is published."""
    raw = cast("bytes | str | None", redis.get(key))
    if raw is None:
        return None
    return PolicyEndpoint.from_json(raw)


def fallback_endpoint(settings: Settings) -> PolicyEndpoint | None:
    """The settings' endpoint as version 0, or None when ``llm_base_url`` is unset."""
    if not settings.llm_base_url:
        return None
    return PolicyEndpoint(base_url=settings.llm_base_url, model=settings.llm_model, version=0)


class FollowedRecord:
    """The endpoint record kept current by its announcements: a worker process's copy.

    The synchronous twin of the API gateway's
    :class:`~app.api.services.gateway_endpoint.AnnouncedEndpoint` (read its docstring for
    why "from the next call on" still holds): a daemon thread flags each announcement on
    ``channel`` and the next read GETs the key; otherwise the last read is reused, for at
    most ``max_age_s`` (a key changed without an announcement, e.g. a flushed Redis, is
    seen within that time). A broken subscription ends the thread and the next read
    subscribes again, so a Redis restart costs a round trip or two, never a stale record.
    Thread-safe.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        key: str = ENDPOINT_KEY,
        channel: str = ENDPOINT_CHANNEL,
        max_age_s: float = 1.0,
        subscribe_timeout_s: float = 5.0,
    ) -> None:
        self._redis = redis
        self._key = key
        self._channel = db_channel(redis, channel)
        self._max_age_s = max_age_s
        self._subscribe_timeout_s = subscribe_timeout_s
        self._lock = threading.Lock()  # one subscription, one read of the key at a time
        self._listener: threading.Thread | None = None
        self._pubsub: Any = None
        self._announced = False
        self._raw: bytes | str | None = None
        self._read_at = float("-inf")

    def _listening(self) -> bool:
        return self._listener is not None and self._listener.is_alive()

    def raw(self, *, fresh: bool = False) -> bytes | str | None:
        """The record as published now (``fresh``: read the key whatever the announcements
        say); raises :class:`RedisError` when Redis fails."""
        if (
            not fresh
            and not self._announced
            and time.monotonic() - self._read_at < self._max_age_s
            and self._listening()
        ):
            return self._raw  # the common case: no round trip
        with self._lock:
            if not self._listening():
                self._subscribe()
            elif fresh or self._announced or time.monotonic() - self._read_at >= self._max_age_s:
                self._read_key()
            return self._raw

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                pubsub.close()  # ends the listener's blocking read

    def _subscribe(self) -> None:
        """Subscribe, wait for the confirmation, then read the key: an announcement made
        after that read is sure to reach the listener."""
        self.close()
        pubsub = self._redis.pubsub()
        try:
            pubsub.subscribe(self._channel)
            deadline = time.monotonic() + self._subscribe_timeout_s
            while True:
                message = pubsub.get_message(timeout=self._subscribe_timeout_s)
                if message is not None and message["type"] == "subscribe":
                    break
                if time.monotonic() > deadline:
                    raise RedisError(f"subscription to {self._channel} not confirmed")
            self._read_key()
        except BaseException:
            with contextlib.suppress(RedisError, OSError):
                pubsub.close()
            raise
        self._pubsub = pubsub
        self._listener = threading.Thread(
            target=self._listen, args=(pubsub,), name="wsrl-endpoint-announcements", daemon=True
        )
        self._listener.start()

    def _listen(self, pubsub: Any) -> None:
        """Flag announcements (a hint: the key is the truth); end when the subscription
        breaks, so that the next read subscribes again."""
        try:
            for message in pubsub.listen():
                if message["type"] == "message":
                    self._announced = True
        except (RedisError, OSError, ValueError, AttributeError) as exc:
            # (closed under the loop: redis-py raises what the torn-down socket gives)
            if self._pubsub is pubsub:
                logger.info("policy endpoint announcements lost (%s); resubscribing", exc)

    def _read_key(self) -> None:
        self._announced = False  # before the GET: an announcement during it reads again
        self._raw = cast("bytes | str | None", self._redis.get(self._key))
        self._read_at = time.monotonic()


class EndpointResolver:
    """Finds the endpoint to call, per call: Redis first, then Postgres, then the settings.

    ``redis=None`` means no trainer publishes (evaluation against a fixed server). With
    ``sessions``, a record missing from Redis is restored from the active policy version
    (:func:`restore_endpoint`) before the settings' fallback is considered. When Postgres
    has no active version either (nothing was ever published: a plain OpenAI-compatible
    server), that answer holds for ``recheck_s`` (1 s): calls meanwhile use the fallback
    after their GET alone, instead of a transaction, an EXISTS and a second GET each (a
    fifth of a worker's CPU at 32 concurrent episodes). A record seen in Redis ends the
    window at once, so a version lost from Redis after it was read is restored on the next
    call; one published and lost within the window without a call reading it is restored
    at most ``recheck_s`` later. One thread at a time asks Postgres: threads arriving
    meanwhile use the last "no active version" answer (a worker's threads start their
    episodes together, and each ran its own transaction), or wait for the question in
    flight when there is no such answer yet. With ``follow`` (the workers) the record is
    read through a :class:`FollowedRecord` instead of a GET per call. Thread-safe as long
    as the Redis client is (redis-py clients are).
    """

    def __init__(
        self,
        settings: Settings,
        redis: Redis | None = None,
        *,
        sessions: sessionmaker[Session] | None = None,
        key: str = ENDPOINT_KEY,
        sleep: Callable[[float], None] = time.sleep,
        recheck_s: float = 1.0,
        follow: bool = False,
    ) -> None:
        self._settings = settings
        self._redis = redis
        self._sessions = sessions
        self._key = key
        self._followed = FollowedRecord(redis, key=key) if follow and redis is not None else None
        self._sleep = sleep
        # The last record read and its parse: the record changes rarely, the GET is per call.
        self._last: tuple[bytes | str, PolicyEndpoint] | None = None
        self._recheck_s = recheck_s
        # Until when (monotonic) Postgres' "no active version" answer is used again;
        # -inf: no such answer holds (none yet, or a record was seen since).
        self._unrecorded_until = float("-inf")
        self._restoring = threading.Lock()  # one question to Postgres at a time

    def close(self) -> None:
        if self._followed is not None:
            self._followed.close()

    def _published(self, redis: Redis, *, fresh: bool = False) -> PolicyEndpoint | None:
        if self._followed is not None:
            raw = self._followed.raw(fresh=fresh)
        else:
            raw = cast("bytes | str | None", redis.get(self._key))
        if raw is None:
            return None
        self._unrecorded_until = float("-inf")
        last = self._last
        if last is not None and last[0] == raw:
            return last[1]
        endpoint = PolicyEndpoint.from_json(raw)
        self._last = (raw, endpoint)
        return endpoint

    def _restored(self, redis: Redis) -> PolicyEndpoint | None:
        if self._sessions is None or time.monotonic() < self._unrecorded_until:
            return None
        waited = not self._restoring.acquire(blocking=False)
        if waited:
            if self._unrecorded_until != float("-inf"):
                return None  # another thread asks; the last answer holds meanwhile
            self._restoring.acquire()  # no answer to use: wait for the one in flight
        try:
            return self._restore_once(redis, waited=waited)
        finally:
            self._restoring.release()

    def _restore_once(self, redis: Redis, *, waited: bool) -> PolicyEndpoint | None:
        if time.monotonic() < self._unrecorded_until:
            return None  # answered "none" while this thread waited
        try:
            if waited and (published := self._published(redis)) is not None:
                return published  # restored (or published) while this thread waited
            with self._sessions() as session:
                restore_endpoint(session, redis, key=self._key)
            # Read back: another thread may have restored it, or a trainer published anew.
            published = self._published(redis, fresh=True)
        except (RedisError, SQLAlchemyError) as exc:
            raise EndpointUnavailable(f"cannot restore the policy endpoint: {exc}") from exc
        if published is None:
            self._unrecorded_until = time.monotonic() + self._recheck_s
        return published

    def current(self) -> PolicyEndpoint:
        """The endpoint as published now (serving or paused): a GET per call, or the
        followed record (``follow``), so a new record is used from the next call on.

        A Redis failure is an error rather than a silent switch to the fallback: the
        fallback may be another model, and its samples would be mislabelled.
        """
        if self._redis is not None:
            try:
                published = self._published(self._redis)
            except RedisError as exc:
                raise EndpointUnavailable(f"cannot read policy endpoint from Redis: {exc}") from exc
            except ValueError as exc:
                raise EndpointUnavailable(f"bad policy endpoint record: {exc}") from exc
            if published is not None:
                return published
            restored = self._restored(self._redis)
            if restored is not None:
                return restored
        fallback = fallback_endpoint(self._settings)
        if fallback is None:
            raise EndpointUnavailable(
                "no policy endpoint: none published in Redis "
                f"({self._key}) and WSRL_LLM_BASE_URL / OPENAI_API_BASE unset"
            )
        return fallback

    def wait_until_serving(self) -> PolicyEndpoint:
        """The current endpoint once it serves; polls with capped backoff while paused."""
        endpoint = self.current()
        if endpoint.serving:
            return endpoint
        deadline = time.monotonic() + self._settings.llm_paused_max_wait_s
        delay = self._settings.llm_backoff_initial_s
        logger.info("policy endpoint v%d paused; waiting", endpoint.version)
        while not endpoint.serving:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EndpointUnavailable(
                    f"policy endpoint v{endpoint.version} paused for more than "
                    f"{self._settings.llm_paused_max_wait_s:g}s"
                )
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self._settings.llm_backoff_max_s)
            endpoint = self.current()
        logger.info("policy endpoint v%d serving again", endpoint.version)
        return endpoint
