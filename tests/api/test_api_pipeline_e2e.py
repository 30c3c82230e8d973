"""The API's commands on a whole deployment (env server, scripted LLM, a Celery worker):
``wsrl eval`` against the in-process baselines, ``wsrl flower``'s HTTP API, ``wsrl status``."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.processes import (
    FIXTURE_CATALOG,
    WSRL,
    ServiceProcess,
    child_env,
    free_port,
    scripted_llm,
)
from helpers.stack import RolloutStack, isolated_settings

from app.config import Settings
from app.core.celery import ROLLOUT_TASK
from app.core.endpoint import withdraw_endpoint, withdraw_policy
from app.db.session import session_scope

pytestmark = pytest.mark.slow

EVAL_GOALS = 6
FLOWER_AUTH = ("wsrl", "flower-test-token")


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("api-e2e")
    settings = isolated_settings(
        make_database,
        redis_url,
        root,
        api_token=FLOWER_AUTH[1],
        llm_timeout_s=5.0,
        llm_retry_budget_s=5.0,
        env_timeout_s=5.0,
        step_timeout_s=10.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
    )
    with RolloutStack.start(root, settings, workers=1, concurrency=4) as running:
        withdraw_endpoint(running.redis)
        yield running
        withdraw_endpoint(running.redis)


def _any_answer(url: str):
    def ready(_: ServiceProcess) -> bool:
        try:
            httpx.get(url, timeout=1.0)
        except httpx.HTTPError:
            return False
        return True

    return ready


@pytest.fixture(scope="module")
def flower(stack: RolloutStack) -> Iterator[ServiceProcess]:
    """``wsrl flower`` on the stack's broker, started before any test sends tasks."""
    port = free_port()
    process = ServiceProcess(
        name=f"flower:{port}",
        args=[*WSRL, "flower", "--port", str(port)],
        env=child_env(stack.settings),
        log_path=stack.log_dir / f"flower-{port}.log",
        ready=_any_answer(f"http://127.0.0.1:{port}/"),
        url=f"http://127.0.0.1:{port}",
    ).start()
    yield process
    process.stop()


def _wsrl(settings: Settings, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*WSRL, *args],
        env=child_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _last_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def _baseline(settings: Settings, agent: str) -> str:
    result = _wsrl(
        settings,
        *("env", "baseline", "--agent", agent, "--split", "test"),
        *("--limit", str(EVAL_GOALS), "--data", str(FIXTURE_CATALOG)),
    )
    score, success = _last_line(result).split()
    return f"{score} {success} episodes={EVAL_GOALS} failed=0"


def test_eval_with_oracle_reports_the_oracle_baseline(
    stack: RolloutStack, flower: ServiceProcess
) -> None:
    result = _wsrl(stack.settings, "eval", "--split", "test", "--limit", str(EVAL_GOALS))
    line = _last_line(result)
    assert line.startswith("score=") and line.endswith(f"episodes={EVAL_GOALS} failed=0")
    assert line == _baseline(stack.settings, "oracle")


def test_eval_with_base_url_rule_reports_the_rule_baseline(stack: RolloutStack) -> None:
    rule = scripted_llm(stack.log_dir, stack.settings, policy="rule").start()
    try:
        result = _wsrl(
            stack.settings,
            *("eval", "--split", "test", "--limit", str(EVAL_GOALS)),
            *("--base-url", str(rule.url), "--model", "policy"),
        )
    finally:
        rule.stop()
        with session_scope(stack.sessions) as session:
            withdraw_policy(session, stack.redis)  # the rule server is gone for good
    assert "as policy version" in result.stderr
    assert _last_line(result) == _baseline(stack.settings, "rule")


def test_eval_base_url_without_model_fails(stack: RolloutStack) -> None:
    result = _wsrl(stack.settings, "eval", "--base-url", "http://127.0.0.1:9/v1")
    assert result.returncode == 1
    assert "--base-url and --model together" in result.stderr


def test_flower_lists_workers_and_rollout_tasks(
    stack: RolloutStack, flower: ServiceProcess
) -> None:
    ids = stack.enqueue(goal_ids=stack.goal_ids[:2], mode="eval")
    stack.wait(ids, timeout_s=120)
    workers = httpx.get(
        f"{flower.url}/api/workers", params={"refresh": "1"}, auth=FLOWER_AUTH, timeout=10
    )
    assert workers.status_code == 200, workers.text
    assert any(name.startswith("w0@") for name in workers.json()), workers.json()
    deadline = time.monotonic() + 30
    wanted = {str(i) for i in ids}
    while True:
        tasks = httpx.get(f"{flower.url}/api/tasks", auth=FLOWER_AUTH, timeout=10).json()
        seen = {
            arg
            for task in tasks.values()
            if task.get("name") == ROLLOUT_TASK
            for arg in wanted
            if arg in str(task.get("args"))
        }
        if seen == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert seen == wanted, tasks


def test_flower_api_refuses_without_credentials(flower: ServiceProcess) -> None:
    assert httpx.get(f"{flower.url}/api/workers", timeout=10).status_code == 401


def test_status_shows_queues_workers_and_rewards(stack: RolloutStack) -> None:
    result = _wsrl(stack.settings, "status", "--ping-timeout", "2")
    assert result.returncode == 0, result.stderr
    assert "queues: rollouts=" in result.stdout
    assert "workers: 1 alive (w0@" in result.stdout
    assert "in flight:" in result.stdout
    assert "last " in result.stdout and "finished rollouts" in result.stdout
    assert f"{stack.settings.api_url}/dashboard/rollouts/" in result.stdout  # pages linked
