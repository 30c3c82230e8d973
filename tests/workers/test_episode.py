"""Whole episodes: the agent against a real env server and a real scripted LLM server."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from helpers.factories import make_llm_call

from app.core.agent import DEFAULT_PROTOCOL, AgentMode, AgentProtocol, EpisodeResult, StepRecord
from app.core.env_client import EnvError
from app.core.llm import LLMCall, LLMUnavailable
from app.environments.webshop.agent import build_messages
from app.environments.webshop.client import EnvClient
from app.environments.webshop.opening import NAVIGATION
from app.scripted_llm import create_app as create_llm_app
from app.webshop.catalog_gen import write_catalog
from app.webshop.env import WebShopEnv
from app.webshop.server.app import create_app as create_env_app
from app.webshop.server.runner import RunningServer, serve_in_thread
from trainer.bootstrap.play import LocalEpisode
from workers.llm_client import LLMClient
from workers.player import run_episode


def steps(n: int) -> AgentProtocol:
    """The default protocol with an ``n``-step limit."""
    return replace(DEFAULT_PROTOCOL, max_steps=n)


STEPS_15 = steps(15)
NUM_PRODUCTS = 120
GOALS = [0, 1, 2, 7, 100, 300]


class ListRecorder:
    """Keeps what the episode reports, in order."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.calls: list[LLMCall] = []
        self.lines: list[str] = []

    def on_step(self, step: StepRecord) -> None:
        self.steps.append(step)

    def on_llm_call(self, call: LLMCall) -> None:
        self.calls.append(call)

    def on_log(self, line: str) -> None:
        self.lines.append(line)


@pytest.fixture(scope="module")
def webshop_env(tmp_path_factory: pytest.TempPathFactory) -> WebShopEnv:
    root: Path = tmp_path_factory.mktemp("agent-env")
    write_catalog(root / "data", NUM_PRODUCTS, seed=0)
    return WebShopEnv.load(data_dir=root / "data", goals="synthetic", cache_dir=root / "cache")


@pytest.fixture(scope="module")
def env_server(webshop_env: WebShopEnv) -> Iterator[RunningServer]:
    with serve_in_thread(create_env_app(webshop_env)) as running:
        yield running


@pytest.fixture(scope="module")
def oracle_llm(webshop_env: WebShopEnv) -> Iterator[RunningServer]:
    with serve_in_thread(create_llm_app("oracle", webshop_env)) as running:
        yield running


@pytest.fixture
def env(env_server: RunningServer) -> Iterator[EnvClient]:
    with EnvClient(env_server.url) as client:
        yield client


@pytest.fixture
def llm(oracle_llm: RunningServer, make_settings) -> Iterator[LLMClient]:
    with httpx.Client(base_url=oracle_llm.url) as admin:
        admin.post("/admin/faults", json={"mode": "ok"}).raise_for_status()
    with LLMClient(make_settings(llm_base_url=f"{oracle_llm.url}/v1")) as client:
        yield client


def _faults(server: RunningServer, **body: object) -> None:
    httpx.post(f"{server.url}/admin/faults", json=body).raise_for_status()


def _check_logs(recorder: ListRecorder, result: EpisodeResult) -> None:
    assert recorder.lines[0] == f"[TASK] w1 r1 {result.instruction}"
    steps = recorder.lines[1:-1]
    assert len(steps) == result.num_steps
    for n, line in enumerate(steps, start=1):
        assert re.fullmatch(rf"\[STEP\] {n}\. .+ -> (valid|invalid), .*", line), line
    outcome = "SUCCESS" if result.success else "FAIL"
    assert recorder.lines[-1] == f"[DONE] {result.reward:.4g} {result.num_steps} {outcome}"


@pytest.mark.parametrize("goal_id", GOALS)
def test_oracle_episode_gets_reward_1(env: EnvClient, llm: LLMClient, goal_id: int) -> None:
    recorder = ListRecorder()
    result = run_episode(env, llm, goal_id, recorder, protocol=STEPS_15, worker="w1", rollout="r1")
    assert result.reward == 1.0 and result.success
    assert result.end_reason == "bought" and result.done
    assert result.num_invalid == 0
    assert result.reward_parts is not None
    assert len(recorder.steps) == len(recorder.calls) == result.num_steps
    assert all(call.trainable for call in recorder.calls)
    assert result.num_trainable_calls == result.num_steps
    assert result.policy_versions == (0, 0)
    assert recorder.steps[-1].action == "click[buy now]"
    assert [s.index for s in recorder.steps] == list(range(result.num_steps))
    _check_logs(recorder, result)


