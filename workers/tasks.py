"""Celery tasks: thin bindings of the work in :mod:`workers.rollout` (arguments are ids)."""

from __future__ import annotations

import uuid

from celery import Task, shared_task

from workers.celery_app import ROLLOUT_TASK
from workers.rollout import execute_rollout
from workers.runtime import get_runtime


@shared_task(name=ROLLOUT_TASK, bind=True)
def run_rollout(self: Task, rollout_id: str) -> str:
    """Run one delivery of a rollout; idempotent (see :mod:`workers.rollout`)."""
    return execute_rollout(get_runtime(), self.app, uuid.UUID(rollout_id)).value
