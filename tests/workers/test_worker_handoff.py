"""A busy worker thread gets its next job as soon as it acknowledges the last one.

One worker process with one thread, so its attempts run one after another: the gap
between an attempt's finish and the next one's start is the hand-off (commit, the
acknowledgement, Redis BRPOP, the start transaction). Before the event loop was woken on
acknowledgement (``workers.celery_app.LoopWaker``), the loop slept until its next timer
and the gaps were 0.7 to 0.9 s.
"""

from __future__ import annotations

import itertools
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import select

from app.core.endpoint import ENDPOINT_KEY
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt
from app.db.session import session_scope

pytestmark = pytest.mark.slow

JOBS = 6
MAX_MEDIAN_GAP_S = 0.4


@pytest.fixture(scope="module")
def stack(
    make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutStack]:
    root: Path = tmp_path_factory.mktemp("handoff-stack")
    settings = isolated_settings(
        make_database, redis_url, root, logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}"
    )
    with RolloutStack.start(root, settings, workers=1, concurrency=1) as running:
        running.redis.delete(ENDPOINT_KEY)
        yield running


def test_next_job_starts_right_after_the_last_one_finishes(stack: RolloutStack) -> None:
    ids = stack.enqueue(goal_ids=stack.goal_ids[:JOBS])
    assert stack.wait(ids, timeout_s=120) == {"succeeded": JOBS}
    with session_scope(stack.sessions) as session:
        rows = session.execute(
            select(Attempt.started_at, Attempt.finished_at)
            .where(Attempt.rollout_id.in_(ids), Attempt.status == AttemptStatus.SUCCEEDED)
            .order_by(Attempt.started_at)
        ).all()
    gaps = [
        (later.started_at - earlier.finished_at).total_seconds()
        for earlier, later in itertools.pairwise(rows)
    ]
    assert len(gaps) == JOBS - 1
    assert statistics.median(gaps) < MAX_MEDIAN_GAP_S, f"hand-off gaps {gaps}"
