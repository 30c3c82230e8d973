"""``wsrl env catalog`` and ``wsrl env baseline`` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

FIXTURE_CATALOG = Path(__file__).resolve().parents[1] / "webshop" / "fixtures" / "catalog"


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    from app.config import get_settings

    monkeypatch.setenv("WSRL_DATA_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


def test_env_catalog_writes_three_files(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "cat"
    r = runner.invoke(cli, ["env", "catalog", "--products", "30", "--seed", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    for name in ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"):
        assert (out / name).exists()
    assert len(json.loads((out / "items_shuffle.json").read_text())) == 30


def _progress(output: str, phase: str) -> list[str]:
    """The ``done/total`` of each plain progress line of ``phase``."""
    prefix = f"{phase}: "
    return [
        line[len(prefix) :].split(" ")[0] for line in output.splitlines() if line.startswith(prefix)
    ]


def test_env_catalog_prints_progress_lines_when_not_a_terminal(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WSRL_PROGRESS_EVERY_S", "0.000001")  # a line at every update
    out = tmp_path / "cat"
    r = runner.invoke(cli, ["env", "catalog", "--products", "2500", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert _progress(r.output, "products") == ["0/2500", "1000/2500", "2000/2500", "2500/2500"]
    assert "products: 1000/2500 (40%), " in r.output and "/s, elapsed" in r.output
    assert r.output.splitlines()[-3] == f"items_shuffle: {out / 'items_shuffle.json'}"


def test_env_baseline_oracle_on_fixture(runner: CliRunner) -> None:
    """The fixture catalog is compiled on first use (a fresh data folder): its build and
    the episodes show as plain lines, CliRunner's output being no terminal."""
    r = runner.invoke(cli, ["env", "baseline", "--agent", "oracle", "--data", str(FIXTURE_CATALOG)])
    assert r.exit_code == 0, r.output
    assert "episodes=15" in r.output and "score=100.0 success=100.0%" in r.output
    assert _progress(r.output, "compiling the catalog")[-1] == "1/1"
    assert _progress(r.output, "oracle on test") == ["0/15", "15/15"]  # 10 s between lines


def test_env_baseline_rule_human_with_limit(runner: CliRunner) -> None:
    r = runner.invoke(
        cli,
        [
            "env",
            "baseline",
            "--agent",
            "rule",
            "--goals",
            "human",
            "--limit",
            "2",
            "--data",
            str(FIXTURE_CATALOG),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "agent=rule goals=human split=test episodes=2" in r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "smart"], "unknown agent"),
        (["--split", "dev"], "unknown split"),
        (["--goals", "mixed"], "unknown goal set"),
        (["--split", "train"], "has no goals"),
    ],
)
def test_env_baseline_bad_arguments(runner: CliRunner, args: list[str], message: str) -> None:
    r = runner.invoke(cli, ["env", "baseline", "--data", str(FIXTURE_CATALOG), *args])
    assert r.exit_code == 2 and message in r.output


def test_env_serve_without_the_original_files_is_a_clear_error(
    runner: CliRunner, tmp_path: Path
) -> None:
    """It was a traceback ending in the loader's FileNotFoundError."""
    r = runner.invoke(cli, ["env", "serve", "--data", str(tmp_path), "--port", "3999"])
    assert r.exit_code == 1 and not isinstance(r.exception, FileNotFoundError)
    assert f"No items_shuffle*.json in {tmp_path}: --data (or WSRL_ENV_DATA)" in r.output


@pytest.mark.parametrize(
    "command",
    [["api", "serve"], ["scripted-llm"], ["flower"], ["env", "serve"], ["env", "babyai"]],
)
@pytest.mark.parametrize("port", ["0", "99999"])
def test_a_port_out_of_range_is_a_usage_error(
    runner: CliRunner, command: list[str], port: str
) -> None:
    """``wsrl api serve --port 99999`` logged "Uvicorn running on http://127.0.0.1:99999"."""
    r = runner.invoke(cli, [*command, "--port", port])
    assert r.exit_code == 2 and "Invalid value for '--port'" in r.output
