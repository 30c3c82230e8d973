"""Agent-as-a-service end to end: the example agent as its own process, driven by a real
Celery worker, recording through the real API's LLM gateway, against the real env server,
with the scripted LLM (oracle) as the model; Postgres and Redis are the test session's.

Misbehaving agents (hang, 5xx, malformed answer, no purchase, no gateway call) are one
small FastAPI app served on a thread here, one path per failure mode; the worker reaches
them over HTTP like any agent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import redis
from celery import Celery
from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from helpers.processes import (
    REPO,
    WSRL,
    ServiceProcess,
    api_server,
    celery_worker,
    child_env,
    env_server,
    example_agent,
    scripted_llm,
)
from helpers.stack import isolated_settings
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.core.celery import create_celery
from app.core.endpoint import PolicyEndpoint, publish_endpoint, withdraw_endpoint
from app.core.enqueue import enqueue_rollouts
from app.db.lifecycle import FINAL_ROLLOUT_STATUSES
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step
from app.db.session import make_engine, make_sessionmaker, session_scope
from app.environments.webshop.client import EnvClient
from app.environments.webshop.goals import sync_goals
from app.webshop.server.runner import serve_in_thread

pytestmark = pytest.mark.slow

TOKEN = "external-agent-token"
POLICY_VERSION = 3
MAX_STEPS = 15
STEP_TIMEOUT_S = 0.4  # the agent's timeout: 15 x 0.4 = 6 s
HANG_S = 7.5
MAX_ATTEMPTS = 2


def _load_example() -> ModuleType:
    path = REPO / "examples" / "external_agent" / "agent.py"
    spec = importlib.util.spec_from_file_location("example_external_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


def faulty_agents(direct_llm_url: str) -> FastAPI:
    """One path per way an external agent can fail an attempt."""
    example = _load_example()
    app = FastAPI()

    @app.post("/timeout")
    async def hang() -> dict[str, Any]:
        await asyncio.sleep(HANG_S)
        return {"done": True, "steps": 1}

    @app.post("/error")
    async def error() -> Response:
        return Response('{"error": "agent crashed"}', status_code=500)

    @app.post("/malformed")
    async def malformed() -> Response:
        return Response("I bought it, trust me", media_type="text/plain")

    @app.post("/no-purchase")
    async def no_purchase(request: Request) -> dict[str, Any]:
        """Plays one turn through the gateway (a search), then gives up."""
        body = {**(await request.json()), "max_steps": 1}
        # The agent holds its attempt's gateway key, never the API token.
        if body["llm"]["api_key"] == TOKEN or not body["llm"]["api_key"].startswith("wsrl-"):
            return Response("given the API token", status_code=500)
        answer = await run_in_threadpool(example.episode, example.Episode(**body))
        return {**answer, "done": True}

    @app.post("/no-gateway")
    async def no_gateway(request: Request) -> dict[str, Any]:
        """Buys with a model it calls directly: nothing is recorded for training."""
        body = await request.json()
        body["llm"]["base_url"] = direct_llm_url
        return await run_in_threadpool(example.episode, example.Episode(**body))

    return app


@dataclass
class Pipeline:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    celery: Celery
    api: ServiceProcess
    agent: ServiceProcess
    faulty_url: str
    goal_ids: list[int]

    def enqueue(self, goal_ids: list[int], agent_url: str | None = None) -> list[uuid.UUID]:
        with session_scope(self.sessions) as session:
            return enqueue_rollouts(
                session, self.celery, goal_ids=goal_ids, agent_url=agent_url, settings=self.settings
            )

    def wait(self, ids: list[uuid.UUID], timeout_s: float = 120.0) -> dict[uuid.UUID, str]:
        """Poll Postgres until every rollout is final; their statuses."""
        finals = {str(s) for s in FINAL_ROLLOUT_STATUSES}
        deadline = time.monotonic() + timeout_s
        while True:
            with session_scope(self.sessions) as session:
                query = select(Rollout.id, Rollout.status).where(Rollout.id.in_(ids))
                rows = dict(session.execute(query).all())
            if all(str(s) in finals for s in rows.values()):
                return {k: str(v) for k, v in rows.items()}
            if time.monotonic() > deadline:
                raise TimeoutError(f"not final after {timeout_s}s: {rows}")
            time.sleep(0.3)


@pytest.fixture(scope="module")
def pipeline(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    root: Path = tmp_path_factory.mktemp("external-agent")
    base = isolated_settings(
        make_database,
        redis_url,
        root,
        api_token=TOKEN,
        max_steps=MAX_STEPS,
        step_timeout_s=STEP_TIMEOUT_S,
        max_attempts=MAX_ATTEMPTS,
        retry_backoff_s=0.2,
        worker_heartbeat_s=1.0,
        env_timeout_s=5.0,
        llm_timeout_s=5.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
    )
    started: list[ServiceProcess] = []
    store = redis.Redis.from_url(redis_url)
    engine = None
    try:
        env = env_server(root, base).start()
        started.append(env)
        llm = scripted_llm(root, base, policy="oracle").start()
        started.append(llm)
        settings = base.model_copy(update={"env_url": env.url, "llm_base_url": llm.url})
        api = api_server(root, settings).start()
        started.append(api)
        agent = example_agent(root).start()
        started.append(agent)
        settings = settings.model_copy(update={"api_url": api.url, "default_agent_url": agent.url})
        publish_endpoint(store, PolicyEndpoint(str(llm.url), "policy", POLICY_VERSION))
        engine = make_engine(settings, pool_size=2)
        sessions = make_sessionmaker(engine)
        with session_scope(sessions) as session, EnvClient(str(env.url)) as client:
            sync_goals(session, client)
        with session_scope(sessions) as session:
            goal_ids = list(
                session.scalars(select(Goal.id).where(Goal.split == "test").order_by(Goal.id))
            )
        worker = celery_worker(root, settings, concurrency=6, name="ext")
        worker.start()
        started.append(worker)
        with serve_in_thread(faulty_agents(str(llm.url))) as faulty:
            yield Pipeline(
                settings=settings,
                engine=engine,
                sessions=sessions,
                celery=create_celery(settings),
                api=api,
                agent=agent,
                faulty_url=faulty.url,
                goal_ids=goal_ids,
            )
    finally:
        withdraw_endpoint(store)
        store.close()
        for process in reversed(started):
            process.stop()
        if engine is not None:
            engine.dispose()


def test_example_agent_rollouts_are_recorded_and_trainable(pipeline: Pipeline) -> None:
    goals = pipeline.goal_ids[:4]
    ids = pipeline.enqueue(goals)  # no agent_url: the worker's default_agent_url
    assert set(pipeline.wait(ids).values()) == {"succeeded"}, pipeline.agent.tail()
    with session_scope(pipeline.sessions) as session:
        rollouts = session.scalars(select(Rollout).where(Rollout.id.in_(ids))).all()
        for rollout in rollouts:
            assert rollout.attempts == 1
            assert rollout.num_steps and rollout.num_steps >= 3
            assert rollout.reward is not None and rollout.reward_parts
            assert rollout.policy_version_min == rollout.policy_version_max == POLICY_VERSION
            attempt = session.scalars(select(Attempt).where(Attempt.rollout_id == rollout.id)).one()
            assert str(attempt.status) == "succeeded" and attempt.reward == rollout.reward
            calls = session.scalars(
                select(LlmCall).where(LlmCall.attempt_id == attempt.id).order_by(LlmCall.index)
            ).all()
            assert [c.index for c in calls] == list(range(len(calls)))
            assert len(calls) >= rollout.num_steps
            steps = session.scalars(
                select(Step).where(Step.attempt_id == attempt.id).order_by(Step.index)
            ).all()
            assert [s.index for s in steps] == list(range(rollout.num_steps))
            assert steps[0].action.startswith("search[")
            assert steps[-1].action == "click[buy now]" and steps[-1].done
            assert steps[-1].reward == rollout.reward
            for call in calls:
                assert call.trainable and call.policy_version == POLICY_VERSION
                assert call.prompt_token_ids and call.response_token_ids
                assert len(call.response_logprobs or []) == len(call.response_token_ids)
                assert call.request_messages[-1]["content"].startswith("Instruction: ")
        rewards = [r.reward for r in rollouts]
    assert sum(r == 1.0 for r in rewards) >= 3, f"the oracle solves the fixture goals: {rewards}"


def _attempt_errors(pipeline: Pipeline, rollout_id: uuid.UUID) -> list[tuple[str, str]]:
    with session_scope(pipeline.sessions) as session:
        rows = session.execute(
            select(Attempt.status, Attempt.error)
            .where(Attempt.rollout_id == rollout_id)
            .order_by(Attempt.number)
        ).all()
    return [(str(status), error or "") for status, error in rows]


def _enqueue_by_cli(pipeline: Pipeline, goal_id: int, agent_url: str) -> uuid.UUID:
    """``wsrl enqueue --agent-url``, then the rollout it created (the newest of the goal)."""
    done = subprocess.run(
        [*WSRL, "enqueue", "--goal-ids", str(goal_id), "--agent-url", agent_url],
        env=child_env(pipeline.settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with session_scope(pipeline.sessions) as session:
        return session.scalars(
            select(Rollout.id)
            .where(Rollout.goal_id == goal_id, Rollout.agent_url == agent_url)
            .order_by(Rollout.created_at.desc())
        ).first()


def test_failing_agents_fail_attempts_with_reason_retry_then_fail_rollout(
    pipeline: Pipeline,
) -> None:
    goal = pipeline.goal_ids[0]
    expected = {
        "timeout": "external agent: timeout: agent",
        "error": "answered HTTP 500",
        "malformed": "malformed answer from agent",
        "no-purchase": "no purchase: agent",
        "no-gateway": "never called the LLM gateway",
    }
    ids: dict[str, uuid.UUID] = {}
    for mode in ("timeout", "error", "no-purchase"):
        ids[mode] = pipeline.enqueue([goal], agent_url=f"{pipeline.faulty_url}/{mode}")[0]
    created = httpx.post(
        f"{pipeline.api.url}/v1/rollouts",
        json={"goal_ids": [goal], "agent_url": f"{pipeline.faulty_url}/no-gateway"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    ids["no-gateway"] = uuid.UUID(created.json()["ids"][0])
    ids["malformed"] = _enqueue_by_cli(pipeline, goal, f"{pipeline.faulty_url}/malformed")

    statuses = pipeline.wait(list(ids.values()), timeout_s=180)
    assert set(statuses.values()) == {"failed"}, statuses
    with session_scope(pipeline.sessions) as session:
        last_errors = dict(
            session.execute(
                select(Rollout.id, Rollout.last_error).where(Rollout.id.in_(list(ids.values())))
            ).all()
        )
    for mode, rollout_id in ids.items():
        errors = _attempt_errors(pipeline, rollout_id)
        assert [status for status, _ in errors] == ["failed"] * MAX_ATTEMPTS, (mode, errors)
        for _, error in errors:
            assert error.startswith("external agent: "), (mode, error)
            assert expected[mode] in error, (mode, error)
        assert last_errors[rollout_id].startswith(f"failed after {MAX_ATTEMPTS} attempts: ")
        assert expected[mode] in last_errors[rollout_id]
    with session_scope(pipeline.sessions) as session:
        recorded = session.scalars(
            select(LlmCall.policy_version)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id == ids["no-purchase"])
        ).all()
    assert recorded == [POLICY_VERSION] * MAX_ATTEMPTS, "one gateway call per failed attempt"


def test_enqueue_refuses_agent_url_that_is_not_http(pipeline: Pipeline) -> None:
    answer = httpx.post(
        f"{pipeline.api.url}/v1/rollouts",
        json={"goal_ids": [pipeline.goal_ids[0]], "agent_url": "ftp://example/agent"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert answer.status_code == 422
    assert "agent_url" in answer.text
