"""BabyAI's agent side played over AgentGym's protocol: :class:`AgentGymClient` against our
BabyAI server on a thread, and against a minimal AgentGym-style server without
``/available_actions`` whose errors are 200 answers, as AgentGym's own servers send them."""

from __future__ import annotations

import dataclasses
import itertools
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import Body, FastAPI

from app.babyai.game import BabyAIGame
from app.babyai.server import create_app
from app.core.agent import DEFAULT_PROTOCOL, AgentMode
from app.core.env_client import EnvError, EnvSession
from app.environments.agentgym.client import AgentGymClient
from app.environments.babyai.agent import BabyAIEpisode
from app.webshop.server.runner import serve_in_thread

DATA_IDX = 1
CONSTRAINED = dataclasses.replace(DEFAULT_PROTOCOL, constrain_actions=True)


@pytest.fixture(scope="module")
def env() -> Iterator[AgentGymClient]:
    with serve_in_thread(create_app()) as running, AgentGymClient(running.url) as client:
        yield client


@pytest.fixture(scope="module")
def mission() -> str:
    return BabyAIGame.from_data_idx(DATA_IDX).mission


@pytest.fixture
def session(env: AgentGymClient, mission: str) -> Iterator[EnvSession]:
    session = env.create_session(data_idx=DATA_IDX, instruction=mission)
    yield session
    env.close_session(session.session_id)


def _episode(session: EnvSession, protocol: Any = DEFAULT_PROTOCOL) -> BabyAIEpisode:
    return BabyAIEpisode(
        session.instruction, session.observation, session.available_actions, protocol
    )


def _goal_action(mission: str, actions: list[str]) -> str:
    """``go to the red ball`` -> the listed ``go to red ball N``."""
    found = re.fullmatch(r"go to (?:the|a) (\w+) (\w+)", mission)
    assert found, mission
    prefix = f"go to {found.group(1)} {found.group(2)} "
    return next(a for a in actions if a.startswith(prefix))


def test_create_session_gives_observation_and_actions(session: EnvSession, mission: str) -> None:
    assert session.goal == {"id": DATA_IDX, "instruction": mission}
    assert session.observation.startswith(f"Your goal: {mission}")
    actions = session.available_actions["actions"]
    assert {"turn left", "move forward", "check available actions"} <= set(actions)


def test_prompt_shows_mission_once_and_actions_as_list(session: EnvSession, mission: str) -> None:
    episode = _episode(session)
    system, user = episode.messages()
    assert system["role"] == "system" and "grid world" in system["content"]
    content = user["content"]
    assert content.count(mission) == 1
    assert "Your goal:" not in content and "Available actions: [" not in content
    page, listed = content.split("\nAvailable actions:\n")
    assert "Current observation:\nYou see: " in page
    assert listed.split("\n") == episode.listed_actions()
    assert "go to red ball 1" in listed and "check available actions" not in listed


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("go to red ball 1", "go to red ball 1"),
        ("<think>hmm</think> Action: go to red ball 1.", "go to red ball 1"),
        ("I will turn left", "turn left"),
        ("First I look around.\n`Move Forward`", "move forward"),
        ("maybe pickup red ball 1, or go to red box 1 instead", "go to red box 1"),
        ("fly away", "fly away"),
        ("", None),
        ("<think>go to red ball 1</think>\n  ", None),
    ],
)
def test_parse(session: EnvSession, reply: str, action: str | None) -> None:
    assert _episode(session).parse(reply) == action


def test_invalid_reply_is_an_invalid_step(session: EnvSession) -> None:
    assert _episode(session).action("") == (None, "Invalid reply: it named no action.")


def test_constraint_allows_listed_actions_only(session: EnvSession) -> None:
    assert _episode(session).structured_outputs() is None
    episode = _episode(session, CONSTRAINED)
    outputs = episode.structured_outputs()
    assert outputs is not None
    regex = re.compile(outputs["regex"])
    for action in episode.listed_actions():
        assert regex.fullmatch(action) and regex.fullmatch(" " + action)
    assert not regex.fullmatch("fly away")
    assert not regex.fullmatch("check available actions")


def test_tools_mode_offers_no_tools(session: EnvSession) -> None:
    tools = dataclasses.replace(DEFAULT_PROTOCOL, mode=AgentMode.TOOLS)
    assert _episode(session, tools).tools() is None


