"""The verl trainer's start-up is timed by part (trainer/backends/verl/startup.py): the
wrapped calls are timed and logged, and put back as they were, a classmethod included."""

from __future__ import annotations

import logging
import time

import pytest

from trainer.backends.verl.startup import startup_lines, timed_calls


class Manager:
    def __init__(self, name: str) -> None:
        time.sleep(0.05)
        self.name = name

    @classmethod
    def create(cls, name: str) -> Manager:
        time.sleep(0.1)
        return cls(name)


class Special(Manager):
    pass


def test_the_parts_are_timed_logged_and_put_back(caplog) -> None:
    init, create = Manager.__dict__["__init__"], Manager.__dict__["create"]
    targets = [(Manager, "__init__", "the manager"), (Manager, "create", "the servers")]
    with caplog.at_level(logging.INFO), timed_calls(targets) as calls:
        made = Manager.create(name="a")
    assert made.name == "a"
    assert [c.label for c in calls] == ["the manager", "the servers"]  # as each ended
    manager, servers = calls
    assert servers.took_s >= 0.15 and 0.05 <= manager.took_s < servers.took_s
    assert servers.began_s <= manager.began_s
    assert f"start-up: the servers took {servers.took_s:.1f} s" in caplog.text
    assert Manager.__dict__["__init__"] is init and Manager.__dict__["create"] is create
    assert type(Special.create(name="b")) is Special  # still binds the class it is called on


def test_a_part_that_fails_is_timed_and_everything_put_back() -> None:
    def broken(self, name: str) -> None:
        raise RuntimeError("no GPU")

    class Failing:
        __init__ = broken

    with pytest.raises(RuntimeError), timed_calls([(Failing, "__init__", "x")]) as calls:
        Failing("a")
    assert [c.label for c in calls] == ["x"] and Failing.__dict__["__init__"] is broken


def test_the_summary_line_splits_the_whole_start_up() -> None:
    from trainer.backends.verl.startup import TimedCall

    calls = [TimedCall("vLLM", 50.0, 60.0), TimedCall("reward loop", 30.0, 15.0)]
    assert startup_lines(calls, 120.0) == (
        "verl's workers started in 120.0 s: worker processes and the actor's model 30.0 s, "
        "reward loop 15.0 s, vLLM 60.0 s, the rest 15.0 s"
    )
