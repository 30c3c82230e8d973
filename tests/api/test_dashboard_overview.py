"""The overview's training part on train steps as the trainer records them (the browser
test's run has no trainer): the curve, the step time split, staleness, and the reload."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from helpers.api_rows import AUTH
from helpers.factories import make_goal, make_rollout
from sqlalchemy import create_engine

from app.api.dashboard.queries import CHART_POINTS
from app.api.main import create_app
from app.config import Settings
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.models import TrainStep
from app.db.session import session_scope


def _steps(url: str, count: int, *, newest_at: datetime) -> None:
    engine = create_engine(url)
    with session_scope(engine) as session:
        for step in range(1, count + 1):
            session.add(
                TrainStep(
                    step=step,
                    policy_version=step,
                    rollouts_used=16,
                    created_at=newest_at - timedelta(seconds=10 * (count - step)),
                    metrics={
                        "reward/mean": step / count,
                        "reward/success": 0.5,
                        "policy/version": float(step),
                        "staleness/behind_0": 3.0,
                        "staleness/behind_1": 1.0,
                        "time/wait_s": 1.0,
                        "time/update_s": 3.0,
                        "time/sync_s": 0.5,
                    },
                )
            )
    engine.dispose()


def _overview(api_settings: Settings, url: str) -> str:
    settings = api_settings.model_copy(update={"database_url": url})
    with TestClient(create_app(settings)) as client:
        answer = client.get("/dashboard", headers=AUTH)
    assert answer.status_code == 200, answer.text
    return answer.text


def test_train_steps_make_the_curve_times_and_staleness(
    api_settings: Settings, empty_database_url: str
) -> None:
    _steps(empty_database_url, 1000, newest_at=datetime.now(UTC) - timedelta(hours=1))
    page = _overview(api_settings, empty_database_url)
    polylines = re.findall(r'<polyline[^>]*points="([^"]*)"', page)
    assert len(polylines) == 2  # reward and success
    points = polylines[0].split()
    assert len(points) <= CHART_POINTS and len(points) == 1000 // 5  # 5 steps a bucket
    heights = [float(p.split(",")[1]) for p in points]
    assert heights == sorted(heights, reverse=True)  # reward rises: y goes up the page
    assert "wait 1.00 s · update 3.00 s · sync 0.50 s" in page
    assert "0 versions behind: 60 groups" in page and "1 version behind: 20 groups" in page
    assert 'http-equiv="refresh"' not in page  # nothing queued, last step an hour ago


def test_a_live_run_reloads_the_overview(api_settings: Settings, empty_database_url: str) -> None:
    _steps(empty_database_url, 3, newest_at=datetime.now(UTC))
    page = _overview(api_settings, empty_database_url)
    assert '<meta http-equiv="refresh" content="10">' in page


def _eval_rounds(url: str, rewards_by_version: dict[int, list[float]]) -> None:
    """One eval round per version (its rollouts queued together, a minute apart)."""
    engine = create_engine(url)
    start = datetime.now(UTC) - timedelta(hours=1)
    with session_scope(engine) as session:
        make_goal(session, 1, split="test")
        for number, (version, rewards) in enumerate(sorted(rewards_by_version.items())):
            for reward in rewards:
                make_rollout(
                    session, 1, mode=RolloutMode.EVAL, status=RolloutStatus.SUCCEEDED,
                    created_at=start + timedelta(minutes=number), reward=reward,
                    success=reward == 1.0, policy_version_min=version,
                    policy_version_max=version,
                )  # fmt: skip
    engine.dispose()


def test_the_overview_opens_on_held_out_curves_by_version_then_train(
    api_settings: Settings, empty_database_url: str
) -> None:
    _eval_rounds(empty_database_url, {1: [0.0, 0.5, 1.0, 0.5], 3: [1.0, 1.0, 0.5, 1.0]})
    _steps(empty_database_url, 10, newest_at=datetime.now(UTC) - timedelta(hours=1))
    page = _overview(api_settings, empty_database_url)
    curves, versions = page.index('id="curves"'), page.index('id="versions"')
    held_out, train = page.index('id="held-out"'), page.index('id="train-curve"')
    assert curves < held_out < train < versions  # the curves first, the versions table below
    chart = page[held_out:train]
    assert re.findall(r"<text[^>]*>(v\d)</text>", chart) == ["v1", "v3"]
    success = re.findall(r'<g class="success"><title>([^<]*)</title>', chart)
    reward = re.findall(r'<g class="reward"><title>([^<]*)</title>', chart)
    assert success == [
        "v1: success 0.250 [0.046, 0.699] on 4 episodes",  # Wilson
        "v3: success 0.750 [0.301, 0.954] on 4 episodes",
    ]
    assert reward == [
        "v1: reward 0.500 [0.100, 0.900] on 4 episodes",  # 0.5 +/- 1.96 x 0.408 / 2
        "v3: reward 0.875 [0.630, 1.000] on 4 episodes",  # cut at 1
    ]
    assert len(re.findall(r"<polyline", chart)) == 2  # success and reward joined by version
    assert len(re.findall(r"<polyline", page[train:versions])) == 2  # train reward and success