@pytest.mark.parametrize(("start", "opening"), [("results", 1), ("item", 2)])
def test_opening_steps_are_recorded_without_llm_calls_and_prompt_as_in_process(
    env: EnvClient, llm: LLMClient, webshop_env: WebShopEnv, start: str, opening: int
) -> None:
    goal_id = GOALS[1]
    recorder = ListRecorder()
    result = run_episode(env, llm, goal_id, recorder, start=start, worker="w1", rollout="r1")
    scripted = recorder.steps[:opening]
    assert [s.action.split("[")[0] for s in scripted] == ["search", "click"][:opening]
    assert all(s.valid and s.info["opening"] and s.policy_version is None for s in scripted)
    assert all(s.reply == "" and s.llm_latency_ms == 0 for s in scripted)
    assert not any(s.info.get("opening") for s in recorder.steps[opening:])
    assert len(recorder.calls) == result.num_steps - opening == result.num_llm_calls
    assert [s.index for s in recorder.steps] == list(range(result.num_steps))
    assert all(line.endswith("(opening)") for line in recorder.lines[1 : 1 + opening])
    _check_logs(recorder, result)
    # The first prompt shows the opening as the policy's own history, exactly as the
    # in-process player (trainer.bootstrap.play.LocalEpisode) builds it.
    local = LocalEpisode(webshop_env, goal_id, start=start)
    assert local.opening == [s.action for s in scripted]
    assert recorder.calls[0].messages == local.messages()
    first = recorder.calls[0].messages[-1]["content"]
    assert f"Step {opening}: {scripted[-1].action}" in first
    assert ("click[buy now]" in first) == (start == "item")
    assert result.done and result.reward == recorder.steps[-1].reward


def test_opening_steps_do_not_count_toward_max_steps(
    env: EnvClient, llm: LLMClient, oracle_llm: RunningServer
) -> None:
    _faults(oracle_llm, mode="garbage", count=2)
    recorder = ListRecorder()
    result = run_episode(env, llm, GOALS[2], recorder, start="item", protocol=steps(2))
    assert result.end_reason == "max_steps" and result.reward == 0.0
    assert [s.valid for s in recorder.steps] == [True, True, False, False]
    assert result.num_steps == 4 and result.num_llm_calls == 2


def test_oracle_episode_in_tool_mode(env: EnvClient, llm: LLMClient) -> None:
    recorder = ListRecorder()
    result = run_episode(env, llm, 3, recorder, protocol=replace(STEPS_15, mode=AgentMode.TOOLS))
    assert result.reward == 1.0
    assert all(call.tool_calls and call.tools for call in recorder.calls)
    assert recorder.calls[-1].tool_calls[0]["function"]["name"] == "buy"


def test_garbage_replies_are_invalid_steps_and_episode_goes_on(
    env: EnvClient, llm: LLMClient, oracle_llm: RunningServer
) -> None:
    _faults(oracle_llm, mode="garbage", count=3)
    recorder = ListRecorder()
    result = run_episode(env, llm, 5, recorder, worker="w1", rollout="r1")
    assert [s.valid for s in recorder.steps[:3]] == [False, False, False]
    assert all(s.action is None and s.env_latency_ms == 0 for s in recorder.steps[:3])
    assert recorder.steps[0].error.startswith("Invalid reply")
    assert result.num_invalid == 3
    assert result.reward == 1.0
    assert recorder.lines[1].startswith("[STEP] 1. (no action) -> invalid, Invalid reply")
    _check_logs(recorder, result)


def test_action_the_page_lacks_is_an_invalid_env_step(
    env: EnvClient, llm: LLMClient, oracle_llm: RunningServer
) -> None:
    _faults(oracle_llm, mode="invalid_action", count=1)
    recorder = ListRecorder()
    result = run_episode(env, llm, 6, recorder)
    first = recorder.steps[0]
    assert first.action == "click[a button that is not there]"
    assert not first.valid and first.error
    assert first.env_latency_ms > 0
    assert result.num_invalid == 1
    assert result.reward == 1.0


def test_max_steps_ends_with_reward_0(env: EnvClient, llm: LLMClient) -> None:
    recorder = ListRecorder()
    result = run_episode(env, llm, 0, recorder, protocol=steps(2), worker="w1", rollout="r1")
    assert result.reward == 0.0 and not result.success
    assert result.end_reason == "max_steps" and not result.done
    assert result.num_steps == 2
    assert recorder.lines[-1] == "[DONE] 0 2 FAIL"
    _check_logs(recorder, result)


def test_max_steps_while_garbage_never_calls_env(
    env: EnvClient, llm: LLMClient, oracle_llm: RunningServer
) -> None:
    _faults(oracle_llm, mode="garbage")
    try:
        result = run_episode(env, llm, 0, ListRecorder(), protocol=steps(3))
    finally:
        _faults(oracle_llm, mode="ok")
    assert (result.reward, result.num_steps, result.num_invalid) == (0.0, 3, 3)


def test_llm_down_fails_episode_and_closes_session(
    env: EnvClient, oracle_llm: RunningServer, make_settings
) -> None:
    _faults(oracle_llm, mode="error_5xx")
    recorder = ListRecorder()
    settings = make_settings(llm_base_url=f"{oracle_llm.url}/v1", llm_retry_budget_s=0.3)
    try:
        with LLMClient(settings) as failing, pytest.raises(LLMUnavailable, match="HTTP 503"):
            run_episode(env, failing, 0, recorder)
    finally:
        _faults(oracle_llm, mode="ok")
    assert recorder.lines[0].startswith("[TASK]")
    assert env.health()["sessions"] == 0


