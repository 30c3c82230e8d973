"""The worker's player: one episode as a loop of LLM call -> action -> env step, over HTTP.

The prompt, the reply grammar and the history are the environment's episode's
(:class:`app.core.agent.Episode`, WebShop's by default), shared with the trainer's
in-process players. This
module adds what only a worker does: the env server over HTTP, the LLM client, and a
recorder that gets every step and LLM call as it happens. A reply without a usable
action is a step with ``valid=False`` and no env call; the episode goes on. ``max_steps``
without buying ends it with reward 0.

A rollout's ``start`` other than ``search`` first plays its opening
(:mod:`app.environments.webshop.opening`): scripted steps recorded like any step but
without an LLM call (``info.opening`` is true, logged as ``[STEP] ... (opening)``), outside
``max_steps``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from app.core.agent import (
    DEFAULT_PROTOCOL,
    LOG_OBSERVATION_CHARS,
    OPENING_INFO,
    AgentProtocol,
    Episode,
    EpisodeResult,
    StepRecord,
    one_line,
    reply_summary,
)
from app.core.env_client import EnvError, EnvServer
from app.core.llm import LLMCall, Sampling
from app.db.lifecycle import RolloutStart
from app.environments import WEBSHOP, Environment
from workers.llm_client import LLMClient

logger = logging.getLogger(__name__)


class EpisodeRecorder(Protocol):
    """Where an episode's records go; the Celery task persists them as rows."""

    def on_step(self, step: StepRecord) -> None: ...

    def on_llm_call(self, call: LLMCall) -> None: ...

    def on_log(self, line: str) -> None: ...


def _emit(recorder: EpisodeRecorder, line: str) -> None:
    logger.info(line)
    recorder.on_log(line)


def run_episode(
    env: EnvServer,
    llm: LLMClient,
    goal_id: int,
    recorder: EpisodeRecorder,
    *,
    protocol: AgentProtocol = DEFAULT_PROTOCOL,
    environment: Environment = WEBSHOP,
    goal_spec: dict[str, Any] | None = None,
    instruction: str = "",
    sampling: Sampling | None = None,
    start: RolloutStart | str = RolloutStart.SEARCH,
    worker: str = "-",
    rollout: str = "-",
) -> EpisodeResult:
    """Play one episode on ``goal_id`` and report every step and LLM call as it happens.

    The policy plays ``environment``'s episode by ``protocol`` from ``start`` (its
    opening), at most
    ``protocol.max_steps`` steps of its own after the opening's. LLM and env failures
    (:class:`workers.llm_client.LLMError`, :class:`EnvError`) propagate: the caller fails the
    attempt with their reason. The env session is closed either way.
    """
    started = time.monotonic()
    session = environment.open_session(env, goal_id, goal_spec, instruction)
    episode = environment.episode(
        session.instruction or instruction, session.observation, session.available_actions, protocol
    )
    _emit(recorder, f"[TASK] {worker} {rollout} {episode.instruction}")
    steps: list[StepRecord] = []
    versions: list[int] = []
    trainable = 0
    last: StepRecord | None = None

    def record(step: StepRecord, note: str = "") -> None:
        available = None
        if step.valid and not step.done:
            available = (
                step.available_actions
                or step.info.get("available_actions")
                or env.available_actions(session.session_id)
            )
        seen = step.observation if step.valid else (step.error or "")
        episode.record(
            step.action,
            valid=step.valid,
            seen=seen,
            observation=step.observation,
            available_actions=available,
        )
        steps.append(step)
        recorder.on_step(step)
        verdict = "valid" if step.valid else "invalid"
        _emit(
            recorder,
            f"[STEP] {len(steps)}. {episode.history[-1].action} -> {verdict}, "
            f"{one_line(seen, LOG_OBSERVATION_CHARS)}{note}",
        )

    def opening_step(action: str) -> bool:
        step = _env_step(env, session.session_id, len(steps), action, reply="", call=None)
        step.info = {**step.info, **OPENING_INFO}
        record(step, " (opening)")
        return step.valid

    try:
        environment.opening(episode, start, opening_step)
        for _ in range(protocol.max_steps):
            call = llm.chat(
                episode.messages(),
                tools=episode.tools(),
                sampling=sampling,
                structured_outputs=episode.structured_outputs(),
            )
            recorder.on_llm_call(call)
            versions.append(call.policy_version)
            trainable += call.trainable
            last = _take_step(env, session.session_id, len(steps), call, episode)
            record(last)
            if last.done:
                break
    finally:
        try:
            env.close_session(session.session_id)
        except EnvError as exc:
            logger.warning("could not close env session %s: %s", session.session_id, exc)
    done = last is not None and last.done
    reward = last.reward if done and last is not None else 0.0
    success = episode.success(reward)
    verdict = "SUCCESS" if success else "FAIL"
    _emit(recorder, f"[DONE] {reward:.4g} {len(steps)} {verdict}")
    return EpisodeResult(
        goal_id=goal_id,
        session_id=session.session_id,
        instruction=episode.instruction,
        reward=reward,
        done=done,
        end_reason="bought" if done else "max_steps",
        num_steps=len(steps),
        num_invalid=sum(not s.valid for s in steps),
        num_llm_calls=len(versions),
        num_trainable_calls=trainable,
        policy_versions=(min(versions), max(versions)) if versions else None,
        reward_parts=last.info.get("reward_parts") if done and last is not None else None,
        duration_s=time.monotonic() - started,
        success=success,
        steps=steps,
    )


def _take_step(
    env: EnvServer, session_id: str, index: int, call: LLMCall, episode: Episode
) -> StepRecord:
    """Turn one reply into a step: no env call when the reply holds no usable action."""
    action, invalid = episode.action(call)
    reply = reply_summary(call)
    if action is None:
        return StepRecord(
            index=index,
            action=None,
            reply=reply,
            observation=episode.observation,
            reward=0.0,
            done=False,
            valid=False,
            info={"valid": False, "error": invalid},
            error=invalid,
            llm_latency_ms=call.latency_ms,
            env_latency_ms=0.0,
            policy_version=call.policy_version,
        )
    return _env_step(env, session_id, index, action, reply=reply, call=call)


def _env_step(
    env: EnvServer, session_id: str, index: int, action: str, *, reply: str, call: LLMCall | None
) -> StepRecord:
    """Step the env with ``action``; ``call`` is the reply's LLM call (None: scripted)."""
    env_started = time.monotonic()
    result = env.step(session_id, action)
    env_ms = (time.monotonic() - env_started) * 1000
    error = None if result.valid else str(result.info.get("error") or "invalid action")
    return StepRecord(
        index=index,
        action=action,
        reply=reply,
        observation=result.observation,
        reward=result.reward,
        done=result.done,
        valid=result.valid,
        info=result.info,
        error=error,
        llm_latency_ms=call.latency_ms if call is not None else 0.0,
        env_latency_ms=env_ms,
        policy_version=call.policy_version if call is not None else None,
        available_actions=result.available_actions,
    )
