"""Progress of long work in phases: a rich bar per phase on a terminal, plain lines
(count, rate, ETA) when the output is a file or a pipe.

Its users: ``wsrl eval``, ``wsrl policy eval`` and ``bootstrap``, ``wsrl export``, catalog
builds (``wsrl env catalog``, a catalog generated or compiled on load), ``wsrl model get``.
Kept apart from :mod:`app.progress` (which reads Postgres and Redis) so that ``wsrl env
serve`` shows a catalog build without importing either.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class WorkProgress:
    """Progress of long work in phases, as ``update(phase, done, total, detail)`` calls.

    On a terminal: one rich bar per phase (done/total, elapsed, ETA, detail). Otherwise
    (logs, pipes, CI): a plain line when a phase starts or ends, and every ``every_s``
    seconds in between (``WSRL_PROGRESS_EVERY_S``) while updates come, with the same
    numbers and the rate; a count that has not moved is said again at that pace, so that
    a stalled evaluation still shows it is waiting. Each line is flushed as it is printed,
    so a log file shows it at once. Use it as a context manager.
    """

    def __init__(self, console: Console, every_s: float = 10.0) -> None:
        self.console, self.every_s = console, every_s
        self.tty = console.is_terminal
        self._bar: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._phase: str | None = None
        self._phase_started = self._last_line = 0.0
        self._last_count: tuple[int, int] | None = None  # (done, total) of the last line

    def __enter__(self) -> WorkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, phase: str, done: int, total: int, detail: str = "") -> None:
        if self.tty:
            if self._bar is None:  # started on the first update: work that was cached shows nothing
                self._bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    TextColumn("ETA"),
                    TimeRemainingColumn(),
                    TextColumn("{task.fields[detail]}"),
                    console=self.console,
                )
                self._bar.start()
            if phase not in self._tasks:
                self._tasks[phase] = self._bar.add_task(phase, total=total, detail=detail)
            self._bar.update(self._tasks[phase], completed=done, total=total, detail=detail)
            return
        now = time.monotonic()
        new_phase = phase != self._phase
        if new_phase:
            self._phase, self._phase_started = phase, now
        due = now - self._last_line >= self.every_s
        if (done, total) == self._last_count and not new_phase and (done >= total or not due):
            return  # said already: a phase's end once, a count that has not moved once a period
        if new_phase or done >= total or due:
            self._last_line, self._last_count = now, (done, total)
            self.console.print(self._line(phase, done, total, detail, now), highlight=False)

    def _line(self, phase: str, done: int, total: int, detail: str, now: float) -> str:
        elapsed = now - self._phase_started
        parts = [f"{phase}: {done}/{total}"]
        if total:
            parts[0] += f" ({done / total:.0%})"
        if detail:
            parts.append(detail)
        if done > 0 and elapsed > 0:
            parts.append(_rate(done / elapsed))
        parts.append(f"elapsed {_duration(elapsed)}")
        if 0 < done < total:
            parts.append(f"ETA {_duration(elapsed / done * (total - done))}")
        return ", ".join(parts)


def _rate(per_s: float) -> str:
    if per_s >= 10:
        return f"{per_s:.0f}/s"
    return f"{per_s:.1f}/s" if per_s >= 1 else f"{per_s:.2f}/s"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
