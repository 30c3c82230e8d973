"""Prometheus metrics of the API, on a registry per app (two apps in one process stay apart).

Counters and the gateway histogram are updated as requests pass; rollouts by status and
queue depth are read from Postgres and Redis when ``/metrics`` is scraped, so they are
true at scrape time without any background loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis import Redis
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.services.stats import queue_depths, rollouts_by_status

logger = logging.getLogger(__name__)

# Gateway overheads are around a millisecond; LLM calls take up to tens of seconds.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60
)  # fmt: skip


class ApiMetrics:
    """The API's metric objects, registered on their own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "wsrl_api_requests",
            "HTTP requests served, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.gateway_latency = Histogram(
            "wsrl_gateway_request_seconds",
            "Gateway chat completions, end to end (upstream LLM included).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gateway_overhead = Histogram(
            "wsrl_gateway_overhead_seconds",
            "Time the gateway adds to a chat completion (end to end minus upstream).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gateway_errors = Counter(
            "wsrl_gateway_errors",
            "Gateway calls that got no completion, by reason.",
            ["reason"],
            registry=self.registry,
        )

    def watch_pipeline(self, sessions: sessionmaker[Session], redis: Redis) -> None:
        self.registry.register(_PipelineCollector(sessions, redis))


class _PipelineCollector(Collector):
    """Rollouts by status (Postgres) and Celery queue depth (Redis), read per scrape."""

    def __init__(self, sessions: sessionmaker[Session], redis: Redis) -> None:
        self._sessions = sessions
        self._redis = redis

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rollouts = GaugeMetricFamily("wsrl_rollouts", "Rollouts by status.", labels=["status"])
        try:
            with self._sessions() as session:
                for state, count in rollouts_by_status(session).items():
                    rollouts.add_metric([state], count)
            yield rollouts
        except Exception as exc:  # a scrape must not fail because one source is down
            logger.warning("metrics: cannot count rollouts: %s", exc)
        queues = GaugeMetricFamily(
            "wsrl_queue_depth", "Messages waiting per Celery queue.", labels=["queue"]
        )
        try:
            for queue, depth in queue_depths(self._redis).items():
                queues.add_metric([queue], depth)
            yield queues
        except Exception as exc:
            logger.warning("metrics: cannot read queue depth: %s", exc)


class RequestMetricsMiddleware:
    """Counts every response by route template (not raw path: ids would explode labels).

    Plain ASGI rather than ``BaseHTTPMiddleware``: it adds a few microseconds, which
    matters on the gateway path.
    """

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self._requests = metrics.requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status_code = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self._requests.labels(scope["method"], template, str(status_code)).inc()
