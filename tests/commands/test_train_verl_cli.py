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
    assert "fast, qwen, qwen3b" in result.output


def test_train_verl_without_gpu_says_so() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "fast"])
    assert result.exit_code == 1
    assert "needs NVIDIA GPUs" in result.output
