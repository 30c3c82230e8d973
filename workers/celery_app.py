"""The worker's Celery app: the shared one (:mod:`app.core.celery`) plus the rollout task
module, the event-loop waker and the scan that gives a dead worker's messages back.

``celery -A workers.celery_app worker`` finds :data:`app` through the module's
``__getattr__``, which builds it on first access from :func:`app.config.get_settings`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from celery import Celery, bootsteps
from celery.worker.request import Request

from app.config import Settings, get_settings
from app.core.celery import create_celery, restore_interval_s, time_limits

logger = logging.getLogger(__name__)


class _LoopWaker:
    """A pipe the worker's event loop reads: a byte written to it ends the loop's sleep."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        hub.add_reader(self._read, self._drain)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # a byte already pending is enough
            os.write(self._write, b"\0")

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        self._hub.remove_reader(self._read)
        os.close(self._read)
        os.close(self._write)


_waker: _LoopWaker | None = None


def wake_event_loop() -> None:
    """Make the worker's event loop run a turn now (a no-op outside a worker)."""
    waker = _waker
    if waker is not None:
        waker.wake()


class LoopWaker(bootsteps.StartStopStep):
    """Lets a pool thread wake the event loop once it has acknowledged its message.

    With ``task_acks_late`` and ``worker_prefetch_multiplier=1`` a worker whose threads
    are all busy holds no BRPOP on Redis; kombu issues the next one at the top of an
    event-loop turn. A thread of the threads pool acknowledging its task does not wake
    the loop, which sleeps until its next timer, up to a second: measured, threads stood
    idle for 0.7-0.9 s between 1.2-s episodes. :class:`WakingRequest` wakes it instead.
    """

    requires = ("celery.worker.components:Hub",)

    def start(self, worker: Any) -> None:
        global _waker
        if getattr(worker, "hub", None) is not None:
            _waker = _LoopWaker(worker.hub)

    def stop(self, worker: Any) -> None:
        global _waker
        waker, _waker = _waker, None
        if waker is not None:
            waker.close()


class WakingRequest(Request):
    """A task request that wakes the event loop once its message is settled, so the
    freed thread gets the next message at once (see :class:`LoopWaker`)."""

    def acknowledge(self) -> None:
        super().acknowledge()
        wake_event_loop()

    def reject(self, requeue: bool = False) -> None:
        super().reject(requeue=requeue)
        wake_event_loop()


def restore_expired(connection: Any) -> None:
    """Put the messages whose visibility timeout has passed unacknowledged (their worker
    died) back on their queues: one scan of kombu's Redis ``unacked`` index, under its
    mutex, so the workers' scans do not overlap."""
    channel = connection.default_channel
    channel.qos.restore_visible(num=channel.unacked_restore_limit, interval=1)


class RestoreUnacked(bootsteps.StartStopStep):
    """Scans for a dead worker's messages every :func:`~app.core.celery.restore_interval_s`.

    kombu's Redis transport scans only every tenth turn of a 10-s timer, whatever the
    visibility timeout: a ``kill -9``-ed worker's messages came back up to 100 s after the
    timeout (measured: 96 s after the kill with a 16-s timeout). kombu 5.7 makes that
    cadence configurable, but its transport crashes the worker when Redis goes away, so
    this step runs the same scan on the consumer's timer instead. An outage makes a scan
    fail; the next one, after the reconnection, does the work.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, consumer: Any) -> None:
        interval = consumer.app.conf.wsrl_restore_interval_s
        self.tref = consumer.timer.call_repeatedly(interval, self._scan, (consumer,))

    def stop(self, consumer: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    @staticmethod
    def _scan(consumer: Any) -> None:
        try:
            restore_expired(consumer.connection)
        except Exception as exc:
            logger.debug("restoring expired messages failed: %s", exc)


def worker_celery(settings: Settings) -> Celery:
    """The shared app with the rollout task registered, the waker and the restore scan."""
    celery = create_celery(settings)
    celery.conf.include = ["workers.tasks"]
    celery.conf.wsrl_restore_interval_s = restore_interval_s(time_limits(settings).visibility_s)
    celery.steps["worker"].add(LoopWaker)
    celery.steps["consumer"].add(RestoreUnacked)
    return celery


_app: Celery | None = None


def get_app() -> Celery:
    """The process-wide app, built once from :func:`get_settings`."""
    global _app
    if _app is None:
        _app = worker_celery(get_settings())
    return _app


def __getattr__(name: str) -> Celery:
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