def test_going_to_the_goal_object_succeeds(
    env: AgentGymClient, session: EnvSession, mission: str
) -> None:
    episode = _episode(session)
    refused = env.step(session.session_id, "fly away")
    assert not refused.done and refused.reward == 0.0
    assert refused.available_actions == session.available_actions
    seen = refused.observation
    episode.record("fly away", valid=True, seen=seen, observation=seen, available_actions=None)
    content = episode.messages()[1]["content"]
    assert 'Observation: "fly away" is not an available action.' in content
    assert content.count("Available actions:") == 1
    action, _ = episode.action(f"Action: {_goal_action(mission, episode.listed_actions())}")
    assert action is not None
    step = env.step(session.session_id, action)
    assert step.done and step.reward > 0 and step.available_actions is None
    assert step.info == {"valid": True, "step_reward": step.reward}
    assert episode.success(step.reward) and not episode.success(0.0)


def test_close_session_twice(env: AgentGymClient, mission: str) -> None:
    session = env.create_session(data_idx=DATA_IDX, instruction=mission)
    env.close_session(session.session_id)
    env.close_session(session.session_id)


def test_step_unknown_id_404(env: AgentGymClient) -> None:
    with pytest.raises(EnvError, match="unknown env id") as caught:
        env.step("999999", "turn left")
    assert caught.value.status_code == 404 and not caught.value.retryable


def test_closed_port_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = AgentGymClient(f"http://127.0.0.1:{port}", timeout_s=2)
    with client, pytest.raises(EnvError) as caught:
        client.create_session(data_idx=0, instruction="anything")
    assert caught.value.status_code is None and caught.value.retryable


# --- a server without /available_actions ------------------------------------------------------


def _plain_agentgym_app() -> FastAPI:
    """AgentGym's protocol as its own servers speak it: no ``/available_actions``, errors
    as 200 answers. ``win`` ends an episode with reward 1; the last episode of data_idx 9
    lists no actions."""
    app = FastAPI()
    envs: dict[int, int] = {}
    ids = itertools.count()

    def observation(text: str, data_idx: int) -> str:
        if data_idx == 9:
            return text
        return f'{text}\nAvailable actions: ["wait", "win"]'

    @app.post("/create")
    def create() -> dict[str, int]:
        env_id = next(ids)
        envs[env_id] = -1
        return {"id": env_id}

    @app.post("/reset")
    def reset(id: int = Body(), data_idx: int = Body()) -> dict[str, Any]:
        envs[id] = data_idx
        text = observation("Your goal: win", data_idx)
        return {"observation": text, "reward": 0.0, "score": 0.0, "done": False}

    @app.post("/step")
    def step(id: int = Body(), action: str = Body()) -> dict[str, Any]:
        if id not in envs:
            return {"error": f"env {id} does not exist"}
        done = action == "win"
        text = observation("You won." if done else "You waited.", envs[id])
        return {"observation": text, "reward": float(done), "score": float(done), "done": done}

    @app.post("/close")
    def close(id: int = Body(embed=True)) -> Any:
        return True if envs.pop(id, None) is not None else {"error": f"env {id} is not open"}

    return app


@pytest.fixture(scope="module")
def plain() -> Iterator[AgentGymClient]:
    with serve_in_thread(_plain_agentgym_app()) as running, AgentGymClient(running.url) as c:
        yield c


def test_actions_parsed_from_the_observation_without_the_route(plain: AgentGymClient) -> None:
    session = plain.create_session(data_idx=0, instruction="win")
    assert session.available_actions == {"actions": ["wait", "win"]}
    assert plain.available_actions(session.session_id) == {"actions": ["wait", "win"]}
    waited = plain.step(session.session_id, "wait")
    assert waited.available_actions == {"actions": ["wait", "win"]}
    won = plain.step(session.session_id, "win")
    assert won.done and won.reward == 1.0 and won.available_actions is None
    plain.close_session(session.session_id)
    plain.close_session(session.session_id)

    unlisted = plain.create_session(data_idx=9, instruction="win")
    assert unlisted.available_actions == {"actions": []}
    plain.close_session(unlisted.session_id)


def test_error_answers_with_200_raise(plain: AgentGymClient) -> None:
    with pytest.raises(EnvError, match="does not exist") as caught:
        plain.step("999", "wait")
    assert not caught.value.retryable
