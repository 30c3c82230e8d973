"""Exports read back (pyarrow / json) and compared with the database they came from."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import REPO, WSRL, child_env
from helpers.trajectory_data import Dataset, insert_dataset
from sqlalchemy import Engine, delete, select

from app.config import Settings
from app.db import migrate
from app.db.lifecycle import AttemptStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout, Step
from app.db.session import make_engine, session_scope
from app.embedded.ports import free_port
from app.environments.webshop.agent import SYSTEM_PROMPT_TEXT
from app.exports.forms import export_trajectories
from app.exports.goals import export_goals
from app.exports.trajectories import TrajectoryFilter
from app.exports.writers import EmptyExportError, ExportFormat

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def export_db(make_database: Callable[[], str]) -> Iterator[tuple[str, Engine, Dataset]]:
    """A database of its own: an export without filters sees only this dataset."""
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(Settings(_env_file=None, database_url=url))
    data = insert_dataset(engine)
    yield url, engine, data
    engine.dispose()


FILE_FORMATS = [ExportFormat.JSONL, ExportFormat.PARQUET]


def _read(path: Path, fmt: ExportFormat) -> list[dict[str, Any]]:
    if fmt is ExportFormat.JSONL:
        return [json.loads(line) for line in path.read_text().splitlines()]
    files = sorted((path / "data").glob("*.parquet")) if fmt is ExportFormat.HF else [path]
    records = [r for file in files for r in pq.read_table(file).to_pylist()]
    for record in records:
        if record.get("reward_parts") is not None:
            record["reward_parts"] = json.loads(record["reward_parts"])
    return records


def _expected(engine: Engine, rollout_name: str, data: Dataset) -> dict[str, Any]:
    """The record the export must hold for one rollout, read from the tables directly."""
    rollout_id = data.rollouts[rollout_name]
    with session_scope(engine) as session:
        rollout = session.get(Rollout, rollout_id)
        attempt = session.scalars(
            select(Attempt).where(
                Attempt.rollout_id == rollout_id, Attempt.status == AttemptStatus.SUCCEEDED
            )
        ).one()
        actions = session.scalars(
            select(Step.action).where(Step.attempt_id == attempt.id).order_by(Step.index)
        ).all()
        calls = session.scalars(
            select(LlmCall).where(LlmCall.attempt_id == attempt.id).order_by(LlmCall.index)
        ).all()
        goal = session.get(Goal, rollout.goal_id)
        return {
            "rollout_id": str(rollout_id),
            "attempt": attempt.number,
            "goal_id": goal.id,
            "split": goal.split,
            "instruction": goal.instruction,
            "start": str(rollout.start),
            "reward": rollout.reward,
            "reward_parts": rollout.reward_parts,
            "success": rollout.success,
            "num_steps": rollout.num_steps,
            "policy_version_min": rollout.policy_version_min,
            "policy_version_max": rollout.policy_version_max,
            "actions": list(actions),
            "turns": [
                {
                    "index": c.index,
                    "policy_version": c.policy_version,
                    "messages": c.request_messages,
                    "response": c.response_text,
                    "prompt_token_ids": c.prompt_token_ids,
                    "response_token_ids": c.response_token_ids,
                    "response_logprobs": c.response_logprobs,
                }
                for c in calls
            ],
        }


@pytest.mark.parametrize("fmt", list(ExportFormat))
def test_export_trajectories_round_trip_matches_database(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path, fmt: ExportFormat
) -> None:
    _, engine, data = export_db
    out = tmp_path / f"trajectories.{fmt}"
    written = export_trajectories(engine, out, fmt, tokens=True, batch_size=2)
    records = {r["rollout_id"]: r for r in _read(out, fmt)}
    expected_names = ["retried", "half", "quarter"]
    assert written == len(records) == 3
    assert set(records) == {str(data.rollouts[n]) for n in expected_names}
    for name in expected_names:
        want = _expected(engine, name, data)
        got = records[want["rollout_id"]]
        for key, value in want.items():
            if key != "turns":
                assert got[key] == value, (name, key)
        assert [t["index"] for t in got["turns"]] == [t["index"] for t in want["turns"]]
        for got_turn, want_turn in zip(got["turns"], want["turns"], strict=True):
            assert got_turn == {**got_turn, **want_turn}, name
    retried = records[str(data.rollouts["retried"])]
    assert retried["attempt"] == 2 and len(retried["actions"]) == 3, "failed attempt left out"
    if fmt is ExportFormat.PARQUET:
        assert pq.ParquetFile(out).metadata.num_row_groups == 2, "one row group per batch"


@pytest.mark.parametrize("fmt", list(ExportFormat))
@pytest.mark.parametrize(
    ("filters", "names"),
    [
        (TrajectoryFilter(min_reward=0.5), {"retried", "half"}),
        (TrajectoryFilter(policy_version=2), {"retried", "quarter"}),
        (TrajectoryFilter(split="test"), {"quarter"}),
        (TrajectoryFilter(min_reward=0.5, policy_version=3), {"half"}),
        (TrajectoryFilter(min_reward=2.0), set()),
    ],
)
def test_export_trajectories_filters(
    export_db: tuple[str, Engine, Dataset],
    tmp_path: Path,
    fmt: ExportFormat,
    filters: TrajectoryFilter,
    names: set[str],
) -> None:
    _, engine, data = export_db
    out = tmp_path / f"filtered.{fmt}"
    if not names:
        with pytest.raises(EmptyExportError, match="no trajectories match"):
            export_trajectories(engine, out, fmt, filters)
        assert not list(tmp_path.iterdir()), "nothing written, nothing partial left"
        return
    written = export_trajectories(engine, out, fmt, filters)
    ids = {r["rollout_id"] for r in _read(out, fmt)}
    assert written == len(ids)
    assert ids == {str(data.rollouts[n]) for n in names}


def test_export_trajectories_without_tokens_has_no_token_fields(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    _, engine, _ = export_db
    out = tmp_path / "plain.parquet"
    export_trajectories(engine, out, ExportFormat.PARQUET)
    turn_type = pq.read_schema(out).field("turns").type.value_type
    names = {turn_type.field(i).name for i in range(turn_type.num_fields)}
    assert "prompt_token_ids" not in names and "messages" in names


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_export_goals_is_a_verl_dataset(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path, fmt: ExportFormat
) -> None:
    _, engine, _ = export_db
    out = tmp_path / f"goals.{fmt}"
    assert export_goals(engine, out, fmt, batch_size=2) == 5
    records = _read(out, fmt)
    with session_scope(engine) as session:
        goals = {g.id: g for g in session.scalars(select(Goal))}
    by_split: dict[str, list[int]] = {}
    for record in records:
        info = record["extra_info"]
        goal = goals[info["goal_id"]]
        by_split.setdefault(info["split"], []).append(info["index"])
        assert record["data_source"] == "webshop" and record["ability"] == "agent"
        assert record["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT_TEXT}
        user = record["prompt"][1]["content"]
        assert user.startswith(f"Instruction: {goal.instruction}")
        assert "Available actions:\nsearch[<keywords>]" in user
        truth = record["reward_model"]["ground_truth"]
        assert record["reward_model"]["style"] == "rule"
        spec = goal.spec
        assert truth["asin"] == spec["asin"] and truth["attributes"] == spec["attributes"]
        assert json.loads(truth["goal_options"]) == spec["goal_options"]
        assert truth["price_upper"] == spec["price_upper"]
        assert info["split"] == goal.split and info["instruction"] == goal.instruction
    assert by_split == {"test": [0, 1], "train": [0, 1, 2]}
    assert any(isinstance(g.spec["goal_options"], list) for g in goals.values()), "a human goal"


def test_export_goals_leaves_other_environments_goals_out(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    """The export is WebShop's dataset: a BabyAI goal in the same table is not a record."""
    _, engine, _ = export_db
    babyai = Goal(
        id=100_000_007,
        environment="babyai",
        spec={"data_idx": 7, "level": "BabyAI-GoToObj-v0", "seed": 0},
        split="train",
        instruction="go to the red ball",
    )
    with session_scope(engine) as session:
        session.add(babyai)
    try:
        out = tmp_path / "goals.jsonl"
        assert export_goals(engine, out, ExportFormat.JSONL) == 5
        ids = {r["extra_info"]["goal_id"] for r in _read(out, ExportFormat.JSONL)}
        assert 100_000_007 not in ids and len(ids) == 5
    finally:
        with session_scope(engine) as session:
            session.execute(delete(Goal).where(Goal.id == 100_000_007))


