"""``wsrl scripted-llm`` and ``wsrl env serve`` as real processes, played by the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.processes import ServiceProcess, env_server, scripted_llm, set_llm_fault
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from app.core.llm import LLMUnavailable
from app.environments.webshop.client import EnvClient
from workers.llm_client import LLMClient
from workers.player import run_episode


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_step(self, step: object) -> None:
        pass

    def on_llm_call(self, call: object) -> None:
        pass

    def on_log(self, line: str) -> None:
        self.lines.append(line)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, ...]]:
    root: Path = tmp_path_factory.mktemp("scripted-cli")
    settings = Settings(_env_file=None, data_dir=root / "data")
    env = env_server(root, settings)
    llm = scripted_llm(root, settings, policy="oracle", latency_ms=5)
    try:
        env.start()
        llm.start()
        yield env, llm
    finally:
        llm.stop()
        env.stop()


@pytest.mark.slow
def test_agent_plays_oracle_through_both_commands(services) -> None:
    env_proc, llm_proc = services
    models = httpx.get(f"{llm_proc.url}/models", timeout=5).json()
    assert models["data"][0]["id"] == "policy"
    settings = Settings(
        _env_file=None, llm_base_url=llm_proc.url, llm_retry_budget_s=0.5, llm_backoff_initial_s=0.1
    )
    with EnvClient(env_proc.url) as env, LLMClient(settings) as llm:
        recorder = Lines()
        result = run_episode(env, llm, 0, recorder, worker="cli", rollout="r0")
        assert result.reward == 1.0, recorder.lines
        set_llm_fault(llm_proc, "error_5xx")
        try:
            with pytest.raises(LLMUnavailable, match="HTTP 503"):
                run_episode(env, llm, 0, Lines())
        finally:
            set_llm_fault(llm_proc, "ok")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "random"], "--policy must be one of oracle, oracle-long, rule"),
        (["--fault", "explode"], "--fault must be one of ok, error_5xx"),
        (["--data", "x", "--products", "5"], "give --data or --products, not both"),
    ],
)
def test_bad_options_exit_2_with_message(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["scripted-llm", *args])
    assert result.exit_code == 2
    assert message in result.output
