"""``--format hf`` folders read by the real ``datasets.load_dataset``, and the chat forms
fed to TRL's own trainers (``SFTTrainer``, ``DPOTrainer``) for two steps of the shipped
tiny policy on the CPU."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.group_data import insert_groups, prompt
from helpers.processes import REPO, WSRL, child_env
from helpers.trajectory_data import Dataset, insert_dataset
from sqlalchemy import Engine, func, select

from app.config import Settings
from app.db import migrate
from app.db.lifecycle import AttemptStatus, RolloutStatus
from app.db.models import Attempt, Goal, LlmCall, Rollout
from app.db.session import make_engine, session_scope
from app.exports import chat
from app.exports.card import DatasetCard, is_export_folder
from app.exports.forms import FORMS, export_trajectories
from app.exports.trajectories import TrajectoryFilter
from app.exports.writers import (
    DatasetFolderWriter,
    EmptyExportError,
    ExportFormat,
    TrajectoryForm,
)
from trainer.bootstrap.shipped import SHIPPED

datasets = pytest.importorskip("datasets")
HF = ExportFormat.HF
PREFERENCES = TrajectoryForm.PREFERENCES


@pytest.fixture(scope="module")
def groups_db(
    make_database: Callable[[], str],
) -> Iterator[tuple[str, Engine, Dataset, dict[str, list[Any]]]]:
    """:mod:`trajectory_data`'s rollouts (a group each) and :mod:`group_data`'s groups."""
    url = make_database()
    migrate.upgrade(url)
    engine = make_engine(Settings(_env_file=None, database_url=url))
    data = insert_dataset(engine)
    groups = insert_groups(engine, data.goals)
    yield url, engine, data, groups
    engine.dispose()


def _load(folder: Path, tmp_path: Path) -> Any:
    return datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf-cache"))


def _train(trainer_class: str, config_class: str, dataset: Any, tmp_path: Path) -> float:
    """Two optimizer steps of TRL's ``trainer_class`` on ``dataset``; the mean loss."""
    trl = pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = getattr(trl, config_class)(
        output_dir=str(tmp_path / "trl"),
        max_steps=2,
        per_device_train_batch_size=2,
        max_length=512,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = getattr(trl, trainer_class)(
        model=AutoModelForCausalLM.from_pretrained(SHIPPED),
        args=config,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(SHIPPED),
    )
    result = trainer.train()
    assert result.global_step == 2
    return result.training_loss


def test_hf_trajectories_load_by_split_with_a_card(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]], tmp_path: Path
) -> None:
    _, engine, _, _ = groups_db
    out = tmp_path / "trajectories"
    written = export_trajectories(engine, out, HF, batch_size=2)
    loaded = _load(out, tmp_path)
    with session_scope(engine) as session:
        succeeded = session.execute(
            select(Goal.split, func.count())
            .join(Rollout, Rollout.goal_id == Goal.id)
            .where(Rollout.status == RolloutStatus.SUCCEEDED)
            .group_by(Goal.split)
        )
        expected = dict(succeeded.all())
    by_split = {split: loaded[split].num_rows for split in loaded}
    assert by_split == expected == {"train": 11, "test": 3} and written == 14
    first = loaded["test"][0]
    assert first["turns"][0]["messages"][0]["role"] == "system"
    card = (out / "README.md").read_text()
    assert "config_name: trajectories" in card and "path: data/train-*.parquet" in card
    assert "policy versions 1-3, 7-9" in card, "every version that served a reply"
    assert f"| train | {by_split['train']} |" in card and f"| test | {by_split['test']} |" in card
    for name in FORMS[TrajectoryForm.TRAJECTORIES].fields:
        assert f"| `{name}` |" in card
    assert is_export_folder(out) and sorted(p.name for p in out.iterdir()) == ["README.md", "data"]


