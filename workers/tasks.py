"""Celery tasks: thin bindings of the work in :mod:`workers.rollout` (arguments are ids)."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject
from celery.signals import worker_process_shutdown, worker_shutdown

from app.core.celery import ROLLOUT_TASK
from app.db.session import DATABASE_DOWN
from workers.celery_app import WakingRequest
from workers.rollout import execute_rollout
from workers.runtime import close_runtime, get_runtime


@shared_task(name=ROLLOUT_TASK, bind=True, Request=WakingRequest)
def run_rollout(self: Task, rollout_id: str) -> str:
    """Run one delivery of a rollout; idempotent (see :mod:`workers.rollout`).

    Postgres unreachable past the outage budget: what the delivery did is not recorded,
    so its message goes back to the queue instead of being acknowledged (Celery
    acknowledges a failed late-acknowledged task).
    """
    try:
        return execute_rollout(get_runtime(), self.app, uuid.UUID(rollout_id)).value
    except DATABASE_DOWN as exc:
        raise Reject(f"not recorded, database unreachable: {exc}", requeue=True) from exc


@worker_shutdown.connect
@worker_process_shutdown.connect
def _close_clients(**_: Any) -> None:
    """Return pooled database connections and sockets when a worker stops."""
    close_runtime()
