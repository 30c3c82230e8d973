"""The GPU first run's report (docker/gpu/first-run.sh), from what the run recorded.

    python docker/gpu/report.py watch-endpoint   # log each endpoint record Redis holds
    python docker/gpu/report.py summary LOGS     # markdown: steps, versions, eval, GPU
    python docker/gpu/report.py vllm-alone LOGS CONFIG [MODEL]  # vLLM's own ceiling
    python docker/gpu/report.py attribute LOGS CONFIG [MODEL]   # whose weights made each call

Where the GPU's time went comes from three clocks of the same machine: ``gpu.csv``
(nvidia-smi's timestamp, memory and utilisation every 0.5 s), ``endpoint.log`` (each
endpoint record with the time it was seen) and the train steps' own timings, which place
old log-prob, update and weight sync inside each paused stretch (:func:`gpu_time`).

Reads the project's settings (``WSRL_*``) for Postgres and Redis, as every process does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from statistics import fmean

from sqlalchemy import text

from app.config import get_settings
from app.core.endpoint import ENDPOINT_KEY
from app.db.session import make_engine


def watch_endpoint(poll_s: float = 0.5) -> None:
    """One line per change of the endpoint record: time, then the record."""
    from redis import Redis

    redis = Redis.from_url(get_settings().resolved_redis_url())
    last = None
    while True:
        try:
            record = redis.get(ENDPOINT_KEY)
        except Exception as exc:  # Redis restarting: say so, keep watching
            record = f"unreadable: {exc}".encode()
        if record != last:
            seen = datetime.now().isoformat(timespec="milliseconds")
            print(f"{seen} {record.decode() if record else None}", flush=True)
            last = record
        time.sleep(poll_s)


PHASES = ("start-up", "rollouts", "paused, other", "old log-prob", "update", "weight sync")
"""``start-up``: from the first GPU sample to the first ``serving`` record; ``rollouts``:
while a version serves; a paused stretch (``paused`` record to the next ``serving``) is
split by its step's timings: old log-prob and update (verl's, in the update), then weight
sync (the swap, which ends at ``serving``), the rest (vLLM's sleep, the checkpoint, the
commit) ``paused, other``."""


@dataclass(frozen=True)
class Span:
    phase: str
    start: datetime
    end: datetime


def gpu_samples(text: str) -> list[tuple[datetime, float, float]]:
    """(time, memory used MiB, utilisation %) of each ``timestamp, memory.used,
    utilization.gpu`` line nvidia-smi wrote; other lines (errors, a header) are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            at = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((at, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def endpoint_records(text: str) -> list[tuple[datetime, str, int]]:
    """(time seen, status, version) of each record ``watch-endpoint`` logged."""
    out = []
    for line in text.splitlines():
        seen, _, raw = line.partition(" ")
        try:
            record = json.loads(raw)
            out.append(
                (datetime.fromisoformat(seen), str(record["status"]), int(record["version"]))
            )
        except (ValueError, TypeError, KeyError):
            continue  # None (no record yet), or Redis unreadable
    return out


def timeline(
    records: list[tuple[datetime, str, int]],
    steps: dict[int, dict[str, float]],
    begin: datetime,
    end: datetime,
) -> list[Span]:
    """The run from ``begin`` to ``end`` as phases (:data:`PHASES`). ``steps``: the
    metrics of the step that made each version, by that version."""
    spans: list[Span] = []
    first = next((t for t, status, _ in records if status == "serving"), end)
    spans.append(Span("start-up", begin, min(first, end)))
    paused_at: datetime | None = None
    serving_at: datetime | None = None
    for at, status, version in records:
        if at < first:
            continue
        if status == "paused" and paused_at is None:
            paused_at = at
            if serving_at is not None:
                spans.append(Span("rollouts", serving_at, at))
                serving_at = None
        elif status == "serving" and serving_at is None:
            if paused_at is not None:
                spans += _paused(paused_at, at, steps.get(version, {}))
                paused_at = None
            serving_at = at
    if serving_at is not None:
        spans.append(Span("rollouts", serving_at, end))
    elif paused_at is not None:
        spans.append(Span("paused, other", paused_at, end))
    return [s for s in spans if s.end > s.start]


def _paused(start: datetime, end: datetime, metrics: dict[str, float]) -> list[Span]:
    """A paused stretch: the update's part before old log-prob (vLLM's sleep), old
    log-prob, update, then the rest, and the weight sync that ends it."""

    def seconds(key: str) -> timedelta:
        return timedelta(seconds=max(float(metrics.get(key, 0.0)), 0.0))

    old, update = seconds("timing_s/old_log_prob"), seconds("timing_s/update_actor")
    sync_from = max(end - seconds("time/sync_s"), start)
    old_from = min(start + max(seconds("time/update_s") - old - update, timedelta(0)), sync_from)
    update_from = min(old_from + old, sync_from)
    update_to = min(update_from + update, sync_from)
    return [
        Span("paused, other", start, old_from),
        Span("old log-prob", old_from, update_from),
        Span("update", update_from, update_to),
        Span("paused, other", update_to, sync_from),
        Span("weight sync", sync_from, end),
    ]


def _overlap(start: datetime, end: datetime, spans: list[Span]) -> float:
    """The share of ``start``-``end`` inside ``spans`` (an instant: 1 if inside)."""
    if end <= start:
        return 1.0 if any(s.start <= start < s.end for s in spans) else 0.0
    inside = sum(max((min(end, s.end) - max(start, s.start)).total_seconds(), 0.0) for s in spans)
    return inside / (end - start).total_seconds()


def gpu_time(
    spans: list[Span],
    samples: list[tuple[datetime, float, float]],
    attempts: list[tuple[datetime, datetime, int]],
) -> list[dict]:
    """One row per phase: its seconds and share of the run, the GPU's mean utilisation
    in it, and the tokens generated in it per second of the phase. The calls carry no
    time of their own: an attempt's generated tokens (``attempts``: start, end, tokens)
    are spread evenly over its duration."""
    total = sum((s.end - s.start).total_seconds() for s in spans) or 1e-9
    rows = []
    for phase in PHASES:
        mine = [s for s in spans if s.phase == phase]
        seconds = sum((s.end - s.start).total_seconds() for s in mine)
        if not mine:
            continue
        busy = [u for at, _, u in samples if any(s.start <= at < s.end for s in mine)]
        tokens = round(sum(n * _overlap(start, end, mine) for start, end, n in attempts))
        rows.append(
            {
                "phase": phase,
                "seconds": round(seconds, 1),
                "share of run": f"{100 * seconds / total:.1f} %",
                "GPU busy (mean)": f"{sum(busy) / len(busy):.0f} %" if busy else "-",
                "samples": len(busy),
                "tokens": tokens,
                "tokens/s": round(tokens / seconds, 1) if seconds else 0.0,
            }
        )
    busy = [u for _, _, u in samples]
    tokens = sum(n for _, _, n in attempts)
    rows.append(
        {
            "phase": "whole run",
            "seconds": round(total, 1),
            "share of run": "100 %",
            "GPU busy (mean)": f"{sum(busy) / len(busy):.0f} %" if busy else "-",
            "samples": len(busy),
            "tokens": tokens,
            "tokens/s": round(tokens / total, 1),
        }
    )
    return rows


PROBS_DIFF = "training/rollout_probs_diff_"


def probability_rows(steps: list[dict]) -> list[dict]:
    """Per step with an update: how far the served (vLLM's) token probabilities were from
    the trainer's own forward (verl's ``training/rollout_probs_*`` metrics, over the
    response tokens), and their correlation."""
    return [
        {
            "step": s["step"],
            "version": s["policy_version"],
            "mean": s["metrics"][f"{PROBS_DIFF}mean"],
            "max": s["metrics"][f"{PROBS_DIFF}max"],
            "pearson": s["metrics"].get("training/rollout_actor_probs_pearson_corr"),
        }
        for s in steps
        if f"{PROBS_DIFF}mean" in s["metrics"]
    ]


VLLM_ALONE = {"prompts": 256, "input_len": 700, "output_len": 128}
"""vLLM's offline benchmark after the run: random prompts of the length a SmolLM2 prompt
has in text mode (median 702 tokens, smollm2.yaml) and as many new tokens as its replies
may have (``webshop.max_tokens``), all at once: what vLLM alone reaches on this GPU."""


def vllm_alone(logs: Path, config: str, model: str | None = None) -> dict:
    """Runs ``vllm bench throughput`` on the run's model (``model``, else the config's)
    with nothing else on the GPU; writes ``vllm-alone.json`` (vLLM's numbers plus
    :data:`VLLM_ALONE` and the output tokens per second)."""
    if model is None:
        from trainer.backends.verl.config import load_config

        model = str(load_config(config).actor_rollout_ref.model.path)
    out = logs / "vllm-alone.json"
    command = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "throughput",
        "--model", model, "--dataset-name", "random", "--seed", "0",
        "--num-prompts", str(VLLM_ALONE["prompts"]),
        "--random-input-len", str(VLLM_ALONE["input_len"]),
        "--random-output-len", str(VLLM_ALONE["output_len"]),
        "--gpu-memory-utilization", "0.5", "--output-json", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, timeout=600)
    result = {**json.loads(out.read_text()), **VLLM_ALONE, "model": model}
    result["output_tokens_per_s"] = (
        result["num_requests"] * VLLM_ALONE["output_len"] / result["elapsed_time"]
    )
    out.write_text(json.dumps(result, indent=2))
    return result


def throughput_ratio(rows: list[dict], alone: dict) -> str:
    """The pipeline's generated tokens per second while serving (the ``rollouts`` phase of
    :func:`gpu_time`) as a share of vLLM's alone."""
    rollouts = next((r for r in rows if r["phase"] == "rollouts"), None)
    ceiling = float(alone["output_tokens_per_s"])
    if rollouts is None or ceiling <= 0:
        return "no rollouts phase or no vLLM benchmark to compare"
    return (
        f"the pipeline generated {rollouts['tokens/s']:.0f} tokens/s while serving; vLLM "
        f"alone on this GPU ({alone['prompts']} prompts of {alone['input_len']} tokens, "
        f"{alone['output_len']} new tokens each, all at once) {ceiling:.0f}: "
        f"**{rollouts['tokens/s'] / ceiling:.3f}x**"
    )


def _gpu_time_section(logs: Path, steps: list[dict]) -> list[str]:
    gpu, endpoint = logs / "gpu.csv", logs / "endpoint.log"
    if not (gpu.exists() and endpoint.exists()):
        return []
    samples = gpu_samples(gpu.read_text())
    if not samples:
        return []
    by_version = {
        int(s["policy_version"]): s["metrics"]
        for s in steps
        if not s["metrics"].get("update/skipped")
    }
    spans = timeline(
        endpoint_records(endpoint.read_text()), by_version, samples[0][0], samples[-1][0]
    )

    def local(value: datetime) -> datetime:  # the logs' clock: this machine's, naive
        return value.astimezone().replace(tzinfo=None)

    attempts = [
        (local(r["started_at"]), local(r["finished_at"]), int(r["tokens"] or 0))
        for r in _rows(
            "SELECT a.started_at, a.finished_at, "
            "sum(octet_length(c.response_token_ids) / 4) AS tokens "  # packed int32
            "FROM attempts a JOIN llm_calls c ON c.attempt_id = a.id "
            "WHERE a.finished_at IS NOT NULL GROUP BY a.id"
        )
    ]
    rows = gpu_time(spans, samples, attempts)
    section = [
        "## Where the GPU's time went (phases from the endpoint records and the steps' "
        "timings; tokens generated, each attempt's spread over its duration)",
        "",
        _table(rows),
    ]
    alone = logs / "vllm-alone.json"
    if alone.exists():
        ratio = throughput_ratio(rows, json.loads(alone.read_text()))
        section.append(f"Throughput against vLLM alone: {ratio}\n")
    return section


@dataclass(frozen=True)
class ServedCall:
    """One LLM call as the server recorded it: the tokens it saw and gave, with the
    log-probs it reported for the ones it gave."""

    id: int
    version: int
    latency_ms: float | None
    prompt: list[int]
    response: list[int]
    logprobs: list[float]


def version_weights(checkpoints: Path, base: str) -> dict[int, str]:
    """Each policy version's whole weights as a Hugging Face folder: version 0 is ``base``,
    the model the run started from; each verl checkpoint saved with ``hf_model``
    (first-run.sh's ATTRIBUTE=1) is the version its step made."""
    from trainer.backends.verl.trainer import STATE_FILE

    found = {0: base}
    for state in sorted(checkpoints.glob(f"global_step_*/{STATE_FILE}")):
        folder = state.parent / "actor" / "huggingface"
        if any(folder.glob("*.safetensors")):  # verl writes config.json there at every save
            found[int(json.loads(state.read_text())["version"])] = str(folder)
    return found


def served_calls(versions: list[int], per_version: int) -> dict[int, list[ServedCall]]:
    """The calls recorded under each of ``versions`` with their token ids and log-probs,
    at most ``per_version`` of each, the slowest first: a call that waited out a pause is
    among them."""
    from sqlalchemy import select

    from app.db.models import LlmCall
    from app.db.session import make_sessionmaker, session_scope

    out: dict[int, list[ServedCall]] = {}
    engine = make_engine(get_settings())
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            for version in versions:
                rows = session.scalars(
                    select(LlmCall)
                    .where(
                        LlmCall.policy_version == version,
                        LlmCall.prompt_token_ids.is_not(None),
                        LlmCall.response_token_ids.is_not(None),
                        LlmCall.response_logprobs.is_not(None),
                    )
                    .order_by(LlmCall.latency_ms.desc().nulls_last(), LlmCall.id)
                    .limit(per_version)
                )
                out[version] = [
                    ServedCall(
                        c.id,
                        version,
                        c.latency_ms,
                        list(c.prompt_token_ids),
                        list(c.response_token_ids),
                        list(c.response_logprobs),
                    )
                    for c in rows
                    if c.response_token_ids
                    and len(c.response_logprobs) == len(c.response_token_ids)
                ]
    finally:
        engine.dispose()
    return out


def served_distance(model, calls: list[ServedCall]) -> list[float]:
    """For each call, the mean absolute difference between the log-probs the server
    reported for its response tokens and ``model``'s for the same tokens after the same
    prompt: small for the weights that generated them (bf16 noise), larger for others."""
    import torch

    from trainer.tensors import token_logprobs

    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for call in calls:
            ids = torch.tensor([call.prompt + call.response], device=device)
            ours = token_logprobs(model(ids).logits, ids)[0, len(call.prompt) - 1 :]
            served = torch.tensor(call.logprobs, device=device)
            out.append(float((ours.float() - served).abs().mean()))
    return out


def attribute(weights: dict[int, str], per_version: int = 200) -> list[dict]:
    """Which weights generated the calls recorded under version v, for each v whose next
    version's weights are there too: each call is scored under v's and v+1's, and belongs
    to the closer. A call sent before a pause and answered after the sync is recorded as v
    (the version it began under) but was generated by v+1 when the server ran it after
    the wake-up; a call the server answered before sleeping is v's."""
    import torch
    from transformers import AutoModelForCausalLM

    pairs = [v for v in sorted(weights) if v + 1 in weights]
    calls = served_calls(pairs, per_version)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    distance: dict[tuple[int, int], list[float]] = {}  # (recorded, scored under) -> per call
    for version in sorted({*pairs, *(v + 1 for v in pairs)}):
        model = AutoModelForCausalLM.from_pretrained(weights[version], torch_dtype="auto")
        model = model.to(device).eval()
        for recorded in (version, version - 1):
            if calls.get(recorded):
                distance[(recorded, version)] = served_distance(model, calls[recorded])
        del model
    rows = []
    for v in pairs:
        own, after = distance.get((v, v), []), distance.get((v, v + 1), [])
        later = [(c, a, b) for c, a, b in zip(calls.get(v, []), own, after, strict=True) if b < a]
        rows.append(
            {
                "version": v,
                "calls scored": len(own),
                "by v's weights": len(own) - len(later),
                "by v+1's weights": len(later),
                "mean distance to v": round(fmean(own), 4) if own else None,
                "to v+1": round(fmean(after), 4) if after else None,
                "the v+1 ones: latency ms, max": max(
                    (c.latency_ms or 0.0 for c, _, _ in later), default=None
                ),
                "their ids": " ".join(str(c.id) for c, _, _ in later[:5]),
            }
        )
    return rows


def attribution(logs: Path, config: str, model: str | None = None) -> list[dict]:
    """:func:`attribute` over the run's checkpoints (``config``'s folder), version 0 being
    ``model`` (else the config's); writes ``attribution.json`` for the summary."""
    from trainer.backends.verl.config import load_config

    loaded = load_config(config)
    base = model or str(loaded.actor_rollout_ref.model.path)
    weights = version_weights(Path(str(loaded.trainer.default_local_dir)), base)
    rows = attribute(weights)
    (logs / "attribution.json").write_text(json.dumps(rows, indent=2))
    return rows


def _rows(sql: str) -> list[dict]:
    engine = make_engine(get_settings())
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(text(sql))]


