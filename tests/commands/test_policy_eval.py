"""``wsrl policy eval``: held-out figures of any checkpoint, constrained or not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer

runner = CliRunner()
TEXTS = ["search[red cotton shirt] click[b00abc123] click[buy now] click[< prev]"] * 30


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from app.config import get_settings

    get_settings.cache_clear()
    monkeypatch.setenv("WSRL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WSRL_MAX_STEPS", "2")
    yield monkeypatch
    get_settings.cache_clear()


@pytest.fixture
def random_policy(tmp_path: Path) -> Path:
    """An untrained tiny policy saved with its tokenizer."""
    tokenizer = train_tokenizer(TEXTS, 400)
    build_model(tokenizer, TinySize(400, 32, 2, 2, 64, max_positions=4096), 0).save_pretrained(
        tmp_path / "policy"
    )
    tokenizer.save_pretrained(tmp_path / "policy")
    return tmp_path / "policy"


def test_eval_says_how_it_played_and_what_it_measured(settings_env, random_policy: Path) -> None:
    args = ["policy", "eval", "--model", str(random_policy), "--goals", "3"]
    constrained = runner.invoke(cli, [*args, "--constrain-actions"])
    assert constrained.exit_code == 0, constrained.output
    flat = " ".join(constrained.output.split())
    said = "3 held-out goals (3 test, 0 eval), 2-step limit, 4 steps of history, results by id,"
    assert said in flat and "constrained to valid actions: True" in flat
    assert "greedy: success 0.0% (95 % CI +/- 0.0%), mean reward" in flat  # a random policy
    free = runner.invoke(cli, [*args, "--no-constrain-actions"])
    assert free.exit_code == 0 and "valid actions: False" in " ".join(free.output.split())


def test_eval_starts_where_asked(settings_env, random_policy: Path) -> None:
    """``--start item`` plays each goal from its target's page, after the scripted
    opening. Within the 2-step limit only there can an episode buy (from the search page a
    purchase takes a search, a result click and ``buy now``), so a reward above 0 shows the
    opening was played."""
    args = ["policy", "eval", "--model", str(random_policy), "--goals", "3"]

    def mean_reward(output: str) -> float:
        flat = " ".join(output.split())
        return float(flat.split("mean reward ")[1].split()[0])

    item = runner.invoke(cli, [*args, "--constrain-actions", "--start", "item"])
    assert item.exit_code == 0, item.output
    assert "starting on the item page" in " ".join(item.output.split())
    assert mean_reward(item.output) > 0
    task = runner.invoke(cli, [*args, "--constrain-actions"])
    assert task.exit_code == 0, task.output
    assert "starting on" not in task.output and mean_reward(task.output) == 0
    unknown = runner.invoke(cli, [*args, "--start", "cart"])
    assert unknown.exit_code == 2
    assert "'cart' is not one of 'search', 'results', 'item'" in " ".join(
        w for w in unknown.output.split() if w != "│"
    )


def test_more_goals_than_the_test_split_go_on_into_the_eval_split(settings_env) -> None:
    from app.commands.policy import held_out_goal_ids
    from app.config import get_settings
    from app.webshop.env import WebShopEnv

    settings = get_settings()
    env = WebShopEnv.load(
        settings.env_data, settings.env_goals, cache_dir=settings.data_dir / "catalog"
    )
    tests, evals = env.goal_ids("test"), env.goal_ids("eval")
    ids = held_out_goal_ids(env, len(tests) + 2)
    assert ids == [*tests, *evals[:2]]
    assert {env.goals[g].split for g in ids} == {"test", "eval"}


def test_more_goals_than_the_catalog_holds_out_is_a_clear_error(
    settings_env, random_policy: Path
) -> None:
    args = ["policy", "eval", "--model", str(random_policy), "--goals", "1501"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    words = [w for w in result.output.split() if w != "│"]  # the error's box
    assert "1501 goals asked; this catalog holds 1500 held-out goals" in " ".join(words)


def test_eval_plays_a_train_step_as_its_trainer_published_it(
    settings_env, random_policy: Path
) -> None:
    """A local trainer's checkpoint records the protocol the workers played it with; eval
    plays the same (here: one step of history, results by number), not the settings."""
    protocol = {"mode": "text", "history_steps": 1, "constrain_actions": True, "max_steps": 2}
    state = {"step": 3, "version": 3, "protocol": {**protocol, "result_refs": "numbers"}}
    (random_policy / "trainer_state.json").write_text(json.dumps(state))
    result = runner.invoke(cli, ["policy", "eval", "--model", str(random_policy), "--goals", "3"])
    assert result.exit_code == 0, result.output
    assert "2-step limit, 1 step of history, results by number," in " ".join(result.output.split())


def test_eval_plays_a_lora_checkpoint_over_its_base(
    settings_env, random_policy: Path, tmp_path: Path
) -> None:
    """A --lora-rank run's checkpoint is an adapter folder (no config.json): eval plays it
    over the base it names; with the base gone, the error says where it was."""
    from trainer.backends.local.learner import Learner
    from trainer.config import Lora, TrainerConfig

    adapter = Learner(random_policy, TrainerConfig(), lora=Lora(rank=2)).save(tmp_path / "step-1")
    args = ["policy", "eval", "--model", str(adapter), "--goals", "2"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "2 held-out goals" in " ".join(result.output.split())
    moved = random_policy.rename(tmp_path / "moved")
    result = runner.invoke(cli, args, env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "is a LoRA adapter over" in " ".join(result.output.split())
    assert moved.exists()


@pytest.mark.parametrize(
    ("option", "said"),
    [("--result-choice", "'best': random or first"), ("--result-refs", "'best': numbers or ids")],
)
def test_bootstrap_refuses_an_unknown_result_option_before_any_work(
    settings_env, tmp_path: Path, option: str, said: str
) -> None:
    out = tmp_path / "never"
    result = runner.invoke(cli, ["policy", "bootstrap", "--out", str(out), option, "best"])
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())
    assert not out.exists()


def test_bootstrap_with_its_defaults_copies_the_shipped_policy(
    settings_env, tmp_path: Path
) -> None:
    """What `make dev` runs first in a fresh data folder, through the CLI as typer calls it."""
    out = tmp_path / "policy"
    result = runner.invoke(cli, ["policy", "bootstrap", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "copied from the repository's build" in " ".join(result.output.split())
    manifest = json.loads((out / "bootstrap.json").read_text())
    assert manifest["result_refs"] == "numbers"
    assert manifest["config"]["result_choice"] == "first"


def test_a_model_folder_without_a_checkpoint_is_a_clear_error(settings_env, tmp_path) -> None:
    """It loaded the catalog, then transformers took the path for a Hub repository id and
    raised its OSError."""
    result = runner.invoke(cli, ["policy", "eval", "--model", str(tmp_path / "none")])
    assert result.exit_code == 2
    words = [w for w in result.output.split() if w != "│"]
    assert f"{tmp_path / 'none'} is not a checkpoint folder (no config.json)" in " ".join(words)


@pytest.mark.slow
def test_eval_writing_to_a_file_prints_progress_lines_while_it_runs(
    random_policy: Path, tmp_path: Path
) -> None:
    """Stdout to a file (no terminal, no bar): plain lines with count, rate and ETA appear
    in the file while the evaluation still runs, not only with the result at the end."""
    out = tmp_path / "eval.log"
    env = {**os.environ, "WSRL_DATA_DIR": str(tmp_path / "data"), "WSRL_MAX_STEPS": "2"}
    env["WSRL_PROGRESS_EVERY_S"] = "0.05"
    cmd = [sys.executable, "-m", "app.cli", "policy", "eval", "--model", str(random_policy),
           "--goals", "30", "--no-constrain-actions"]  # fmt: skip
    midway = re.compile(r"greedy, episode steps: (\d+)/(\d+) \(\d+%\), step \d/2, .*/s, .*ETA")
    seen_running: list[str] = []
    with out.open("wb") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and not seen_running:
            seen_running = [line for line in out.read_text().splitlines() if midway.match(line)]
            time.sleep(0.02)
        assert proc.wait(timeout=300) == 0, out.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.read_text().splitlines()
    assert seen_running, f"no progress line while it ran:\n{chr(10).join(lines[-20:])}"
    done, at_most = map(int, midway.match(seen_running[0]).groups())
    assert 0 < done < at_most <= 60  # 30 goals, at most 2 steps each (batches of 25)
    result = next(i for i, line in enumerate(lines) if line.startswith("greedy: success"))
    progress = [i for i, line in enumerate(lines) if line.startswith("greedy, episode steps:")]
    assert progress and max(progress) < result
    assert (
        lines[min(progress)]
        == "greedy, episode steps: 0/60 (0%), step 1/2, 0/30 episodes over, elapsed 0s"
    )
    assert lines[max(progress)].startswith("greedy, episode steps: 60/60 (100%), step 2/2")
