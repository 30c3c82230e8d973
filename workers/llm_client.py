"""The one way to call the policy LLM: OpenAI chat protocol, with token capture.

Every call reads the policy endpoint first (:mod:`app.core.endpoint`): a newly published
version is used from the next call on, and a paused endpoint makes the call wait.
5xx, 408, 429, timeouts and connection errors are retried with capped exponential backoff
until ``llm_retry_budget_s`` is spent, then :class:`LLMUnavailable` says why. What a call
returns and how it is parsed is the wire contract of :mod:`app.core.llm`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.config import Settings
from app.core.endpoint import EndpointResolver, EndpointUnavailable, PolicyEndpoint
from app.core.http_pool import HttpError, HttpPool, HttpResponse, HttpTimeout
from app.core.llm import (
    LLMBadResponse,
    LLMCall,
    LLMRequestRejected,
    LLMUnavailable,
    Sampling,
    parse_chat_response,
    token_capture_params,
)

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


def _error_message(response: HttpResponse) -> str:
    """What an error answer says: the OpenAI ``error.message`` (or a FastAPI ``detail``),
    else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if "detail" in body:
            return str(body["detail"])[:300]
    return str(body)[:300]


class LLMClient:
    """Chat completions against the current policy endpoint, with token capture.

    One instance per process is enough: it is thread-safe and keeps one keep-alive
    connection pool per endpoint URL (:mod:`app.core.http_pool`; the ``openai`` client
    cost about 2 ms of CPU per call, several times the rest of a step).
    """

    def __init__(
        self,
        settings: Settings,
        endpoints: EndpointResolver | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = settings
        self._endpoints = endpoints or EndpointResolver(settings)
        self._sleep = sleep
        self._pools: dict[str, HttpPool] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        self._endpoints.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pool_for(self, base_url: str) -> HttpPool:
        with self._lock:
            pool = self._pools.get(base_url)
            if pool is None:
                headers = {"User-Agent": "wsrl-worker"}
                if self._settings.llm_api_key:
                    headers["Authorization"] = f"Bearer {self._settings.llm_api_key}"
                pool = HttpPool(base_url, timeout_s=self._settings.llm_timeout_s, headers=headers)
                self._pools[base_url] = pool
            return pool

    def _request(
        self,
        endpoint: PolicyEndpoint,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        sampling: Sampling,
        structured_outputs: dict[str, Any] | None,
    ) -> HttpResponse:
        """POST one chat completion request; any HTTP answer is returned."""
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "max_tokens": sampling.max_tokens,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if structured_outputs is not None:
            body["structured_outputs"] = structured_outputs
        if self._settings.llm_token_capture:
            body.update(token_capture_params())
        return self._pool_for(endpoint.base_url).request("POST", "/chat/completions", json=body)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling: Sampling | None = None,
        structured_outputs: dict[str, Any] | None = None,
    ) -> LLMCall:
        """One completion; retries transient failures within the budget.

        ``structured_outputs`` (vLLM's field) limits the reply; it is sent as is and kept
        on the returned call, so the row records the mask's source.

        Raises :class:`LLMUnavailable` (budget spent, or no serving endpoint),
        :class:`LLMRequestRejected` (4xx) or :class:`LLMBadResponse`.
        """
        sampling = sampling or Sampling.from_settings(self._settings)
        budget = self._settings.llm_retry_budget_s
        delay = self._settings.llm_backoff_initial_s
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                endpoint = self._endpoints.wait_until_serving()
            except EndpointUnavailable as exc:
                raise LLMUnavailable(
                    exc.reason, attempts=attempt - 1, elapsed_s=time.monotonic() - started
                ) from exc
            call_started = time.monotonic()
            try:
                response = self._request(endpoint, messages, tools, sampling, structured_outputs)
            except HttpTimeout:
                reason = f"timeout after {self._settings.llm_timeout_s:g}s at {endpoint.base_url}"
            except HttpError as exc:
                reason = f"cannot connect to {endpoint.base_url}: {exc}"
            else:
                status = response.status_code
                if status < 300:
                    latency_ms = (time.monotonic() - call_started) * 1000
                    try:
                        raw = response.json()
                    except ValueError as exc:
                        raise LLMBadResponse(
                            f"response is not JSON: {response.text[:200]!r}"
                        ) from exc
                    return parse_chat_response(
                        raw,
                        messages=messages,
                        tools=tools,
                        structured_outputs=structured_outputs,
                        policy_version=endpoint.version,
                        base_url=endpoint.base_url,
                        latency_ms=latency_ms,
                        attempts=attempt,
                    )
                reason = f"HTTP {status} from {endpoint.base_url}: {_error_message(response)}"
                if status < 500 and status not in RETRYABLE_STATUS:
                    raise LLMRequestRejected(reason, status_code=status)
            elapsed = time.monotonic() - started
            if elapsed + delay > budget:
                raise LLMUnavailable(reason, attempts=attempt, elapsed_s=elapsed)
            logger.warning(
                "LLM call attempt %d failed (%s); retrying in %.1fs", attempt, reason, delay
            )
            self._sleep(delay)
            delay = min(delay * 2, self._settings.llm_backoff_max_s)