def _table(rows: list[dict]) -> str:
    if not rows:
        return "(none)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _cell(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def summary(logs: Path) -> str:
    out = ["", "## Train steps (seconds: the loop's split of a step, verl's in the update)", ""]
    steps = _rows(
        "SELECT step, policy_version, rollouts_used, metrics FROM train_steps ORDER BY step"
    )
    timing = [
        {
            "step": s["step"],
            "version": s["policy_version"],
            "rollouts": s["rollouts_used"],
            **{
                k.removeprefix("time/").removeprefix("timing_s/"): v
                for k, v in sorted(s["metrics"].items())
                if k.startswith(("time/", "timing_s/"))
            },
        }
        for s in steps
    ]
    out.append(_table(timing))
    out += _gpu_time_section(logs, steps)
    out += [
        "## Served against the trainer's probabilities of the same tokens (per step: "
        "absolute difference over response tokens, mean and max; Pearson correlation)",
        "",
        _table(probability_rows(steps)),
    ]
    out += ["## Workers' LLM calls by the policy version that served them", ""]
    out.append(
        _table(
            _rows(
                "SELECT policy_version, count(*) AS calls, "
                "count(*) FILTER (WHERE response_token_ids IS NOT NULL) AS with_token_ids, "
                "count(*) FILTER (WHERE response_logprobs IS NOT NULL) AS with_logprobs, "
                # vLLM answers a request in flight when it pauses for a sync with "abort"
                "count(*) FILTER (WHERE finish_reason = 'abort') AS aborted, "
                "round(avg(latency_ms)::numeric, 1) AS mean_latency_ms, "
                # token ids are packed int32 (app/db/types.py)
                "sum(octet_length(response_token_ids) / 4) AS response_tokens, "
                "round(avg(octet_length(response_token_ids) / 4 * 1000.0 "
                "/ nullif(latency_ms, 0))::numeric, 1) AS tokens_per_s_per_call "
                "FROM llm_calls GROUP BY policy_version ORDER BY policy_version"
            )
        )
    )
    out += ["## Held-out evaluation (eval rollouts, greedy, by version)", ""]
    out.append(
        _table(
            _rows(
                "SELECT policy_version_max AS version, count(*) AS rollouts, "
                "round(avg(reward)::numeric, 3) AS mean_reward, "
                "round(avg(success::int)::numeric, 3) AS success "
                "FROM rollouts WHERE mode = 'eval' AND status = 'succeeded' "
                "GROUP BY policy_version_max ORDER BY 1"
            )
        )
    )
    attributed = logs / "attribution.json"
    out += [
        "## Calls by the weights that generated them (each scored under its version's and the "
        "next's: the closer wins)",
        "",
        _table(json.loads(attributed.read_text()))
        if attributed.exists()
        else "not measured: the run saved no Hugging Face weights per step (ATTRIBUTE=1)\n",
    ]
    out += ["## Rollouts by mode and status", ""]
    out.append(
        _table(
            _rows("SELECT mode, status, count(*) AS n FROM rollouts GROUP BY 1, 2 ORDER BY 1, 2")
        )
    )
    out += ["## Policy versions published", ""]
    out.append(
        _table(
            _rows(
                "SELECT version, status, base_url, base_model, created_at FROM policy_versions "
                "ORDER BY version"
            )
        )
    )
    endpoint = logs / "endpoint.log"
    if endpoint.exists():
        out += [
            "## The endpoint record in Redis, each change",
            "",
            "```",
            endpoint.read_text().strip(),
            "```",
            "",
        ]
    gpu = logs / "gpu.csv"
    if gpu.exists():
        used = [memory for _, memory, _ in gpu_samples(gpu.read_text())]
        if used:
            out.append(f"GPU memory used, peak: {max(used):.0f} MiB ({len(used)} samples)\n")
    trainer = logs / "trainer.log"
    if trainer.exists():
        rates = re.findall(r"generation throughput: ([\d.]+) tokens/s", trainer.read_text())
        if rates:
            out.append(
                f"vLLM generation throughput (its own log): max {max(map(float, rates))} "
                f"tokens/s over {len(rates)} reports\n"
            )
        startup = [
            line
            for line in trainer.read_text().splitlines()
            if "start-up: " in line or "verl's workers started in" in line
        ]
        out += ["## Start-up of verl's workers, by part", "", "```", *startup, "```", ""]
        errors = [
            line
            for line in trainer.read_text().splitlines()
            if re.search(r"Error|Traceback|FAILED", line)
            # verl's notes on engines it was not installed with
            and not re.search(r"engine is not available: ModuleNotFoundError", line)
        ]
        out += ["## Error lines of the trainer's log", "", "```", *errors[-30:], "```", ""]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    if argv[:1] == ["watch-endpoint"]:
        watch_endpoint()
    elif argv[:1] == ["summary"] and len(argv) == 2:
        print(summary(Path(argv[1])))
    elif argv[:1] == ["vllm-alone"] and len(argv) in (3, 4):
        print(json.dumps(vllm_alone(Path(argv[1]), argv[2], *argv[3:]), indent=2))
    elif argv[:1] == ["attribute"] and len(argv) in (3, 4):
        print(_table(attribution(Path(argv[1]), argv[2], *argv[3:])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