def test_unknown_goal_is_an_env_error_404(env: EnvClient, llm: LLMClient) -> None:
    with pytest.raises(EnvError) as caught:
        run_episode(env, llm, 10**9, ListRecorder())
    assert caught.value.status_code == 404
    assert "unknown goal" in caught.value.reason
    assert not caught.value.retryable


def test_episode_closes_its_env_session(env: EnvClient, llm: LLMClient) -> None:
    before = env.health()["sessions"]
    result = run_episode(env, llm, 4, ListRecorder())
    assert result.reward == 1.0
    assert env.health()["sessions"] == before
    with pytest.raises(EnvError) as caught:
        env.get_session(result.session_id)
    assert caught.value.status_code == 404


def test_oracle_plays_rule_policy_for_unknown_instruction(oracle_llm: RunningServer) -> None:
    page = {"has_search_bar": True, "clickables": ["search"]}
    messages = build_messages("an instruction of no goal", "WebShop [SEP] Search", page, [])
    with httpx.Client(base_url=oracle_llm.url) as client:
        misses = client.get("/admin/stats").json()["oracle_goal_misses"]
        reply = client.post("/v1/chat/completions", json={"model": "p", "messages": messages})
        assert reply.json()["choices"][0]["message"]["content"] == (
            "search[an instruction of no goal]"
        )
        assert client.get("/admin/stats").json()["oracle_goal_misses"] == misses + 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_env_server_down_is_a_retryable_env_error() -> None:
    port = _closed_port()
    with EnvClient(f"http://127.0.0.1:{port}") as down, pytest.raises(EnvError) as caught:
        down.create_session(0)
    assert caught.value.status_code is None and caught.value.retryable
    assert f"env server http://127.0.0.1:{port} unreachable" in caught.value.reason


class OneRequestPerStepEnv(EnvClient):
    """Fails the test when the agent asks for the available actions separately."""

    def available_actions(self, session_id: str) -> dict:
        raise AssertionError("the step answer carries the available actions")


def test_episode_makes_one_env_request_per_step(env_server: RunningServer, llm: LLMClient) -> None:
    with OneRequestPerStepEnv(env_server.url) as env:
        result = run_episode(env, llm, GOALS[1], ListRecorder(), protocol=STEPS_15)
    assert result.reward == 1.0


def test_action_longer_than_the_env_accepts_is_an_invalid_step_without_env_call(
    env: EnvClient,
) -> None:
    from app.core.agent import TOO_LONG_ACTION
    from app.environments.webshop.agent import WebShopEpisode
    from workers.player import _take_step

    session = env.create_session(0)
    call = make_llm_call(response_text="search[" + "lamp " * 1_000 + "]")
    episode = WebShopEpisode(session.instruction, "obs", session.available_actions)
    step = _take_step(env, session.session_id, 0, call, episode)
    assert not step.valid and step.action is None
    assert step.error == TOO_LONG_ACTION and step.env_latency_ms == 0.0
    assert env.step(session.session_id, "search[lamp]").valid


def test_numbered_results_name_products_by_place_and_the_env_gets_the_listed_id(
    webshop_env: WebShopEnv,
) -> None:
    goal_id = GOALS[1]
    by_id_protocol = replace(DEFAULT_PROTOCOL, history_steps=1, constrain_actions=True)
    by_id = LocalEpisode(webshop_env, goal_id, by_id_protocol, start="results")
    numbered = LocalEpisode(
        webshop_env, goal_id, replace(by_id_protocol, result_refs="numbers"), start="results"
    )
    products = [c for c in by_id.state.available_actions["clickables"] if c not in NAVIGATION]
    assert len(products) >= 2
    prompt = numbered.messages()[-1]["content"]
    # No product id anywhere in the prompt (page, history, actions): only their places.
    assert not any(product.lower() in prompt.lower() for product in products)
    assert "[SEP] 1 [SEP]" in prompt and f"\nclick[{len(products)}]" in prompt
    regex = numbered.structured_outputs()["regex"]
    assert re.fullmatch(regex, "click[2]") and re.fullmatch(regex, "click[ 2]")
    assert not re.fullmatch(regex, f"click[{products[1]}]")
    # The same titles in the same order as the ids' page.
    assert numbered.messages()[-1]["content"].count("[SEP]") == by_id.messages()[-1][
        "content"
    ].count("[SEP]")
    # The reply names a place; the env opens the product listed there.
    assert numbered.reply("click[ 2]") and by_id.reply(f"click[{products[1]}]")
    assert numbered.session.observation() == by_id.session.observation()
    assert numbered.state.history[-1].action == "click[2]"
    assert by_id.state.history[-1].action == f"click[{products[1]}]"
    # A place the page does not list goes to the env as written: an invalid step.
    other = LocalEpisode(
        webshop_env,
        goal_id,
        replace(STEPS_15, history_steps=1, result_refs="numbers"),
        start="results",
    )
    assert not other.reply(f"click[{len(products) + 1}]") and other.invalid == 1
