"""Any env server of AgentGym's protocol trains by name and URL alone (``WSRL_AGENTGYM``):
our BabyAI server, registered as ``grid``, is played with the generic AgentGym episode
(nothing of BabyAI's prompt, parsing or success rule) by a Celery worker process and
trained on by the local trainer; its goals are ``data_idx`` 0 to N-1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.processes import babyai_server
from sqlalchemy import select

from app.config import AgentGymServer, Settings, get_settings
from app.core.agent import DEFAULT_PROTOCOL
from app.db.lifecycle import RolloutStatus
from app.db.models import Goal, LlmCall, Rollout
from app.db.session import session_scope
from app.environments import (
    ENVIRONMENTS,
    UnknownEnvironmentError,
    agentgym_goal_ids,
    get_environment,
    goals_of,
)
from app.environments.agentgym.agent import SYSTEM_PROMPT as AGENTGYM_PROMPT
from app.environments.agentgym.agent import AgentGymEpisode

GRID = "grid"


@pytest.fixture
def agentgym_env(monkeypatch: pytest.MonkeyPatch):
    """``WSRL_AGENTGYM`` in this process (the run configuration reads it) for ``servers``."""

    def set_servers(servers: dict[str, AgentGymServer]) -> None:
        monkeypatch.setenv(
            "WSRL_AGENTGYM", json.dumps({k: v.model_dump() for k, v in servers.items()})
        )
        get_settings.cache_clear()

    yield set_servers
    get_settings.cache_clear()


def test_a_server_named_in_wsrl_agentgym_is_an_environment(fresh_settings: Settings) -> None:
    server = AgentGymServer(url="http://127.0.0.1:9", goals=12, success_reward=0.5)
    settings = fresh_settings.model_copy(update={"agentgym": {GRID: server}})
    grid = get_environment(GRID, settings)
    assert grid.name == GRID and not grid.openings and grid.url(settings) == server.url
    rows = grid.goal_rows()  # type: ignore[misc]
    first = agentgym_goal_ids(GRID)
    assert [r["id"] for r in rows] == list(range(first, first + 12))
    assert [r["split"] for r in rows].count("test") == 3  # data_idx 0, 5 and 10
    assert {r["environment"] for r in rows} == {GRID} and rows[7]["spec"] == {"data_idx": 7}
    episode = grid.episode(
        "", "Your goal: go to the red ball\nYou see: a wall.", {}, DEFAULT_PROTOCOL
    )
    assert isinstance(episode, AgentGymEpisode) and type(episode).success_reward == 0.5
    assert episode.instruction == "Your goal: go to the red ball\nYou see: a wall."
    assert episode.success(0.5) and not episode.success(0.49)
    with pytest.raises(UnknownEnvironmentError, match="known: babyai, webshop, grid"):
        get_environment("textcraft", settings)
    with pytest.raises(UnknownEnvironmentError, match="unknown environment 'grid'"):
        get_environment(GRID)  # no settings, no servers
    clash = fresh_settings.model_copy(update={"agentgym": {"babyai": server}})
    assert get_environment("babyai", clash) is ENVIRONMENTS["babyai"]  # built-ins first


def test_goal_ids_taken_by_another_environment_are_a_clear_error(
    fresh_settings: Settings, sessions
) -> None:
    server = AgentGymServer(url="http://127.0.0.1:9", goals=10)
    settings = fresh_settings.model_copy(update={"agentgym": {GRID: server}})
    with session_scope(sessions) as session:
        session.add(
            Goal(id=agentgym_goal_ids(GRID) + 4, environment="other", split="test", instruction="")
        )
    with session_scope(sessions) as session, pytest.raises(ValueError) as raised:
        goals_of(session, settings, get_environment(GRID, settings), "train")
    first = agentgym_goal_ids(GRID)
    assert str(raised.value) == (
        f"grid's goal ids {first}-{first + 9} are taken by other environments' goals "
        "(1 of 'other'); rename it"
    )


@pytest.mark.slow
def test_the_tiny_pipeline_trains_on_an_agentgym_server_by_url(
    fresh_settings: Settings,
    sessions,
    babyai_checkpoint: Path,
    tmp_path: Path,
    train_two_steps,
    agentgym_env,
) -> None:
    server = babyai_server(tmp_path, fresh_settings).start()
    grid = AgentGymServer(url=server.url, goals=40, success_reward=0.01)
    agentgym_env({GRID: grid})
    settings = fresh_settings.model_copy(
        update={
            "agentgym": {GRID: grid},
            "max_steps": 3,
            "llm_max_tokens": 12,
            "agent_constrain_actions": True,
        }
    )
    try:
        with session_scope(sessions) as session:
            assert goals_of(session, settings, get_environment(GRID, settings), "train") == 40
        train_two_steps(settings, babyai_checkpoint, tmp_path, GRID)
        with session_scope(sessions) as session:
            trained = session.execute(
                select(Rollout.goal_id, Rollout.reward, Rollout.success, Rollout.status).where(
                    Rollout.train_step.is_not(None)
                )
            ).all()
            prompts = session.scalars(select(LlmCall.request_messages).limit(5)).all()
        first = agentgym_goal_ids(GRID)
        assert len(trained) == 2 * 2 * 4
        assert all(first <= r.goal_id < first + 40 for r in trained)
        assert all(r.status == RolloutStatus.SUCCEEDED for r in trained)
        assert all(r.success == (r.reward >= 0.01) for r in trained)
        for messages in prompts:  # the generic episode's, with the server's task as given
            assert messages[0]["content"] == AGENTGYM_PROMPT
            assert messages[1]["content"].startswith("Instruction: Your goal: ")
    finally:
        server.stop()
