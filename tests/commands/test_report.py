"""``wsrl report``: reward and success by policy version, read from Postgres, drawn as PNG."""

from __future__ import annotations

from pathlib import Path

from helpers.factories import make_goal, make_rollout

from app.commands.report import performance_rows, plot
from app.db.lifecycle import RolloutMode, RolloutStatus


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
    plot(rows, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
