"""The backend registry (trainer/backends/__init__.py): ``wsrl train`` and ``wsrl doctor``
take their backends, and what each honours, from it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, is_dataclass

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.commands._run_options import run_options
from trainer.backends import BACKENDS
from trainer.config import RunConfig

runner = CliRunner()


@pytest.mark.parametrize("command", ["train", "doctor"])
def test_an_unknown_backend_is_a_usage_error_that_lists_the_known_ones(command: str) -> None:
    # `wsrl train --backend jax` used to train with the local backend.
    result = runner.invoke(cli, [command, "--backend", "jax"], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "unknown backend 'jax': use one of local, verl" in result.output


def _paths(cls: type, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for f in fields(cls):
        if is_dataclass(f.default_factory):  # type: ignore[arg-type]
            out |= _paths(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            out.add(prefix + f.name)
    return out


def test_every_field_is_an_option_some_backend_honours() -> None:
    every = _paths(RunConfig)
    assert {o.path for o in run_options()} == every
    for path in every:
        assert any(b.honours(path) for b in BACKENDS.values()), path
    assert not BACKENDS["verl"].honours("algorithm.sample_weighting")
    assert BACKENDS["verl"].honours("algorithm.lr") and BACKENDS["local"].honours("lora.rank")


def test_the_local_backend_prints_its_configuration_through_the_registry() -> None:
    args = ["train", "--backend", "local", "--lr", "0.001", "--print-config"]
    result = runner.invoke(cli, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "algorithm.lr = 0.001  (flag --lr)" in result.output
    assert "algorithm.group_size = 4  (default)" in result.output
    assert "verl." not in result.output


def test_the_local_backend_loads_nothing_of_the_verl_backend() -> None:
    code = (
        "import sys; from trainer.backends import BACKENDS; BACKENDS['local'].load(); "
        "import trainer.backends.local.run; "
        "print(sorted(m for m in sys.modules if m.startswith('trainer.backends.verl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
