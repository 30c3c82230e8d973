"""``wsrl dev`` as a user runs it: the whole stack, a train step, Ctrl-C, then a resume."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.processes import FIXTURE_CATALOG, REPO, WSRL, child_env, free_port
from sqlalchemy import func, select

from app.config import Settings
from app.db import migrate
from app.db.models import TrainStep
from app.db.session import make_engine
from trainer.bootstrap.tiny_policy import TinySize, build_model, train_tokenizer

pytestmark = pytest.mark.slow

TEXTS = [
    "Instruction: i need a red cotton shirt for men, and price lower than 30.00 dollars",
    "search[red cotton shirt] click[b00abc123] click[buy now] click[< prev] click[next >]",
    "You are a shopping agent on WebShop. Reply with exactly one action.",
] * 30


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dev-policy")
    tokenizer = train_tokenizer(TEXTS, 400)
    build_model(tokenizer, TinySize(400, 32, 2, 2, 64, max_positions=16384), 0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _dev(settings: Settings, policy: Path, log: Path, *extra: str) -> subprocess.Popen:
    env = child_env(
        settings,
        env_url=f"http://127.0.0.1:{free_port()}",
        api_url=f"http://127.0.0.1:{free_port()}",
        flower_port=free_port(),
        env_data=FIXTURE_CATALOG,
        max_steps=2,
        llm_max_tokens=12,
    )
    args = [*WSRL, "dev", "--model", str(policy), "--threads", "4", "--group-size", "2"]
    args += ["--batch-groups", "1", "--split", "test", *extra]
    with log.open("wb") as out:
        return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout_s: float) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if match := re.search(pattern, text):
            return match
        assert proc.poll() is None, f"wsrl dev exited with {proc.returncode}:\n{text}"
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    raise AssertionError(f"{pattern!r} not seen in {timeout_s}s:\n{log.read_text()}")


def _pids(text: str) -> list[int]:
    line = re.search(r"processes \(pid\): (.*)", text)
    assert line, text
    return [int(p) for p in re.findall(r"\b(\d+)\b", line.group(1))]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_dev_trains_stops_everything_on_ctrl_c_and_resumes(
    make_database: Callable[[], str], test_settings: Settings, tmp_path: Path, policy: Path
) -> None:
    url = make_database()
    migrate.upgrade(url)
    settings = test_settings.model_copy(update={"database_url": url, "data_dir": tmp_path / "d"})
    first_log = tmp_path / "dev1.log"
    first = _dev(settings, policy, first_log)
    try:
        _wait_for(first_log, r"step +1 +v\d+ +reward", first, timeout_s=400)
        first.send_signal(signal.SIGINT)
        assert first.wait(60) == 0, first_log.read_text()
    finally:
        if first.poll() is None:
            first.kill()
    text = first_log.read_text()
    assert "all dev processes stopped" in text
    engine = make_engine(settings)
    with engine.connect() as connection:
        done = connection.execute(select(func.max(TrainStep.step))).scalar_one()
    engine.dispose()
    assert done >= 1
    pids = _pids(text)
    assert len(pids) == 6  # env, api, worker, flower, reconciler, trainer
    assert all(_gone(pid) for pid in pids), text

    second_log = tmp_path / "dev2.log"
    second = _dev(settings, policy, second_log, "--steps", "1")
    try:
        assert second.wait(400) == 0, second_log.read_text()
    finally:
        if second.poll() is None:
            second.kill()
    text = second_log.read_text()
    assert re.search(rf"step +{done + 1} +v\d+ +reward", text), text  # resumed
    assert all(_gone(pid) for pid in _pids(text)), text


def test_a_second_ctrl_c_while_stopping_is_ignored() -> None:
    """Ctrl-C pressed twice: the first stops the run, the second arrives while it stops
    and must not raise out of the shutdown (it did: a traceback and exit status 1)."""
    from app.commands import dev

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, dev._interrupt_once((signal.SIGINT,)))
    try:
        with pytest.raises(dev._Stop):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode boundary
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # raises nothing now
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_bootstrapped_policy_gets_its_history_and_constrained_replies(tmp_path: Path) -> None:
    from app.commands.dev import _child_env

    (tmp_path / "bootstrap.json").write_text('{"history_steps": 1, "result_refs": "numbers"}')
    env = _child_env(Settings(_env_file=None), tmp_path)
    assert env is not None
    assert env["WSRL_AGENT_HISTORY_STEPS"] == "1"
    assert env["WSRL_AGENT_RESULT_REFS"] == "numbers"
    assert env["WSRL_AGENT_CONSTRAIN_ACTIONS"] == "true"
    chosen = _child_env(Settings(_env_file=None, agent_constrain_actions=False), tmp_path)
    assert chosen is not None  # the user's choice is left as the environment has it
    assert chosen.get("WSRL_AGENT_CONSTRAIN_ACTIONS") == os.environ.get(
        "WSRL_AGENT_CONSTRAIN_ACTIONS"
    )
    assert _child_env(Settings(_env_file=None), tmp_path / "not-bootstrapped") is None


def test_a_converted_model_gets_constrained_replies(smollm2: Path) -> None:
    from app.commands.dev import _child_env

    env = _child_env(Settings(_env_file=None), smollm2)
    assert env is not None and env["WSRL_AGENT_CONSTRAIN_ACTIONS"] == "true"
    assert "WSRL_AGENT_HISTORY_STEPS" not in env or env["WSRL_AGENT_HISTORY_STEPS"] == (
        os.environ.get("WSRL_AGENT_HISTORY_STEPS")
    )
