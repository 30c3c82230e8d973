"""Fixtures of the env-server tests: a small generated catalog and real uvicorn servers.

Every server here is a real uvicorn process thread on a free port of 127.0.0.1, talked to
over HTTP with httpx.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import httpx
import pytest

from app.webshop.agents import oracle_action
from app.webshop.catalog_gen import write_catalog
from app.webshop.env import Goal, WebShopEnv
from app.webshop.server.app import create_app
from app.webshop.server.runner import RunningServer, serve_in_thread

NUM_PRODUCTS = 400  # 1,900+ goals: all three splits are non-empty


@pytest.fixture(scope="session")
def webshop_env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    root = tmp_path_factory.mktemp("webshop-server")
    data = root / "data"
    write_catalog(data, NUM_PRODUCTS, seed=0)
    return WebShopEnv.load(data_dir=data, goals="synthetic", cache_dir=root / "cache")


ServerFactory = Callable[..., AbstractContextManager[RunningServer]]


@pytest.fixture(scope="session")
def start_server(webshop_env: WebShopEnv) -> ServerFactory:
    """``with start_server(session_ttl_s=..., max_sessions=...) as running:``"""

    def start(**kwargs: float) -> AbstractContextManager[RunningServer]:
        return serve_in_thread(create_app(webshop_env, **kwargs))

    return start


@pytest.fixture(scope="module")
def server(start_server: ServerFactory) -> Iterator[RunningServer]:
    with start_server() as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


MAX_STEPS = 15


@dataclass
class Episode:
    """What one played episode saw: every observation, action and the final step."""

    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False


def play_oracle(goal: Goal, first: tuple[str, dict], act: Callable[[str], tuple]) -> Episode:
    """Play the reference oracle through ``act(action) -> (obs, avail, reward, done)``."""
    episode = Episode()
    observation, available = first
    episode.observations.append(observation)
    for _ in range(MAX_STEPS):
        action = oracle_action(goal, observation, available, list(episode.actions))
        episode.actions.append(action)
        observation, available, episode.reward, episode.done = act(action)
        episode.observations.append(observation)
        if episode.done:
            break
    return episode


@pytest.fixture(scope="session")
def oracle() -> Callable[..., Episode]:
    return play_oracle


@pytest.fixture(scope="session")
def reference_episode(webshop_env: WebShopEnv) -> Callable[[int], Episode]:
    """The oracle's episode on a goal, played in-process: what HTTP must reproduce."""
    cache: dict[int, Episode] = {}

    def play(goal_id: int) -> Episode:
        if goal_id not in cache:
            session = webshop_env.new_session(goal_id)

            def act(action: str) -> tuple:
                result = session.step(action)
                return result.observation, session.available_actions(), result.reward, result.done

            first = (session.observation(), session.available_actions())
            cache[goal_id] = play_oracle(webshop_env.goals[goal_id], first, act)
        return cache[goal_id]

    return play
