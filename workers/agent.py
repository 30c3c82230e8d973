"""The worker's player: one episode as a loop of LLM call -> action -> env step, over HTTP.

The prompt, the reply grammar and the history are the agent protocol's
(:class:`app.core.agent.Episode`), shared with the trainer's in-process players. This
module adds what only a worker does: the env server over HTTP, the LLM client, and a
recorder that gets every step and LLM call as it happens. A reply without a usable
action is a step with ``valid=False`` and no env call; the episode goes on. ``max_steps``
without buying ends it with reward 0.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from app.core.agent import (
    DEFAULT_HISTORY_STEPS,
    LOG_OBSERVATION_CHARS,
    TOOLS,
    AgentMode,
    Episode,
    EpisodeResult,
    StepRecord,
    one_line,
    reply_summary,
)
from app.core.env_client import EnvClient, EnvError
from app.core.llm import LLMCall, Sampling
from workers.llm import LLMClient

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
    env: EnvClient,
    llm: LLMClient,
    goal_id: int,
    recorder: EpisodeRecorder,
    *,
    max_steps: int = 15,
    mode: AgentMode | str = AgentMode.TEXT,
    sampling: Sampling | None = None,
    history_steps: int = DEFAULT_HISTORY_STEPS,
    constrain_actions: bool = False,
    worker: str = "-",
    rollout: str = "-",
) -> EpisodeResult:
    """Play one episode on ``goal_id`` and report every step and LLM call as it happens.

    LLM and env failures (:class:`workers.llm.LLMError`, :class:`EnvError`) propagate:
    the caller fails the attempt with their reason. The env session is closed either way.
    """
    mode = AgentMode(mode)
    started = time.monotonic()
    session = env.create_session(goal_id)
    episode = Episode(
        session.instruction,
        session.observation,
        session.available_actions,
        history_steps=history_steps,
        mode=mode,
        constrain_actions=constrain_actions,
    )
    _emit(recorder, f"[TASK] {worker} {rollout} {episode.instruction}")
    steps: list[StepRecord] = []
    versions: list[int] = []
    trainable = 0
    last: StepRecord | None = None
    try:
        for index in range(max_steps):
            call = llm.chat(
                episode.messages(),
                tools=TOOLS if mode == AgentMode.TOOLS else None,
                sampling=sampling,
                structured_outputs=episode.structured_outputs(),
            )
            recorder.on_llm_call(call)
            versions.append(call.policy_version)
            trainable += call.trainable
            last = _take_step(env, session.session_id, index, call, episode)
            available = None
            if last.valid and not last.done:
                available = (
                    last.available_actions
                    or last.info.get("available_actions")
                    or env.available_actions(session.session_id)
                )
            seen = last.observation if last.valid else (last.error or "")
            episode.record(
                last.action,
                valid=last.valid,
                seen=seen,
                observation=last.observation,
                available_actions=available,
            )
            steps.append(last)
            recorder.on_step(last)
            verdict = "valid" if last.valid else "invalid"
            _emit(
                recorder,
                f"[STEP] {index + 1}. {episode.history[-1].action} -> {verdict}, "
                f"{one_line(seen, LOG_OBSERVATION_CHARS)}",
            )
            if last.done:
                break
    finally:
        try:
            env.close_session(session.session_id)
        except EnvError as exc:
            logger.warning("could not close env session %s: %s", session.session_id, exc)
    done = last is not None and last.done
    reward = last.reward if done and last is not None else 0.0
    _emit(recorder, f"[DONE] {reward:.4g} {len(steps)} {'SUCCESS' if reward == 1.0 else 'FAIL'}")
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
        steps=steps,
    )


def _take_step(
    env: EnvClient, session_id: str, index: int, call: LLMCall, episode: Episode
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
        llm_latency_ms=call.latency_ms,
        env_latency_ms=env_ms,
        policy_version=call.policy_version,
        available_actions=result.available_actions,
    )
