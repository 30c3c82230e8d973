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


def test_dev_passes_train_starts_to_the_trainer(
    monkeypatch: pytest.MonkeyPatch, test_settings: Settings
) -> None:
    from app.commands import dev

    seen: list[list[str]] = []

    def start_children(supervisor, settings, model, trainer_options, threads) -> None:
        seen.append(trainer_options)
        raise dev._Stop

    monkeypatch.setattr("app.config.get_settings", lambda: test_settings)
    monkeypatch.setattr(dev, "_prepare", lambda settings: None)
    monkeypatch.setattr(dev, "_check_ports", lambda settings: None)
    monkeypatch.setattr(dev, "_start_children", start_children)
    result = runner.invoke(cli, ["dev", "--model", "m", "--train-starts", "item, search"])
    assert len(seen) == 1, result.output
    [options] = seen
    assert options[options.index("--train-starts") + 1] == "item,search"
