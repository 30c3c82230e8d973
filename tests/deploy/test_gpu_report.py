"""The GPU run's report says where the GPU's time went (docker/gpu/report.py): its
parsers on the lines nvidia-smi and ``watch-endpoint`` write, and a run's phases, busy
shares and tokens per second on a timeline whose answer is known. The GPU run itself is
the only other reader of this code, so it runs here on CPU, where it cannot rot."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "docker" / "gpu" / "report.py")
report = importlib.util.module_from_spec(spec)
sys.modules["gpu_report"] = report  # dataclasses look their module up there
spec.loader.exec_module(report)

T0 = datetime(2026, 12, 6, 14, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def endpoint_line(seconds: float, status: str, version: int) -> str:
    record = f'{{"base_url": "http://h:8200/v1", "model": "policy", "status": "{status}", '
    return f'{at(seconds).isoformat(timespec="milliseconds")} {record}"version": {version}}}'


def test_the_lines_nvidia_smi_and_watch_endpoint_write_are_read() -> None:
    gpu = "\n".join(
        [
            "2026/12/06 14:00:00.000, 1200, 0",
            "2026/12/06 14:00:00.500, 18200, 97",
            "Failed to initialize NVML: Unknown Error",
        ]
    )
    assert report.gpu_samples(gpu) == [(at(0), 1200.0, 0.0), (at(0.5), 18200.0, 97.0)]
    log = "\n".join(
        [
            f"{at(1).isoformat(timespec='milliseconds')} None",
            endpoint_line(10, "serving", 0),
            f"{at(11).isoformat(timespec='milliseconds')} unreadable: Connection refused",
            endpoint_line(20, "paused", 0),
        ]
    )
    assert report.endpoint_records(log) == [(at(10), "serving", 0), (at(20), "paused", 0)]


def test_a_run_is_split_into_its_phases_with_their_busy_shares_and_tokens() -> None:
    # v0 serves at 10 s; the step making v1 pauses at 20 s (paused v0, then paused v1 for
    # the sync) and serves v1 at 30 s; the run's samples end at 40 s.
    records = [
        (at(10), "serving", 0),
        (at(20), "paused", 0),
        (at(27), "paused", 1),
        (at(30), "serving", 1),
    ]
    metrics = {
        "time/update_s": 6.0,  # 1 s of vLLM's sleep before verl's old log-prob
        "timing_s/old_log_prob": 1.0,
        "timing_s/update_actor": 4.0,
        "time/sync_s": 2.0,
    }
    spans = report.timeline(records, {1: metrics}, at(0), at(40))
    assert [(s.phase, s.start, s.end) for s in spans] == [
        ("start-up", at(0), at(10)),
        ("rollouts", at(10), at(20)),
        ("paused, other", at(20), at(21)),
        ("old log-prob", at(21), at(22)),
        ("update", at(22), at(26)),
        ("paused, other", at(26), at(28)),
        ("weight sync", at(28), at(30)),
        ("rollouts", at(30), at(40)),
    ]

    def busy(t: float) -> float:  # 10 % while starting, 40 % serving, 90 % updating
        return 90.0 if 21 <= t < 26 else 10.0 if t < 10 else 40.0

    samples = [(at(k / 2), 1000.0, busy(k / 2)) for k in range(80)]
    # attempts (start, end, tokens): within a serving stretch, and one across the pause
    # (its 100 tokens spread over 15-35 s: a quarter in each rollouts part, half paused)
    attempts = [(at(12), at(18), 300), (at(32), at(38), 100), (at(15), at(35), 100)]
    rows = {r["phase"]: r for r in report.gpu_time(spans, samples, attempts)}
    assert rows["start-up"]["seconds"] == 10.0 and rows["start-up"]["share of run"] == "25.0 %"
    assert rows["rollouts"]["seconds"] == 20.0 and rows["rollouts"]["GPU busy (mean)"] == "40 %"
    assert rows["rollouts"]["tokens"] == 450 and rows["rollouts"]["tokens/s"] == 22.5
    assert rows["update"]["seconds"] == 4.0 and rows["update"]["GPU busy (mean)"] == "90 %"
    assert rows["old log-prob"]["GPU busy (mean)"] == "90 %"
    assert rows["paused, other"]["seconds"] == 3.0 and rows["weight sync"]["seconds"] == 2.0
    assert rows["update"]["tokens"] == 20  # 4 of the attempt's 20 s
    whole = rows["whole run"]
    assert whole["seconds"] == 40.0 and whole["tokens"] == 500 and whole["samples"] == 80
    assert sum(r["seconds"] for p, r in rows.items() if p != "whole run") == 40.0


def test_a_run_that_never_served_is_all_start_up() -> None:
    spans = report.timeline([], {}, at(0), at(120))
    assert [(s.phase, s.start, s.end) for s in spans] == [("start-up", at(0), at(120))]


def test_the_summary_of_a_run_carries_the_gpu_time_section(
    fresh_settings, tmp_path: Path, monkeypatch
) -> None:
    """The whole summary on a migrated database (its SQL runs) with the run's two logs
    and one group of two rollouts, one of whose calls vLLM aborted."""
    from helpers.training_rows import S, add_group
    from sqlalchemy import select

    from app.config import get_settings
    from app.db.models import Attempt, LlmCall
    from app.db.session import make_engine, make_sessionmaker, session_scope

    engine = make_engine(fresh_settings)
    with session_scope(make_sessionmaker(engine)) as session:
        add_group(session, [S, S])
        for attempt in session.scalars(select(Attempt)):  # 6 tokens each, 6-16 s
            attempt.started_at, attempt.finished_at = at(6).astimezone(), at(16).astimezone()
        session.scalars(select(LlmCall)).first().finish_reason = "abort"
    engine.dispose()

    (tmp_path / "gpu.csv").write_text(
        "\n".join(f"2026/12/06 14:00:{k:02d}.000, 1000, 50" for k in range(20))
    )
    (tmp_path / "endpoint.log").write_text(endpoint_line(5, "serving", 0) + "\n")
    started = "INFO trainer.backends.verl.trainer: verl's workers started in 98.0 s: ..."
    (tmp_path / "trainer.log").write_text(f"INFO ray: up\n{started}\n")
    alone = {"elapsed_time": 4.0, "num_requests": 256, **report.VLLM_ALONE}
    alone["output_tokens_per_s"] = 256 * 128 / 4.0
    (tmp_path / "vllm-alone.json").write_text(report.json.dumps(alone))
    monkeypatch.setenv("WSRL_DATABASE_URL", fresh_settings.database_url)

    def summary() -> str:
        get_settings.cache_clear()
        try:
            return report.summary(tmp_path)
        finally:
            get_settings.cache_clear()

    text = summary()
    assert "## Where the GPU's time went" in text
    assert "| start-up | 5 | 26.3 % | 50 % | 5 | 0 | 0 |" in text  # v0 served at 5 s
    assert "| rollouts | 14 | 73.7 % | 50 % | 14 | 12 | 0.9 |" in text
    assert "GPU memory used, peak: 1000 MiB (20 samples)" in text
    assert f"## Start-up of verl's workers, by part\n\n```\n{started}\n```" in text
    assert "Throughput against vLLM alone: no rollouts phase or no vLLM" not in text
    assert "while serving; vLLM alone on this GPU" in text
    assert "| 0 | 4 | 4 | 4 | 1 |" in text  # v0's calls: 4, all with ids and logprobs, 1 aborted
    assert "not measured: the run saved no Hugging Face weights per step" in text
    (tmp_path / "attribution.json").write_text(
        report.json.dumps([{"version": 0, "calls scored": 4, "by v+1's weights": 1}])
    )
    text = summary()
    assert "| version | calls scored | by v+1's weights |\n|---|---|---|\n| 0 | 4 | 1 |" in text


def test_the_served_and_the_trainers_probabilities_are_reported_per_updating_step() -> None:
    steps = [
        {
            "step": 1,
            "policy_version": 1,
            "metrics": {
                "training/rollout_probs_diff_mean": 0.002,
                "training/rollout_probs_diff_max": 0.09,
                "training/rollout_actor_probs_pearson_corr": 0.99,
            },
        },
        {"step": 2, "policy_version": 1, "metrics": {"update/skipped": 1.0}},
    ]
    assert report.probability_rows(steps) == [
        {"step": 1, "version": 1, "mean": 0.002, "max": 0.09, "pearson": 0.99}
    ]


def test_the_pipelines_throughput_is_a_share_of_vllm_alone() -> None:
    rows = [{"phase": "start-up", "tokens/s": 0.0}, {"phase": "rollouts", "tokens/s": 2048.0}]
    alone = {**report.VLLM_ALONE, "output_tokens_per_s": 8192.0}
    line = report.throughput_ratio(rows, alone)
    assert line.endswith("**0.250x**") and "2048 tokens/s while serving" in line
    assert report.throughput_ratio(rows[:1], alone).startswith("no rollouts phase")


def test_each_call_is_attributed_to_the_weights_that_generated_it(
    fresh_settings, tmp_path: Path, monkeypatch
) -> None:
    """Version 1 is the shipped tiny policy's weights perturbed, laid out as verl saves a
    step's checkpoint with ``hf_model``. Four calls are recorded under version 0: the server
    generated (and scored, with bf16-sized noise) two with v0's weights and two with v1's,
    the calls that waited out a pause. Each is attributed to the weights that made it."""
    import json

    import pytest

    pytest.importorskip("verl")
    import torch
    from helpers.training_rows import S, add_group
    from sqlalchemy import select
    from transformers import AutoModelForCausalLM

    from app.config import get_settings
    from app.db.models import Attempt, LlmCall, Rollout
    from app.db.session import make_engine, make_sessionmaker, session_scope
    from trainer.backends.verl.trainer import STATE_FILE
    from trainer.tensors import token_logprobs

    base = ROOT / "trainer" / "bootstrap" / "tiny-0"
    step = tmp_path / "checkpoints" / "global_step_1"
    hf = step / "actor" / "huggingface"
    perturbed = AutoModelForCausalLM.from_pretrained(base)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in perturbed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    perturbed.save_pretrained(hf)
    (step / STATE_FILE).write_text(json.dumps({"step": 1, "version": 1}))
    config_only = tmp_path / "checkpoints" / "global_step_2"  # a step saved without hf_model
    perturbed.config.save_pretrained(config_only / "actor" / "huggingface")
    (config_only / STATE_FILE).write_text(json.dumps({"step": 2, "version": 2}))
    weights = report.version_weights(tmp_path / "checkpoints", str(base))
    assert weights == {0: str(base), 1: str(hf)}

    served_by = {0: AutoModelForCausalLM.from_pretrained(base).eval(), 1: perturbed.eval()}
    noise = torch.Generator().manual_seed(1)
    engine = make_engine(fresh_settings)
    crossed = []
    with session_scope(make_sessionmaker(engine)) as session:
        add_group(session, [S, S], version=0)
        rows = session.execute(
            select(LlmCall, Rollout.sample_index)
            .join(Attempt, Attempt.id == LlmCall.attempt_id)
            .join(Rollout, Rollout.id == Attempt.rollout_id)
            .order_by(LlmCall.id)
        ).all()
        for call, sample in rows:  # sample 1's calls waited out the pause: v1 made them
            ids = torch.tensor([call.prompt_token_ids + call.response_token_ids])
            with torch.no_grad():
                logp = token_logprobs(served_by[sample](ids).logits, ids)[0]
            logp = logp[len(call.prompt_token_ids) - 1 :]
            logp = logp + torch.randn(logp.shape, generator=noise) * 0.01
            call.response_logprobs = logp.tolist()
            call.latency_ms = 5000.0 if sample else 300.0
            if sample:
                crossed.append(call.id)
    engine.dispose()

    monkeypatch.setenv("WSRL_DATABASE_URL", fresh_settings.database_url)
    get_settings.cache_clear()
    try:
        [row] = report.attribute(weights)
    finally:
        get_settings.cache_clear()
    assert row["version"] == 0 and row["calls scored"] == 4
    assert (row["by v's weights"], row["by v+1's weights"]) == (2, 2)
    assert row["the v+1 ones: latency ms, max"] == 5000.0
    assert sorted(map(int, row["their ids"].split())) == sorted(crossed)
    assert row["mean distance to v"] > 0 and row["to v+1"] > 0
