"""Progress of long work (bootstrap, ``wsrl eval``): a bar on a terminal, plain lines in a
file or a pipe."""

from __future__ import annotations

import io
import re
import uuid

import pytest
from rich.console import Console

from app.commands import eval as eval_command
from app.work_progress import WorkProgress


def _console(tty: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=tty, width=120, color_system=None), out


def test_plain_lines_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    console, out = _console(tty=False)
    clock = iter([0.0, 1.0, 20.0, 21.0, 22.0, 23.0])
    monkeypatch.setattr("app.work_progress.time.monotonic", lambda: next(clock))
    with WorkProgress(console, every_s=10.0) as progress:
        progress.update("imitation", 0, 10, "epoch 1/2")  # phase starts: a line
        progress.update("imitation", 1, 10, "epoch 1/2")  # 1 s later: quiet
        progress.update("imitation", 5, 10, "epoch 1/2, loss 0.500")  # 20 s: a line, ETA
        progress.update("imitation", 10, 10, "epoch 2/2, loss 0.250")  # done: a line
        progress.update("imitation", 10, 10, "epoch 2/2, loss 0.250")  # said already: quiet
        progress.update("evaluating", 0, 4)  # next phase: a line
    lines = out.getvalue().splitlines()
    assert lines == [
        "imitation: 0/10 (0%), epoch 1/2, elapsed 0s",
        "imitation: 5/10 (50%), epoch 1/2, loss 0.500, 0.25/s, elapsed 20s, ETA 20s",
        "imitation: 10/10 (100%), epoch 2/2, loss 0.250, 0.48/s, elapsed 21s",
        "evaluating: 0/4 (0%), elapsed 0s",
    ]
    assert "\x1b" not in out.getvalue()


def test_a_count_that_does_not_move_is_said_again_at_the_steady_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``wsrl eval`` polls every 2 s; with no worker on the queue the count stays at 0 and
    a log must still show, every period, that it waits."""
    console, out = _console(tty=False)
    clock = iter([0.0, 2.0, 4.0, 10.0, 12.0, 20.0])
    monkeypatch.setattr("app.work_progress.time.monotonic", lambda: next(clock))
    with WorkProgress(console, every_s=10.0) as progress:
        for _ in range(6):
            progress.update("evaluating", 0, 4)
    assert out.getvalue().splitlines() == [
        "evaluating: 0/4 (0%), elapsed 0s",
        "evaluating: 0/4 (0%), elapsed 10s",
        "evaluating: 0/4 (0%), elapsed 20s",
    ]


def test_a_bar_with_eta_on_a_terminal() -> None:
    console, out = _console(tty=True)
    with WorkProgress(console) as progress:
        progress.update("copy pretraining", 3, 10, "")
        progress.update("imitation", 2, 8, "epoch 1/6, loss 1.234")
    text = out.getvalue()
    assert "\x1b" in text  # cursor control: a live display, not lines
    assert "copy pretraining" in text and "imitation" in text
    assert "2/8" in text and "ETA" in text and "epoch 1/6, loss 1.234" in text


@pytest.mark.parametrize("tty", [False, True])
def test_eval_shows_progress_either_way(tty: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    console, out = _console(tty)
    monkeypatch.setattr(eval_command, "console", console)

    def play(sessions, ids, timeout, on_progress, **_):
        for done in range(len(ids) + 1):
            on_progress(done)
        return [1.0] * len(ids)

    monkeypatch.setattr("app.core.evaluation.wait_for_rollouts", play)
    ids = [uuid.uuid4() for _ in range(3)]
    assert eval_command._wait_with_progress(None, ids, timeout=1.0) == [1.0] * 3
    text = out.getvalue()
    assert "evaluating" in text and "3/3" in text
    if not tty:
        first, last = text.splitlines()
        assert first == "evaluating: 0/3 (0%), elapsed 0s"
        assert re.fullmatch(r"evaluating: 3/3 \(100%\), \d+/s, elapsed 0s", last), last