def test_a_split_continues_in_a_new_file_after_file_rows(tmp_path: Path) -> None:
    """One Parquet writer keeps each row group's footer entry until it closes: a folder
    ends its files after ``file_rows`` rows, and the card's pattern names them all."""
    import pyarrow as pa

    schema = pa.schema([("split", pa.string()), ("n", pa.int64())])
    card = DatasetCard("numbers", "Numbers", "-", "all", {}, lambda row: (row["n"],))
    writer = DatasetFolderWriter(tmp_path / "out", schema, (), card, group_rows=2, file_rows=4)
    rows = [{"split": "train", "n": n} for n in range(9)] + [{"split": "eval", "n": 9}]
    for start in range(0, len(rows), 2):
        writer.write(rows[start : start + 2])
    writer.close()
    names = sorted(p.name for p in (tmp_path / "out" / "data").iterdir())
    assert names == [
        "eval-00000.parquet",
        "train-00000.parquet",
        "train-00001.parquet",
        "train-00002.parquet",
    ]
    loaded = _load(tmp_path / "out", tmp_path)
    assert sorted(loaded["train"]["n"]) == list(range(9)) and loaded["eval"]["n"] == [9]
    assert "policy versions 0-9" in (tmp_path / "out" / "README.md").read_text()


def test_every_field_of_every_form_is_described() -> None:
    for form, spec in FORMS.items():
        names = set(spec.schema(True).names)
        assert names == set(spec.fields), form


def test_hf_messages_are_one_row_per_reply_and_sft_trains_on_them(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]], tmp_path: Path
) -> None:
    _, engine, data, _ = groups_db
    out = tmp_path / "sft"
    filters = TrajectoryFilter(min_reward=0.5)
    written = export_trajectories(engine, out, HF, filters, form=TrajectoryForm.MESSAGES)
    loaded = _load(out, tmp_path)
    with session_scope(engine) as session:
        calls = session.execute(
            select(Rollout.id, LlmCall.index, LlmCall.request_messages, LlmCall.response_text)
            .join(Attempt, Attempt.rollout_id == Rollout.id)
            .join(LlmCall, LlmCall.attempt_id == Attempt.id)
            .where(
                Rollout.status == RolloutStatus.SUCCEEDED,
                Rollout.reward >= 0.5,
                Attempt.status == AttemptStatus.SUCCEEDED,
            )
        ).all()
    want = {(str(r), i): [*m, {"role": "assistant", "content": t}] for r, i, m, t in calls}
    rows = [row for split in loaded for row in loaded[split]]
    assert written == len(rows) == len(want) == 16
    assert {(r["rollout_id"], r["turn"]): r["messages"] for r in rows} == want
    retried = sorted(
        (r["turn"], r["policy_version"])
        for r in rows
        if r["rollout_id"] == str(data.rollouts["retried"])
    )
    assert retried == [(0, 1), (1, 2), (2, 2)], "its succeeded attempt only"
    assert _train("SFTTrainer", "SFTConfig", loaded["train"], tmp_path) > 0


def test_hf_preferences_pair_a_groups_best_and_worst_where_they_part_and_dpo_trains(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]], tmp_path: Path
) -> None:
    _, engine, _, groups = groups_db
    out = tmp_path / "dpo"
    assert export_trajectories(engine, out, HF, form=PREFERENCES) == 2
    loaded = _load(out, tmp_path)
    assert {split: loaded[split].num_rows for split in loaded} == {"train": 1, "test": 1}
    first, later = loaded["train"][0], loaded["test"][0]
    assert first["group_id"] == str(_group_of(engine, groups["parts_first"][0]))
    assert (first["chosen_rollout_id"], first["rejected_rollout_id"]) == (
        str(groups["parts_first"][0]),  # reward 1.0 twice: the lower sample index
        str(groups["parts_first"][3]),  # reward 0.0 twice: the higher
    )
    assert first["turn"] == 0 and first["prompt"] == prompt("train_a", [])
    assert first["chosen"] == [{"role": "assistant", "content": "search[blue item]"}]
    assert first["rejected"] == [{"role": "assistant", "content": "search[red]"}]
    assert (first["chosen_reward"], first["rejected_reward"]) == (1.0, 0.0)
    assert later["turn"] == 1 and later["prompt"] == prompt("test_a", ["search[red small]"])
    assert later["chosen"][0]["content"] == "click[1]" and later["chosen_policy_version"] == 9
    assert later["rejected"][0]["content"] == "click[item 4]"
    assert "policy versions 7, 9" in (out / "README.md").read_text()
    assert _train("DPOTrainer", "DPOConfig", loaded["train"], tmp_path) > 0


