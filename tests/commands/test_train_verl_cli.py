"""``wsrl train --backend verl``: the errors a user sees without the right config or machine."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()


def test_train_verl_unknown_config_lists_choices() -> None:
    pytest.importorskip("verl")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "llama"])
    assert result.exit_code == 1
    assert "smoke, fast, qwen, qwen3b" in result.output


@pytest.fixture
def fresh_settings(monkeypatch: pytest.MonkeyPatch):
    """Settings read anew from the environment this test sets."""
    from app.config import get_settings

    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_train_verl_refuses_a_config_the_workers_would_not_play(fresh_settings) -> None:
    pytest.importorskip("verl")
    fresh_settings.setenv("WSRL_AGENT_MODE", "text")
    fresh_settings.setenv("WSRL_MAX_STEPS", "10")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "fast"])
    assert result.exit_code == 1
    assert "WSRL_MAX_STEPS=10 but the verl config 'fast'" in result.output
    assert "WSRL_AGENT_MODE=text" in result.output and "expects tools" in result.output


def test_train_verl_without_gpu_says_so(fresh_settings) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    fresh_settings.setenv("WSRL_AGENT_MODE", "tools")
    fresh_settings.setenv("WSRL_MAX_STEPS", "15")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "fast"])
    assert result.exit_code == 1
    assert "needs NVIDIA GPUs" in result.output
