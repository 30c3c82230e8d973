"""Agent-as-a-service: one attempt played by an external agent behind an HTTP URL.

The worker has opened the attempt. Here the env session is opened, the agent is asked to
play it with one ``POST`` to its URL::

    {rollout_id, attempt, instruction, max_steps,
     env: {base_url, session_id},
     llm: {base_url, model, api_key},
     sampling: {temperature, max_tokens, top_p, seed, stop}}

and, once it answers ``{done: true, steps: n}``, the outcome is read from the env session
(the agent's own claims are not trusted). ``llm.base_url`` is this attempt's LLM gateway
route, so every call the agent makes is recorded with its token ids and policy version,
exactly as the built-in agent's calls are; ``llm.api_key`` is this attempt's own gateway key
(:mod:`app.core.gateway_keys`: it opens this attempt's gateway route only, never the API).

Every way the agent can let the attempt down is an :class:`ExternalAgentError` with a
reason that names it (timeout, HTTP status, malformed answer, no purchase, no gateway
call); the rollout task records it on the attempt and retries like any failed attempt.

Steps: the env server keeps each session's steps (``GET /sessions/{id}?steps=true``); they
become the attempt's ``steps`` rows, with ``num_steps`` from the same answer.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.agent import EpisodeResult, StepRecord
from app.core.env_client import EnvError
from app.core.gateway_keys import attempt_key
from app.core.llm import Sampling
from app.db.models import LlmCall
from app.environments.webshop.client import EnvClient
from app.webshop.success import is_success
from workers.player import EpisodeRecorder

if TYPE_CHECKING:
    from workers.persistence import AttemptStart
    from workers.runtime import WorkerRuntime

logger = logging.getLogger(__name__)

ANSWER_PREVIEW_CHARS = 300


class ExternalAgentError(RuntimeError):
    """The external agent did not deliver a finished, recorded episode; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class GatewayCalls:
    """What the gateway recorded for one attempt."""

    count: int
    trainable: int
    version_min: int | None
    version_max: int | None


@dataclass(frozen=True)
class AgentAnswer:
    """The agent's final answer; ``steps`` is its own count (the env's count wins)."""

    done: bool
    steps: int | None


def gateway_base_url(api_url: str, rollout_id: uuid.UUID, attempt: int) -> str:
    """The OpenAI base URL of one attempt on the API's LLM gateway."""
    return f"{api_url.rstrip('/')}/v1/gateway/rollouts/{rollout_id}/attempts/{attempt}/v1"


def agent_timeout_s(max_steps: int, step_timeout_s: float) -> float:
    """How long the agent may take: every one of its steps is bounded like the built-in
    agent's, so the attempt fits in the task's budget (which adds a margin on top)."""
    return max_steps * step_timeout_s


def recorded_calls(sessions: sessionmaker[Session], attempt_id: int) -> GatewayCalls:
    """Count the attempt's ``llm_calls`` rows (written by the gateway, not by this worker)."""
    with sessions() as session:
        count, trainable, low, high = session.execute(
            select(
                func.count(),
                func.count().filter(LlmCall.trainable.is_(True)),
                func.min(LlmCall.policy_version),
                func.max(LlmCall.policy_version),
            ).where(LlmCall.attempt_id == attempt_id)
        ).one()
    return GatewayCalls(int(count), int(trainable), low, high)


def parse_answer(response: httpx.Response, agent_url: str) -> AgentAnswer:
    """The agent's answer, or :class:`ExternalAgentError` for a non-2xx or malformed one."""
    preview = response.text[:ANSWER_PREVIEW_CHARS]
    if not response.is_success:
        raise ExternalAgentError(
            f"agent {agent_url} answered HTTP {response.status_code}: {preview!r}"
        )
    try:
        body = response.json()
    except ValueError:
        raise ExternalAgentError(
            f"malformed answer from agent {agent_url}: not JSON: {preview!r}"
        ) from None
    if not isinstance(body, dict):
        raise ExternalAgentError(
            f"malformed answer from agent {agent_url}: expected an object "
            f'{{"done": true, "steps": n}}, got {preview!r}'
        )
    done, steps = body.get("done"), body.get("steps")
    if not isinstance(done, bool):
        raise ExternalAgentError(
            f"malformed answer from agent {agent_url}: 'done' must be true or false, "
            f"got {preview!r}"
        )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise ExternalAgentError(
            f"malformed answer from agent {agent_url}: 'steps' must be a count >= 0, "
            f"got {preview!r}"
        )
    return AgentAnswer(done=done, steps=steps)


