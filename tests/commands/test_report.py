"""``wsrl report``: reward and success by policy version, read from Postgres, drawn as PNG."""

from __future__ import annotations

from pathlib import Path

from helpers.factories import make_goal, make_rollout

from app.commands.report import SMOOTH_VERSIONS, plot, smoothed
from app.db.lifecycle import RolloutMode, RolloutStatus
from app.db.performance import evaluation_rounds, performance_rows


def test_report_rows_by_version_and_mode_and_png(db_session, tmp_path: Path) -> None:
    make_goal(db_session, 93001)
    done = RolloutStatus.SUCCEEDED
    for version, rewards in ((1, [0.0, 0.5]), (2, [1.0, 0.5])):
        for reward in rewards:
            make_rollout(
                db_session, 93001, status=done, reward=reward, success=reward == 1.0,
                policy_version_max=version,
            )  # fmt: skip
    make_rollout(db_session, 93001, status=done, mode=RolloutMode.EVAL, reward=1.0,
                 success=True, policy_version_max=2)  # fmt: skip
    rows = [r for r in performance_rows(db_session) if r["policy_version"] in (1, 2)]
    train = {r["policy_version"]: r for r in rows if r["mode"] == "train"}
    assert float(train[1]["mean_reward"]) == 0.25 and float(train[1]["success_rate"]) == 0.0
    assert float(train[2]["mean_reward"]) == 0.75 and float(train[2]["success_rate"]) == 0.5
    assert [r["episodes"] for r in rows if r["mode"] == "eval"] == [1]
    out = tmp_path / "r" / "report.png"
    assert plot(rows, out) == out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # matplotlib adds ".png" to a name without a suffix; `wsrl report` said it wrote the name
    assert plot(rows, tmp_path / "r" / "named") == tmp_path / "r" / "named.png"
    assert (tmp_path / "r" / "named.png").is_file()


def test_evaluation_rounds_are_placed_at_the_version_they_started_on(
    make_database, test_settings
) -> None:
    from app.db import migrate
    from app.db.session import make_engine, make_sessionmaker, session_scope

    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(test_settings.model_copy(update={"database_url": url}))
    sessions = make_sessionmaker(engine)
    done = RolloutStatus.SUCCEEDED
    try:
        with session_scope(sessions) as session:
            make_goal(session, 93002)
        # Two rounds, each queued in one transaction; the trainer moved on during each.
        for versions, rewards in (([(0, 0), (0, 1), (1, 1)], [1.0, 0.0, 0.5]), ([(3, 4)], [1.0])):
            with session_scope(sessions) as session:
                for (low, high), reward in zip(versions, rewards, strict=True):
                    make_rollout(
                        session, 93002, status=done, mode=RolloutMode.EVAL, reward=reward,
                        success=reward == 1.0, policy_version_min=low, policy_version_max=high,
                    )  # fmt: skip
                make_rollout(session, 93002, mode=RolloutMode.EVAL)  # still queued: left out
        with session_scope(sessions) as session:
            rounds = evaluation_rounds(session)
    finally:
        engine.dispose()
    assert [(r["policy_version"], r["last_version"], r["episodes"]) for r in rounds] == [
        (0, 1, 3),
        (3, 4, 1),
    ]
    assert float(rounds[0]["mean_reward"]) == 0.5
    assert abs(float(rounds[0]["success_rate"]) - 1 / 3) < 1e-9


def test_train_points_are_smoothed_by_episodes_over_the_last_versions() -> None:
    assert smoothed([0.0, 1.0], [1, 3]) == [0.0, 0.75]
    values = [float(v) for v in range(SMOOTH_VERSIONS + 5)]
    last = smoothed(values, [1] * len(values))[-1]
    assert last == sum(values[-SMOOTH_VERSIONS:]) / SMOOTH_VERSIONS


def test_a_long_run_is_plotted_with_its_smoothed_train_line(tmp_path: Path) -> None:
    rows = [
        {"policy_version": v, "mode": "train", "episodes": 10, "mean_reward": 0.1 * (v % 3),
         "success_rate": 0.0}
        for v in range(SMOOTH_VERSIONS + 3)
    ]  # fmt: skip
    out = tmp_path / "long.png"
    plot(rows, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
