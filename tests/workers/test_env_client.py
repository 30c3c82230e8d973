"""The env client against a real env server: calls, and the errors it turns into EnvError."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.core.env_client import EnvError
from app.environments.webshop.client import EnvClient
from app.webshop.catalog_gen import write_catalog
from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app
from app.webshop.server.runner import RunningServer, serve_in_thread


@pytest.fixture(scope="module")
def env_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("env-client")
    write_catalog(root / "data", 60, seed=0)
    env = WebShopEnv.load(data_dir=root / "data", goals="synthetic", cache_dir=root / "cache")
    with serve_in_thread(create_app(env, max_sessions=3, max_sessions_per_client=3)) as running:
        yield running


@pytest.fixture
def env(env_server: RunningServer) -> Iterator[EnvClient]:
    with EnvClient(env_server.url, timeout_s=10) as client:
        yield client


def test_session_lifecycle(env: EnvClient) -> None:
    session = env.create_session(2)
    assert session.goal_id == 2
    assert session.observation.startswith("WebShop [SEP] Instruction:")
    assert session.available_actions == {"has_search_bar": True, "clickables": ["search"]}
    step = env.step(session.session_id, f"search[{session.instruction}]")
    assert step.valid and not step.done and step.reward == 0.0
    assert "next >" in env.available_actions(session.session_id)["clickables"]
    summary = env.get_session(session.session_id)
    assert summary["num_steps"] == 1 and summary["reward"] == 0.0
    env.close_session(session.session_id)
    env.close_session(session.session_id)  # closing twice is a no-op
    with pytest.raises(EnvError) as caught:
        env.get_session(session.session_id)
    assert caught.value.status_code == 404


def test_invalid_action_is_a_normal_step(env: EnvClient) -> None:
    session = env.create_session(0)
    step = env.step(session.session_id, "click[nothing]")
    assert not step.valid
    assert step.info.get("error")
    env.close_session(session.session_id)


def test_step_unknown_session_404_with_detail(env: EnvClient) -> None:
    with pytest.raises(EnvError) as caught:
        env.step("no-such-session", "search[x]")
    assert caught.value.status_code == 404
    assert caught.value.reason.startswith("env server POST /sessions/no-such-session/step -> 404")
    assert not caught.value.retryable


def test_bad_body_422(env: EnvClient) -> None:
    session = env.create_session(0)
    with pytest.raises(EnvError) as caught:
        env.step(session.session_id, "x" * 5000)
    assert caught.value.status_code == 422
    env.close_session(session.session_id)


def test_too_many_sessions_429_is_retryable(env: EnvClient) -> None:
    sessions = [env.create_session(0) for _ in range(3)]
    with pytest.raises(EnvError) as caught:
        env.create_session(0)
    assert caught.value.status_code == 429 and caught.value.retryable
    for session in sessions:
        env.close_session(session.session_id)
