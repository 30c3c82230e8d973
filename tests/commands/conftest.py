"""Fixtures of the command tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings


@pytest.fixture
def dev_trainer_options(
    monkeypatch: pytest.MonkeyPatch, test_settings: Settings
) -> Callable[..., list[str]]:
    """Runs ``wsrl dev`` with some arguments up to where it would start its children, and
    returns the options it would give its trainer (nothing started, no services)."""
    from app.commands import dev

    seen: list[list[str]] = []

    def start_children(supervisor, settings, environment, model, trainer_options, threads) -> str:
        seen.append(trainer_options)
        raise dev._Stop

    monkeypatch.setattr("app.config.get_settings", lambda: test_settings)
    monkeypatch.setattr(dev, "_prepare", lambda settings: None)
    monkeypatch.setattr(dev, "_check_ports", lambda settings, environment: None)
    monkeypatch.setattr(dev, "_start_children", start_children)

    def run(args: list[str], env: dict[str, str] | None = None) -> list[str]:
        result = CliRunner().invoke(cli, ["dev", *args], env=env)
        assert len(seen) == 1, result.output
        return seen.pop()

    return run
