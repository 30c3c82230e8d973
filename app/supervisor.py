"""Child processes of ``wsrl dev`` and ``wsrl worker --processes N``: started in their own
process groups, stopped together.

Each child runs in a new session (its own process group), so the terminal's Ctrl-C
reaches only the parent, which then stops the children in reverse start order: SIGTERM
to the whole group, SIGKILL to the group after a grace period. On Linux each child also
asks the kernel for SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), so even a
``kill -9`` of the parent leaves no orphan servers behind.

``wsrl worker --processes N`` runs N Celery worker processes this way (:func:`run_processes`):
an episode spends its CPU in Python and one process's threads share one GIL, so on a
machine with several cores a single process of many threads tops out at one core.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when the parent exits (Linux only)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ChildFailed(RuntimeError):
    """A child exited while it should run, or never became ready."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        if not self.log_path.is_file():
            return "(no output)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Supervisor:
    """Starts children with their output in ``log_dir/<name>.log`` (``log_dir=None``: in
    this process's own output); :meth:`stop_all` ends them."""

    log_dir: Path | None
    env: Mapping[str, str] | None = None
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str], *, pipe_output: bool = False) -> Child:
        """Start ``args``; with ``pipe_output`` its stdout is a pipe the caller reads."""
        if self.log_dir is None:
            log_path = Path(os.devnull)
            log = None
        else:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            log = log_path.open("ab")
        try:
            proc = subprocess.Popen(
                list(args),
                env=dict(self.env) if self.env is not None else None,
                stdout=subprocess.PIPE if pipe_output else log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            if log is not None:
                log.close()
        child = Child(name, proc, log_path)
        self.children.append(child)
        logger.info("started %s (pid %d), output %s", name, proc.pid, log_path)
        return child

    def wait_ready(
        self, child: Child, ready: Callable[[Child], bool], timeout_s: float = 120.0
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready(child):
            if not child.alive():
                raise ChildFailed(
                    f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}"
                )
            if time.monotonic() > deadline:
                raise ChildFailed(f"{child.name} not ready after {timeout_s:.0f}s:\n{child.tail()}")
            time.sleep(0.2)

    def check(self) -> None:
        """Raise :class:`ChildFailed` naming the first child that exited."""
        for child in self.children:
            if not child.alive():
                raise ChildFailed(
                    f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}"
                )

    def signal_all(self, signum: int) -> None:
        """Send ``signum`` to every running child (not its group)."""
        for child in self.children:
            if child.alive():
                child.proc.send_signal(signum)

    def stop_all(self, grace_s: float = 15.0) -> None:
        """SIGTERM every child's group at once, then SIGKILL what is left after ``grace_s``.

        All at once, because the children depend on each other while they stop (a worker
        finishing an episode needs the trainer's policy server): an ordered shutdown would
        wait on calls that cannot succeed any more. A killed worker's tasks are redelivered
        (late acknowledgement) and the reconciler repairs their rows.
        """
        for child in reversed(self.children):
            _signal_group(child, signal.SIGTERM)
        self.wait_all(grace_s)

    def wait_all(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for every child to exit, then SIGKILL what is left."""
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            try:
                child.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop in %.0fs; killing it", child.name, grace_s)
            _signal_group(child, signal.SIGKILL)  # stragglers in its group, if any
            child.proc.wait()
        self.children.clear()


def _signal_group(child: Child, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)  # the child leads its own group (new session)


def node_names(name: str, processes: int) -> list[str]:
    """Celery node names of ``processes`` workers; ``name`` may hold Celery's ``@%h``: the
    index goes before it (``a-0@%h``)."""
    base, at, host = name.partition("@")
    return [f"{base}-{i}{at}{host}" for i in range(processes)]


def run_processes(
    commands: Sequence[Sequence[str]], *, poll_s: float = 0.5, grace_s: float = 60.0
) -> int:
    """Run the commands until one exits or SIGINT/SIGTERM arrives; the worst exit status.

    A signal is forwarded once to every child (Celery's warm shutdown: running episodes
    finish; a terminal's second Ctrl-C would make it a cold one, and the children's own
    process groups keep the terminal's from reaching them). When one child exits by
    itself, the others are stopped.
    """
    supervisor = Supervisor(log_dir=None)
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        supervisor.signal_all(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for index, command in enumerate(commands):
            supervisor.start(f"process-{index}", command)
        children = list(supervisor.children)
        while all(child.alive() for child in children):
            time.sleep(poll_s)
        if not stopping:
            exited = next(c for c in children if not c.alive())
            logger.warning(
                "%s (pid %d) exited with %d; stopping the others",
                exited.name,
                exited.pid,
                exited.proc.returncode,
            )
            supervisor.signal_all(signal.SIGTERM)
        supervisor.wait_all(grace_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    codes = [child.proc.returncode for child in children]
    return next((code for code in codes if code not in (0, -signal.SIGTERM, -signal.SIGINT)), 0)