def _group_of(engine: Engine, rollout_id: Any) -> Any:
    with session_scope(engine) as session:
        return session.get(Rollout, rollout_id).group_id


@pytest.mark.parametrize(
    ("policy_version", "reason"),
    [
        (8, "never replied differently to the same prompt"),  # never_part
        (99, "no group has episodes with different rewards"),
    ],
)
def test_preferences_without_a_pair_write_nothing(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]],
    tmp_path: Path,
    policy_version: int,
    reason: str,
) -> None:
    _, engine, _, _ = groups_db
    out = tmp_path / "pairs.jsonl"
    filters = TrajectoryFilter(policy_version=policy_version)
    with pytest.raises(EmptyExportError, match=reason):
        export_trajectories(engine, out, ExportFormat.JSONL, filters, form=PREFERENCES)
    assert not list(tmp_path.iterdir())


def test_parting_turn_needs_the_same_prompt() -> None:
    a = [{"messages": prompt("g", []), "response": "search[a]"}]
    b = [{"messages": prompt("h", []), "response": "search[b]"}]
    assert chat.parting_turn(a, b) is None
    assert chat.parting_turn(a, [{**b[0], "messages": a[0]["messages"]}]) == 0


def _wsrl(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    settings = Settings(_env_file=None, database_url=url)
    return subprocess.run(
        [*WSRL, "export", *args],
        env=child_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_wsrl_export_hf_replaces_only_its_own_folder(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]], tmp_path: Path
) -> None:
    url, _, _, _ = groups_db
    out = tmp_path / "dpo"
    done = _wsrl(url, "trajectories", "--format", "hf", "--form", "preferences", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"wrote 2 preference pairs to {out}"
    assert done.stdout.splitlines()[0].startswith("groups: 0/")
    (out / "data" / "stale.parquet").write_text("from an earlier export")
    done = _wsrl(url, "trajectories", "--format", "hf", "--form", "messages", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "test-00000.parquet",
        "train-00000.parquet",
    ]
    assert "config_name: messages" in (out / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dpo"], "nothing beside it"
    empty = _wsrl(url, "trajectories", "--format", "hf", "--min-reward", "2", "--out", str(out))
    assert empty.returncode == 1 and "no trajectories match (" in empty.stderr, empty.stderr
    assert "config_name: messages" in (out / "README.md").read_text(), "the earlier one stays"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "hf", "--out", "{file}"], "is a file: name a folder"),
        (["--format", "hf", "--out", "{other}"], "replaces only a folder it wrote"),
        (["--format", "jsonl", "--out", "{other}"], "writes one file, and"),
        (["--form", "messages", "--tokens", "--out", "{new}"], "--tokens adds token ids"),
        (["--form", "preferences", "--min-reward", "1", "--out", "{new}"], "--min-reward would"),
    ],
)
def test_wsrl_export_refuses_what_it_cannot_write(
    groups_db: tuple[str, Engine, Dataset, dict[str, list[Any]]],
    tmp_path: Path,
    args: list[str],
    message: str,
) -> None:
    url, _, _, _ = groups_db
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    paths = {"file": "a-file", "other": "other", "new": "new.jsonl"}
    argv = [a.format(**{k: str(tmp_path / v) for k, v in paths.items()}) for a in args]
    done = _wsrl(url, "trajectories", *argv)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stderr.startswith("Error: ") and "Traceback" not in done.stderr
    assert (tmp_path / "a-file").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "other"]
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]
