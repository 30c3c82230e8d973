"""GET /v1/stats, /metrics (Prometheus text) and /health."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient
from helpers.api_rows import Rows
from helpers.processes import free_port
from prometheus_client.parser import text_string_to_metric_families

from app.api.main import create_app
from app.api.services.stats import queue_depths
from app.config import Settings
from app.core.celery import QUEUES
from app.db.lifecycle import RolloutMode, RolloutStatus


def test_stats_by_policy_version_and_throughput(client: TestClient, rows: Rows) -> None:
    before = client.get("/v1/stats").json()
    version = random.randint(1_000_000, 1_000_000_000)
    goal = rows.goal()
    for reward in (1.0, 0.5, 0.0):
        rows.rollout(
            goal,
            status=RolloutStatus.SUCCEEDED,
            reward=reward,
            versions=(version, version),
            finished_ago_s=30,
        )
    rows.rollout(goal, status=RolloutStatus.RUNNING)
    rows.rollout(  # served by the same version, failed by an outage: not in its figures
        goal,
        status=RolloutStatus.FAILED,
        versions=(version, version),
        finished_ago_s=3600,
        last_error="failed after 3 attempts: env error: env server unreachable",
    )
    body = client.get("/v1/stats", params={"window_minutes": 10}).json()
    mine = [v for v in body["by_policy_version"] if v["policy_version"] == version]
    assert mine == [
        {"policy_version": version, "rollouts": 3, "mean_reward": 0.5, "success_rate": 1 / 3}
    ]
    assert body["in_flight"] == before["in_flight"] + 1
    assert body["by_status"]["succeeded"] == before["by_status"]["succeeded"] + 3
    assert body["by_status"]["failed"] == before["by_status"]["failed"] + 1
    assert body["completed_per_minute"] >= 3 / 10
    assert body["window_minutes"] == 10
    assert set(body["queue_depth"]) == set(QUEUES)
    only_eval = client.get("/v1/stats", params={"mode": "eval"}).json()["by_policy_version"]
    assert all(v["policy_version"] != version for v in only_eval)


def test_queue_depth_is_llen_of_the_queue(redis_client: redis.Redis) -> None:
    queue = f"wsrl-api-test-queue-{random.randint(0, 10**9)}"
    redis_client.rpush(queue, b"a", b"b", b"c")
    try:
        assert queue_depths(redis_client, (queue,)) == {queue: 3}
    finally:
        redis_client.delete(queue)


def test_stats_count_outage_failures_apart(client: TestClient, rows: Rows) -> None:
    """As `wsrl eval`: a rollout failed by the deployment is not a score of the policy."""
    before = client.get("/v1/stats").json()
    goal = rows.goal()
    for error in (
        "failed after 3 attempts: env error: env server unreachable",
        "failed after 3 attempts: LLMUnavailable: connection refused",
        "failed after 3 attempts: agent error: 500 from http://agent",
    ):
        rows.rollout(goal, status=RolloutStatus.FAILED, finished_ago_s=5, last_error=error)
    body = client.get("/v1/stats").json()
    assert body["by_status"]["failed"] == before["by_status"]["failed"] + 3
    assert body["failed_infrastructure"] == before["failed_infrastructure"] + 2


@pytest.mark.parametrize("params", [{"window_minutes": 0}, {"mode": "x"}])
def test_stats_bad_query_422(client: TestClient, params: dict) -> None:
    assert client.get("/v1/stats", params=params).status_code == 422


def test_metrics_prometheus_text(client: TestClient, rows: Rows) -> None:
    rows.rollout(status=RolloutStatus.QUEUED, mode=RolloutMode.EVAL)
    client.get("/v1/rollouts/not-a-uuid")
    client.get("/v1/rollouts")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    statuses = {s.labels["status"]: s.value for s in families["wsrl_rollouts"].samples}
    assert set(statuses) == {s.value for s in RolloutStatus}
    assert statuses["queued"] >= 1
    depths = {s.labels["queue"] for s in families["wsrl_queue_depth"].samples}
    assert depths == set(QUEUES)
    requests = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in families["wsrl_api_requests"].samples
        if s.name == "wsrl_api_requests_total"
    }
    assert requests[("/v1/rollouts/{rollout_id}", "422")] == 1
    assert requests[("/v1/rollouts", "200")] == 1
    assert "wsrl_gateway_overhead_seconds" in families
    assert "wsrl_gateway_request_seconds" in families


def test_health_ok(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "db": "ok", "redis": "ok"}


@pytest.fixture
def client_without_services(api_settings: Settings) -> Iterator[TestClient]:
    """The app pointed at a Redis and a PostgreSQL that do not answer."""
    settings = api_settings.model_copy(
        update={
            "redis_url": f"redis://127.0.0.1:{free_port()}/0",
            "database_url": f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
        }
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_health_reports_each_failing_service_503(client_without_services: TestClient) -> None:
    response = client_without_services.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["db"].startswith("error: OperationalError")
    assert body["redis"].startswith("error: ConnectionError")


def test_metrics_still_served_when_services_down(client_without_services: TestClient) -> None:
    response = client_without_services.get("/metrics")
    assert response.status_code == 200
    assert "wsrl_api_requests_total" in response.text
    assert "wsrl_rollouts{" not in response.text
