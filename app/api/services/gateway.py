"""The LLM gateway: an OpenAI-compatible proxy that records calls against a rollout attempt.

An external agent (``agent_url`` rollouts) points its OpenAI client at
``/v1/gateway/rollouts/{id}/attempts/{n}/v1`` and gets token capture for free: the
gateway forwards each chat completion to the *current* policy endpoint (Redis, else the
settings), asking for token ids and logprobs, returns the upstream answer byte for byte,
and writes the call exactly as the built-in agent does
(:func:`app.core.llm.parse_chat_response` makes the :class:`~app.core.llm.LLMCall`,
:func:`app.core.llm.call_row` the row) with
the serving policy version and the attempt's next call index, before the answer returns
(an external agent's rollout counts the recorded calls once the agent is done).

Overhead is kept small: one pooled ``aiohttp.ClientSession`` (about a quarter of the CPU
per call of httpx's async client), the endpoint kept current by its announcements
(:mod:`app.api.services.gateway_endpoint`: no Redis round trip per call), attempt ids
cached after the first lookup (ids never change; the attempt's status is checked
again by the write), and the write as one prepared statement on an async connection
(:mod:`app.api.services.gateway_store`: no ORM, no thread hop, one round trip).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson
from redis.exceptions import RedisError

from app.api.services.gateway_endpoint import AnnouncedEndpoint
from app.api.services.gateway_store import CallStore, StoreUnavailable
from app.config import Settings
from app.core.endpoint import PolicyEndpoint, fallback_endpoint
from app.core.llm import (
    LLMBadResponse,
    LLMCall,
    call_row,
    parse_chat_response,
    token_capture_params,
)
from app.db.lifecycle import AttemptStatus

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
    """The upstream answer, as received; ``call_index`` and ``policy_version`` say how it
    was recorded (None: not recorded, as for an upstream error)."""

    status_code: int
    content: bytes
    content_type: str
    endpoint: PolicyEndpoint
    upstream_ms: float
    call_index: int | None
    policy_version: int | None = None


class Gateway:
    """Long-lived gateway state of one API process (built in the app's lifespan)."""

    def __init__(
        self,
        settings: Settings,
        http: aiohttp.ClientSession,
        endpoint_record: AnnouncedEndpoint,
        store: CallStore,
    ) -> None:
        self._settings = settings
        self._http = http
        self._endpoint_record = endpoint_record
        self._store = store
        self._published: tuple[bytes, PolicyEndpoint] | None = None
        self._attempt_ids: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()

    async def chat_completion(
        self, rollout_id: uuid.UUID, number: int, raw_body: bytes
    ) -> Forwarded:
        body = _parse_body(raw_body)
        attempt_id = await self._attempt_id(rollout_id, number)
        endpoint = await self._serving_endpoint()
        forwarded_body = {**body, "model": endpoint.model, **token_capture_params()}
        started = time.perf_counter()
        url = f"{endpoint.base_url.rstrip('/')}/chat/completions"
        try:
            async with self._http.post(
                url,
                data=orjson.dumps(forwarded_body),
                headers={
                    "content-type": "application/json",
                    "authorization": f"Bearer {self._settings.llm_api_key}",
                },
            ) as upstream:
                content = await upstream.read()
        except TimeoutError as exc:
            raise GatewayError(
                504, f"upstream LLM at {endpoint.base_url} timed out: {exc.__class__.__name__}"
            ) from exc
        except aiohttp.ClientError as exc:
            raise GatewayError(
                502, f"upstream LLM at {endpoint.base_url} unreachable: {exc!s}"
            ) from exc
        upstream_ms = (time.perf_counter() - started) * 1000
        forwarded = Forwarded(
            status_code=upstream.status,
            content=content,
            content_type=upstream.headers.get("content-type", "application/json"),
            endpoint=endpoint,
            upstream_ms=upstream_ms,
            call_index=None,
        )
        if upstream.status != 200:
            logger.info("gateway: upstream answered %d; not recorded", upstream.status)
            return forwarded
        try:
            call = parse_chat_response(
                orjson.loads(content),
                messages=body["messages"],
                tools=body.get("tools"),
                structured_outputs=body.get("structured_outputs"),
                policy_version=endpoint.version,
                base_url=endpoint.base_url,
                latency_ms=upstream_ms,
            )
        except (orjson.JSONDecodeError, LLMBadResponse) as exc:
            raise GatewayError(
                502, f"upstream LLM at {endpoint.base_url} answered no chat completion: {exc}"
            ) from exc
        index = await self._record(attempt_id, rollout_id, number, call)
        return replace(forwarded, call_index=index, policy_version=call.policy_version)

    async def _attempt_id(self, rollout_id: uuid.UUID, number: int) -> int:
        key = (rollout_id, number)
        cached = self._attempt_ids.get(key)
        if cached is not None:
            return cached
        try:
            found = await self._store.attempt(rollout_id, number)
        except StoreUnavailable as exc:
            raise GatewayError(503, f"cannot look the attempt up: {exc}") from exc
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
            raw = await self._endpoint_record.raw()
        except RedisError as exc:
            raise GatewayError(503, f"cannot read the policy endpoint from Redis: {exc}") from exc
        if raw is not None:
            if self._published is not None and self._published[0] == raw:
                return self._published[1]
            try:
                endpoint = PolicyEndpoint.from_json(raw)
            except ValueError as exc:
                raise GatewayError(503, f"bad policy endpoint record in Redis: {exc}") from exc
            self._published = (raw, endpoint)
            return endpoint
        fallback = fallback_endpoint(self._settings)
        if fallback is None:
            raise GatewayError(
                503, "no policy endpoint: none published and WSRL_LLM_BASE_URL unset"
            )
        return fallback

    async def _record(
        self, attempt_id: int, rollout_id: uuid.UUID, number: int, call: LLMCall
    ) -> int:
        """Write the call as the attempt's next one; returns its index.

        A write that inserts nothing lost the race for the next index to a concurrent call
        of the same attempt (possibly through another API process) and runs again, so
        concurrent calls get consecutive indexes; or the attempt is no longer running.
        """
        row = call_row(0, call)
        try:
            for _ in range(MAX_INDEX_RACES):
                index = await self._store.insert_next_call(attempt_id, row)
                if index is not None:
                    return index
                status = await self._store.attempt_status(attempt_id)
                if status != AttemptStatus.RUNNING:
                    self._attempt_ids.pop((rollout_id, number), None)
                    raise GatewayError(
                        409,
                        f"attempt {number} of rollout {rollout_id} is {status}, no longer "
                        "running; the call was not recorded",
                    )
        except StoreUnavailable as exc:
            raise GatewayError(503, f"could not record the call: {exc}") from exc
        raise GatewayError(
            503, f"could not record the call: {MAX_INDEX_RACES} index races on attempt {number}"
        )


# Concurrent calls of one attempt that lose the race for the next index try again; a
# loss needs another call committing in between, so a few tries are plenty.
MAX_INDEX_RACES = 20


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
