"""``wsrl worker --processes N``: N Celery worker processes under one command.

An episode spends its CPU in Python (HTTP clients, JSON, SQL building) and one process's
threads share one GIL, so on a machine with several cores a single process of many
threads tops out at one core. This runs N ordinary ``wsrl worker`` processes (each with
its own threads, node name ``<name>-<i>@host``), forwards SIGINT/SIGTERM to all of them
(Celery's warm shutdown: running episodes finish) and stops the others when one exits,
returning the first non-zero exit status.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Sequence
from types import FrameType

logger = logging.getLogger(__name__)

POLL_S = 0.5
STOP_GRACE_S = 60.0


def node_names(name: str, processes: int) -> list[str]:
    """``name`` may hold Celery's ``@%h``: the index goes before it (``a-0@%h``)."""
    base, at, host = name.partition("@")
    return [f"{base}-{i}{at}{host}" for i in range(processes)]


def run_processes(commands: Sequence[Sequence[str]]) -> int:
    """Run the commands until one exits or a signal arrives; the worst exit status."""
    # Own process groups: a terminal's Ctrl-C reaches only this process, which forwards it
    # once (a second SIGINT would make Celery's warm shutdown a cold one).
    children = [subprocess.Popen(list(command), process_group=0) for command in commands]
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while all(child.poll() is None for child in children):
            time.sleep(POLL_S)
        if not stopping:
            exited = [c for c in children if c.returncode is not None]
            logger.warning(
                "worker process %d exited with %d; stopping the others",
                exited[0].pid,
                exited[0].returncode,
            )
            forward(signal.SIGTERM, None)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    codes = [child.returncode for child in children]
    return next((code for code in codes if code not in (0, -signal.SIGTERM, -signal.SIGINT)), 0)
