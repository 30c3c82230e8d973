"""The agent protocol travels with the policy: real Celery workers, Redis, PostgreSQL, the
env server and the scripted LLM server, each a subprocess.

The stack's worker is given no agent setting of its own (its defaults: text mode, 4 steps
of history, 15 steps, unconstrained), so every difference below comes from the protocol
published with the policy version. A second worker is given ``WSRL_AGENT_HISTORY_STEPS``
explicitly and must refuse a policy that expects another history.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.processes import celery_worker, set_llm_fault
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import select

from app.core.agent import AgentMode, AgentProtocol
from app.core.endpoint import ENDPOINT_KEY, PolicyEndpoint, publish_policy
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt, LlmCall, Step
from app.db.session import session_scope
from app.environments.webshop.agent import SYSTEM_PROMPT_TOOLS

pytestmark = pytest.mark.slow

VERSIONS = itertools.count(1)


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("protocol-stack")
    settings = isolated_settings(
        make_database,
        redis_url,
        root,
        worker_heartbeat_s=1.0,
        retry_backoff_s=0.5,
        retry_backoff_max_s=1.0,
        max_attempts=6,
        step_timeout_s=10.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
    )
    assert not {"agent_mode", "agent_history_steps", "max_steps"} & settings.model_fields_set
    with RolloutStack.start(root, settings, workers=1, concurrency=2) as running:
        yield running
        running.redis.delete(ENDPOINT_KEY)


@pytest.fixture(autouse=True)
def healthy(stack: RolloutStack) -> Iterator[None]:
    yield
    set_llm_fault(stack.llm, "ok")
    for worker in stack.workers:
        if not worker.alive():
            worker.start()


def _publish(stack: RolloutStack, protocol: AgentProtocol) -> int:
    version = next(VERSIONS)
    endpoint = PolicyEndpoint(stack.llm.url or "", "policy", version, protocol=protocol)
    with session_scope(stack.sessions) as session:
        publish_policy(session, stack.redis, endpoint)
    return version


def _calls(stack: RolloutStack, rollout_id: uuid.UUID) -> list[LlmCall]:
    with session_scope(stack.sessions) as session:
        calls = session.scalars(
            select(LlmCall)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .where(Attempt.rollout_id == rollout_id, Attempt.status == AttemptStatus.SUCCEEDED)
            .order_by(LlmCall.index)
        ).all()
        session.expunge_all()
    return list(calls)


@pytest.mark.parametrize(
    "protocol",
    [
        AgentProtocol(AgentMode.TOOLS, history_steps=1, constrain_actions=False, max_steps=3),
        AgentProtocol(AgentMode.TEXT, history_steps=2, constrain_actions=True, max_steps=4),
    ],
    ids=["tools", "text-constrained"],
)
def test_a_worker_without_settings_plays_the_published_protocol(
    stack: RolloutStack, protocol: AgentProtocol
) -> None:
    """Replies the agent cannot use make every step invalid, so the episode runs its whole
    step limit and every prompt shows as much history as the protocol allows."""
    version = _publish(stack, protocol)
    set_llm_fault(stack.llm, "garbage", count=protocol.max_steps)
    [rollout_id] = stack.enqueue(goal_ids=stack.goal_ids[:1])
    assert stack.wait([rollout_id], timeout_s=60) == {"succeeded": 1}
    calls = _calls(stack, rollout_id)
    assert len(calls) == protocol.max_steps, "the published step limit, not WSRL_MAX_STEPS (15)"
    assert {c.policy_version for c in calls} == {version}
    tools_prompt = calls[0].request_messages[0]["content"] == SYSTEM_PROMPT_TOOLS
    assert tools_prompt == (protocol.mode == AgentMode.TOOLS)
    last = calls[-1].request_messages[-1]["content"]
    shown = min(protocol.history_steps, protocol.max_steps - 1)
    assert f"Previous steps (the last {shown} of {protocol.max_steps - 1}):" in last
    constrained = [c.structured_outputs is not None for c in calls]
    assert constrained == [protocol.constrain_actions] * len(calls)


def test_a_worker_whose_settings_contradict_the_protocol_refuses_and_loses_nothing(
    stack: RolloutStack,
) -> None:
    """The contradicting worker fails its attempts loudly (the error on the attempt row and
    in its log) without playing a step; the rollout waits in the queue and is played with
    the published protocol by a worker without settings of its own."""
    protocol = AgentProtocol(AgentMode.TEXT, history_steps=1, constrain_actions=False, max_steps=5)
    version = _publish(stack, protocol)
    [good] = stack.workers
    good.stop()
    wrong_settings = stack.settings.model_copy(update={"agent_history_steps": 4})
    wrong = celery_worker(stack.log_dir, wrong_settings, concurrency=2, name="wrong").start()
    try:
        [rollout_id] = stack.enqueue(goal_ids=stack.goal_ids[1:2])
        deadline = time.monotonic() + 60
        while True:
            with session_scope(stack.sessions) as session:
                errors = session.scalars(
                    select(Attempt.error).where(
                        Attempt.rollout_id == rollout_id, Attempt.status == AttemptStatus.FAILED
                    )
                ).all()
            if errors or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert errors, f"the wrong worker recorded no failed attempt:\n{wrong.tail(20)}"
        expected = (
            f"WSRL_AGENT_HISTORY_STEPS=4 is set here but policy v{version} (the protocol its "
            "trainer published) expects 1"
        )
        assert all(e.startswith("worker settings: agent protocol mismatch") for e in errors)
        assert all(expected in e for e in errors), errors
        assert expected in wrong.log_text()
        with session_scope(stack.sessions) as session:
            played = session.scalars(
                select(Step.id).join(Attempt).where(Attempt.rollout_id == rollout_id)
            ).all()
        assert not played, "the refusing worker played steps"
    finally:
        wrong.stop()
    good.start()
    assert stack.wait([rollout_id], timeout_s=60) == {"succeeded": 1}
    calls = _calls(stack, rollout_id)
    assert calls and {c.policy_version for c in calls} == {version}
    for index, call in enumerate(calls[1:], start=1):
        assert f"(the last 1 of {index})" in call.request_messages[-1]["content"]


def test_a_record_restored_from_postgres_keeps_the_protocol(stack: RolloutStack) -> None:
    """Redis lost the record: the worker restores it from the active version's row, protocol
    included, instead of falling back to its own settings."""
    protocol = AgentProtocol(AgentMode.TOOLS, history_steps=0, constrain_actions=False, max_steps=2)
    version = _publish(stack, protocol)
    stack.redis.delete(ENDPOINT_KEY)
    set_llm_fault(stack.llm, "garbage", count=protocol.max_steps)
    [rollout_id] = stack.enqueue(goal_ids=stack.goal_ids[2:3])
    assert stack.wait([rollout_id], timeout_s=60) == {"succeeded": 1}
    calls = _calls(stack, rollout_id)
    assert len(calls) == 2 and {c.policy_version for c in calls} == {version}
    assert calls[0].request_messages[0]["content"] == SYSTEM_PROMPT_TOOLS
    assert "Previous steps: none" in calls[1].request_messages[-1]["content"]
    assert PolicyEndpoint.from_json(stack.redis.get(ENDPOINT_KEY)).protocol == protocol