def run_external_episode(
    env: EnvClient,
    http: httpx.Client,
    goal_id: int,
    recorder: EpisodeRecorder,
    calls_of_attempt: Callable[[], GatewayCalls],
    *,
    agent_url: str,
    rollout_id: uuid.UUID,
    attempt: int,
    api_url: str,
    api_token: str,
    model: str,
    sampling: Sampling,
    max_steps: int,
    step_timeout_s: float,
    worker: str = "-",
) -> EpisodeResult:
    """Have the agent at ``agent_url`` play one episode on ``goal_id``; the role of
    :func:`workers.player.run_episode` for external agents.

    Raises :class:`ExternalAgentError` (timeout, non-2xx, malformed answer, no gateway
    call, no purchase) and :class:`EnvError`; the env session is closed either way.
    """
    started = time.monotonic()
    session = env.create_session(goal_id)
    tag = f"{str(rollout_id)[:8]}#{attempt}"
    _emit(recorder, f"[TASK] {worker} {tag} {session.instruction}")
    payload: dict[str, Any] = {
        "rollout_id": str(rollout_id),
        "attempt": attempt,
        "instruction": session.instruction,
        "env": {
            "base_url": env.base_url,
            "session_id": session.session_id,
            # the env server's session token, when it has one
            **({"token": env.token} if env.token else {}),
        },
        "llm": {
            "base_url": gateway_base_url(api_url, rollout_id, attempt),
            "model": model,
            "api_key": attempt_key(api_token, rollout_id, attempt),
        },
        "sampling": asdict(sampling),
        "max_steps": max_steps,
    }
    timeout_s = agent_timeout_s(max_steps, step_timeout_s)
    try:
        answer = _ask_agent(http, agent_url, payload, timeout_s)
        summary = env.get_session(session.session_id, steps=True)
    finally:
        try:
            env.close_session(session.session_id)
        except EnvError as exc:
            logger.warning("could not close env session %s: %s", session.session_id, exc)
    calls = calls_of_attempt()
    if calls.count == 0:
        raise ExternalAgentError(
            f"agent {agent_url} never called the LLM gateway (no llm_calls recorded for "
            f"attempt {attempt}); it must send its chat completions to llm.base_url"
        )
    num_steps = int(summary.get("num_steps") or 0)
    _record_env_steps(recorder, summary.get("steps") or [], calls)
    if not summary.get("done"):
        raise ExternalAgentError(
            f"no purchase: agent {agent_url} answered done={answer.done} but env session "
            f"{session.session_id} is not done after {num_steps} steps"
        )
    if answer.steps is not None and answer.steps != num_steps:
        logger.info(
            "agent %s reported %d steps, the env counted %d", agent_url, answer.steps, num_steps
        )
    reward = float(summary.get("reward") or 0.0)
    success = is_success(reward)
    verdict = "SUCCESS" if success else "FAIL"
    _emit(recorder, f"[DONE] {reward:.4g} {num_steps} {verdict}")
    versions = (
        (calls.version_min, calls.version_max)
        if calls.version_min is not None and calls.version_max is not None
        else None
    )
    return EpisodeResult(
        goal_id=goal_id,
        session_id=session.session_id,
        instruction=session.instruction,
        reward=reward,
        done=True,
        end_reason="bought",
        num_steps=num_steps,
        num_invalid=0,
        num_llm_calls=calls.count,
        num_trainable_calls=calls.trainable,
        policy_versions=versions,
        reward_parts=summary.get("reward_parts"),
        duration_s=time.monotonic() - started,
        success=success,
    )


def _record_env_steps(
    recorder: EpisodeRecorder, steps: list[dict[str, Any]], calls: GatewayCalls
) -> None:
    """The steps the agent took, as the env server saw them, become ``steps`` rows.

    The agent's replies and latencies are not known here (its LLM calls are recorded by
    the gateway), so ``reply`` is empty and the policy version is the latest that served
    the attempt.
    """
    version = calls.version_max if calls.version_max is not None else 0
    for step in steps:
        valid = bool(step.get("valid", True))
        recorder.on_step(
            StepRecord(
                index=int(step["index"]),
                action=str(step["action"]),
                reply="",
                observation=str(step.get("observation", "")),
                reward=float(step.get("reward") or 0.0),
                done=bool(step.get("done")),
                valid=valid,
                info={"valid": valid, "source": "env session (external agent)"},
                error=None if valid else "invalid action",
                llm_latency_ms=0.0,
                env_latency_ms=0.0,
                policy_version=version,
            )
        )


def _ask_agent(
    http: httpx.Client, agent_url: str, payload: dict[str, Any], timeout_s: float
) -> AgentAnswer:
    try:
        response = http.post(agent_url, json=payload, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        raise ExternalAgentError(
            f"timeout: agent {agent_url} did not answer within {timeout_s:g}s "
            "(max_steps x step_timeout_s)"
        ) from exc
    except httpx.HTTPError as exc:
        raise ExternalAgentError(f"agent {agent_url} unreachable: {exc!s}") from exc
    return parse_answer(response, agent_url)


def _emit(recorder: EpisodeRecorder, line: str) -> None:
    logger.info(line)
    recorder.on_log(line)


def play_external_attempt(
    runtime: WorkerRuntime, start: AttemptStart, recorder: EpisodeRecorder, agent_url: str
) -> EpisodeResult:
    """:func:`run_external_episode` with the worker's clients and settings (the rollout
    task's entry point)."""
    settings = runtime.settings
    with httpx.Client() as http:
        return run_external_episode(
            runtime.env,
            http,
            start.goal_id,
            recorder,
            lambda: recorded_calls(runtime.sessions, start.attempt_id),
            agent_url=agent_url,
            rollout_id=start.rollout_id,
            attempt=start.number,
            api_url=settings.api_url,
            api_token=settings.api_token,
            model=settings.llm_model,
            sampling=Sampling.from_settings(settings).overridden(start.sampling),
            max_steps=settings.max_steps,
            step_timeout_s=settings.step_timeout_s,
            worker=runtime.worker,
        )
