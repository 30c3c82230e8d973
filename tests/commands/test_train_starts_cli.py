"""``--train-starts`` of ``wsrl train`` and ``wsrl dev``: refused before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings

runner = CliRunner()


@pytest.mark.parametrize("command", ["train", "dev"])
@pytest.mark.parametrize(
    ("value", "message"),
    [("search,itme", "got 'itme'"), (",", "at least one start")],
)
def test_bad_train_starts_is_a_clear_error(command: str, value: str, message: str) -> None:
    result = runner.invoke(cli, [command, "--train-starts", value])
    assert result.exit_code == 1, result.output
    assert "--train-starts" in result.output and message in result.output


def test_dev_passes_train_starts_to_the_trainer(dev_trainer_options) -> None:
    options = dev_trainer_options(
        ["--model", "m", "--train-starts", "item, search", "--lr", "3e-4"]
    )
    assert options[options.index("--train-starts") + 1] == "item,search"
    assert float(options[options.index("--lr") + 1]) == 3e-4


def test_dev_refuses_a_learning_rate_that_is_not_positive() -> None:
    result = runner.invoke(cli, ["dev", "--model", "m", "--lr", "0"])
    assert result.exit_code != 0
    assert "--lr" in result.output


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5"])
def test_train_refuses_a_step_discount_outside_zero_to_one(value: str) -> None:
    result = runner.invoke(cli, ["train", "--step-discount", value])
    assert result.exit_code == 1, result.output
    assert "--step-discount" in result.output and "(0, 1]" in result.output


def test_tiny_policy_with_mismatched_worker_settings_is_refused_before_bootstrapping(
    monkeypatch: pytest.MonkeyPatch, test_settings: Settings
) -> None:
    """`docker compose --profile dev up` with `.env`'s tools mode and 4 history steps: the
    trainer says so at once, not after the 10-17 minutes of bootstrapping the tiny policy."""
    from trainer.backends.local import entry

    bootstrapped: list[object] = []
    settings = test_settings.model_copy(update={"agent_history_steps": 4, "agent_mode": "tools"})
    monkeypatch.setattr("app.config.get_settings", lambda: settings)
    monkeypatch.setattr(entry, "ensure_tiny_policy", bootstrapped.append)
    result = runner.invoke(cli, ["train", "--backend", "local", "--model", "tiny"])
    assert result.exit_code == 1, result.output
    assert not bootstrapped, "the bootstrap started before the settings were checked"
    assert "WSRL_AGENT_HISTORY_STEPS=4" in result.output
    assert "WSRL_AGENT_MODE=tools" in result.output
