"""The LLM gateway: an OpenAI-compatible proxy that records calls against a rollout attempt.

An external agent (``agent_url`` rollouts) points its OpenAI client at
``/v1/gateway/rollouts/{id}/attempts/{n}/v1`` and gets token capture for free: the
gateway forwards each chat completion to the *current* policy endpoint (Redis, else the
settings), asking for token ids and logprobs, returns the upstream answer byte for byte,
and writes the call exactly as the built-in agent does (:func:`workers.llm.parse_chat_response`
makes the :class:`~workers.llm.LLMCall`, :func:`workers.recording.call_row` the row,
:func:`workers.persistence.write_rows` stores it) with the serving policy version and the
attempt's next call index.

Overhead is kept small: one pooled ``httpx.AsyncClient``, the endpoint read with one
async Redis GET, attempt ids cached after the first lookup (ids never change; the
attempt's status is checked again in the write transaction), and the write in one
short transaction on connections with ``synchronous_commit = off`` (a crash of Postgres
can lose the last few milliseconds of calls, never corrupt them).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import httpx
import orjson
from anyio import to_thread
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt
from workers.endpoint import ENDPOINT_KEY, PolicyEndpoint, fallback_endpoint
from workers.llm import LLMBadResponse, LLMCall, parse_chat_response, token_capture_params
from workers.persistence import AttemptSuperseded, PendingRows, write_rows
from workers.recording import call_row

logger = logging.getLogger(__name__)

ATTEMPT_CACHE_SIZE = 10_000
PAUSED_POLL_S = 0.25


class GatewayError(Exception):
    """A call the gateway answers itself, with ``status_code`` and a message."""

    def __init__(self, status_code: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.headers = headers


@dataclass(frozen=True)
class Forwarded:
    """The upstream answer, as received, plus what recording needs."""

    status_code: int
    content: bytes
    content_type: str
    endpoint: PolicyEndpoint
    upstream_ms: float
    call_index: int | None


class Gateway:
    """Long-lived gateway state of one API process (built in the app's lifespan)."""

    def __init__(
        self,
        settings: Settings,
        http: httpx.AsyncClient,
        redis: AsyncRedis,
        sessions: sessionmaker[Session],
    ) -> None:
        self._settings = settings
        self._http = http
        self._redis = redis
        self._sessions = sessions
        self._attempt_ids: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()

    async def chat_completion(
        self, rollout_id: uuid.UUID, number: int, raw_body: bytes
    ) -> Forwarded:
        body = _parse_body(raw_body)
        attempt_id = await self._attempt_id(rollout_id, number)
        endpoint = await self._serving_endpoint()
        forwarded_body = {**body, "model": endpoint.model, **token_capture_params()}
        started = time.perf_counter()
        try:
            upstream = await self._http.post(
                f"{endpoint.base_url.rstrip('/')}/chat/completions",
                content=orjson.dumps(forwarded_body),
                headers={
                    "content-type": "application/json",
                    "authorization": f"Bearer {self._settings.llm_api_key}",
                },
            )
        except httpx.TimeoutException as exc:
            raise GatewayError(
                504, f"upstream LLM at {endpoint.base_url} timed out: {exc.__class__.__name__}"
            ) from exc
        except httpx.HTTPError as exc:
            raise GatewayError(
                502, f"upstream LLM at {endpoint.base_url} unreachable: {exc!s}"
            ) from exc
        upstream_ms = (time.perf_counter() - started) * 1000
        forwarded = Forwarded(
            status_code=upstream.status_code,
            content=upstream.content,
            content_type=upstream.headers.get("content-type", "application/json"),
            endpoint=endpoint,
            upstream_ms=upstream_ms,
            call_index=None,
        )
        if upstream.status_code != 200:
            logger.info("gateway: upstream answered %d; not recorded", upstream.status_code)
            return forwarded
        try:
            call = parse_chat_response(
                orjson.loads(upstream.content),
                messages=body["messages"],
                tools=body.get("tools"),
                policy_version=endpoint.version,
                base_url=endpoint.base_url,
                latency_ms=upstream_ms,
            )
        except (orjson.JSONDecodeError, LLMBadResponse) as exc:
            raise GatewayError(
                502, f"upstream LLM at {endpoint.base_url} answered no chat completion: {exc}"
            ) from exc
        index = await to_thread.run_sync(self._record, attempt_id, rollout_id, number, call)
        return replace(forwarded, call_index=index)

    async def _attempt_id(self, rollout_id: uuid.UUID, number: int) -> int:
        key = (rollout_id, number)
        cached = self._attempt_ids.get(key)
        if cached is not None:
            return cached
        found = await to_thread.run_sync(self._lookup_attempt, rollout_id, number)
        if found is None:
            raise GatewayError(404, f"unknown attempt {number} of rollout {rollout_id}")
        attempt_id, status = found
        if status != AttemptStatus.RUNNING:
            raise GatewayError(
                409, f"attempt {number} of rollout {rollout_id} is {status}, not running"
            )
        self._attempt_ids[key] = attempt_id
        if len(self._attempt_ids) > ATTEMPT_CACHE_SIZE:
            self._attempt_ids.popitem(last=False)
        return attempt_id

    def _lookup_attempt(self, rollout_id: uuid.UUID, number: int) -> tuple[int, str] | None:
        with self._sessions() as session:
            row = session.execute(
                select(Attempt.id, Attempt.status).where(
                    Attempt.rollout_id == rollout_id, Attempt.number == number
                )
            ).first()
        return None if row is None else (row[0], row[1])

    async def _serving_endpoint(self) -> PolicyEndpoint:
        """The current endpoint; while it is paused, wait up to ``llm_timeout_s``, then 503."""
        deadline = time.monotonic() + self._settings.llm_timeout_s
        while True:
            endpoint = await self._current_endpoint()
            if endpoint.serving:
                return endpoint
            if time.monotonic() >= deadline:
                raise GatewayError(
                    503,
                    f"policy endpoint v{endpoint.version} is paused (weights syncing); retry later",
                    headers={"Retry-After": "5"},
                )
            await asyncio.sleep(PAUSED_POLL_S)

    async def _current_endpoint(self) -> PolicyEndpoint:
        try:
            raw = await self._redis.get(ENDPOINT_KEY)
        except RedisError as exc:
            raise GatewayError(503, f"cannot read the policy endpoint from Redis: {exc}") from exc
        if raw is not None:
            try:
                return PolicyEndpoint.from_json(raw)
            except ValueError as exc:
                raise GatewayError(503, f"bad policy endpoint record in Redis: {exc}") from exc
        fallback = fallback_endpoint(self._settings)
        if fallback is None:
            raise GatewayError(
                503, "no policy endpoint: none published and WSRL_LLM_BASE_URL unset"
            )
        return fallback

    def _record(self, attempt_id: int, rollout_id: uuid.UUID, number: int, call: LLMCall) -> int:
        """Write the call as the attempt's next one; returns its index.

        A transaction-level advisory lock per attempt (no row write, unlike ``FOR UPDATE``)
        is taken before the next index is read, so concurrent calls of one attempt, even
        through several API processes, get consecutive indexes instead of colliding.
        """
        with self._sessions() as session, session.begin():
            session.execute(_LOCK_ATTEMPT, {"key": attempt_id})
            index = session.execute(_NEXT_INDEX, {"attempt_id": attempt_id}).scalar_one()
            try:
                write_rows(session, attempt_id, PendingRows(calls=[call_row(int(index), call)]))
            except AttemptSuperseded as exc:
                self._attempt_ids.pop((rollout_id, number), None)
                raise GatewayError(
                    409,
                    f"attempt {number} of rollout {rollout_id} is no longer running; "
                    "the call was not recorded",
                ) from exc
        return int(index)


# The two-key form keeps these locks apart from any other advisory lock of the database:
# the first key names "next call index of an attempt" (ASCII "wsgw").
_LOCK_CLASS = 0x77736777
_LOCK_ATTEMPT = text(
    f"SELECT pg_advisory_xact_lock({_LOCK_CLASS}, (CAST(:key AS bigint) % 2147483647)::int)"
)
_NEXT_INDEX = text(
    "SELECT coalesce(max(index) + 1, 0) FROM llm_calls WHERE attempt_id = :attempt_id"
)


def _parse_body(raw_body: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw_body)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(422, f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise GatewayError(422, "request body must be a JSON object (a chat completion request)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GatewayError(422, "request body needs 'messages': a non-empty list")
    if body.get("stream"):
        raise GatewayError(
            422, "stream=true is not supported: token capture needs the whole completion"
        )
    if body.get("n", 1) != 1:
        raise GatewayError(422, "n must be 1: one completion is recorded per call")
    return body