def test_export_goals_split_filter(export_db: tuple[str, Engine, Dataset], tmp_path: Path) -> None:
    _, engine, data = export_db
    out = tmp_path / "test-goals.parquet"
    assert export_goals(engine, out, split="test") == 2
    ids = [r["extra_info"]["goal_id"] for r in _read(out, ExportFormat.PARQUET)]
    assert ids == [data.goals["test_a"], data.goals["test_b"]]


def _wsrl(url: str, *args: str, **settings_values: Any) -> subprocess.CompletedProcess[str]:
    settings = Settings(_env_file=None, database_url=url, **settings_values)
    return subprocess.run(
        [*WSRL, *args],
        env=child_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_wsrl_export_commands_write_files(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    url, _, data = export_db
    goals_out = tmp_path / "out" / "goals.parquet"
    done = _wsrl(url, "export", "goals", "--format", "parquet", "--out", str(goals_out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()  # a pipe, not a terminal: plain progress lines
    assert lines[0] == "goals: 0/5 (0%), elapsed 0s"
    assert (
        lines[1].startswith("goals: 5/5 (100%), ") and lines[2] == f"wrote 5 goals to {goals_out}"
    )
    assert pq.read_table(goals_out).num_rows == 5
    traj_out = tmp_path / "out" / "traj.jsonl"
    args = ["export", "trajectories", "--out", str(traj_out), "--min-reward", "0.5", "--tokens"]
    done = _wsrl(url, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("trajectories: 2/2 (100%), ")
    records = _read(traj_out, ExportFormat.JSONL)
    assert {r["rollout_id"] for r in records} == {
        str(data.rollouts["retried"]),
        str(data.rollouts["half"]),
    }
    assert all(t["response_token_ids"] for r in records for t in r["turns"])


def test_wsrl_export_unknown_format_is_an_error(export_db: tuple[str, Engine, Dataset]) -> None:
    url, _, _ = export_db
    done = _wsrl(url, "export", "trajectories", "--format", "csv", "--out", "/tmp/x.csv")
    assert done.returncode == 2
    assert "csv" in done.stderr


def test_wsrl_export_goals_refuses_a_dataset_folder(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    url, _, _ = export_db
    done = _wsrl(url, "export", "goals", "--format", "hf", "--out", str(tmp_path / "goals"))
    assert done.returncode == 2 and "--format parquet or jsonl" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())


def test_wsrl_export_goals_on_an_empty_database_without_env_is_an_error(
    make_database: Callable[[], str], tmp_path: Path
) -> None:
    """It wrote '0 goals' and exited 0; now it loads the env server's goals first, and
    says so when it cannot."""
    url = make_database()
    migrate.upgrade(url)
    out = tmp_path / "goals.parquet"
    done = _wsrl(url, "export", "goals", "--out", str(out), env_url="http://127.0.0.1:9")
    assert done.returncode == 1
    assert "no goals in Postgres" in done.stderr and "wsrl env serve" in done.stderr
    assert not out.exists()


def test_a_failed_export_leaves_the_earlier_file_as_it_was(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    """The file was opened (emptied) before the first row was read: an export that failed
    lost the previous one and left an empty file."""
    out = tmp_path / "traj.jsonl"
    out.write_text('{"earlier": "export"}\n')
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere"
    done = _wsrl(closed, "export", "trajectories", "--out", str(out))
    assert done.returncode == 1 and "cannot connect to Postgres" in done.stderr
    assert out.read_text() == '{"earlier": "export"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traj.jsonl"]


def test_an_export_where_no_file_can_be_written_is_a_clear_error(
    export_db: tuple[str, Engine, Dataset], tmp_path: Path
) -> None:
    url, _, _ = export_db
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "goals.parquet"
    done = _wsrl(url, "export", "goals", "--out", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot write {out}: " in done.stderr
