"""Export throughput and memory: ``wsrl export trajectories`` over N stored trajectories.

Creates a scratch database on the server of ``--database-url`` (default: the settings'),
migrates it, bulk-loads ``--trajectories`` succeeded rollouts in GRPO groups of
``--group-size`` (each one attempt with ``--steps`` steps and as many LLM calls,
``--prompt-tokens`` / ``--response-tokens`` token ids per call; a group's episodes share
their first prompt, reply differently and get rewards 0, 0.25, ... 1) with COPY, then runs
each export as its own ``wsrl export`` process and prints rows/s and the process's peak RSS
(its ``VmHWM``, read as it exits): JSONL, Parquet, Parquet with token ids, and a ``--format hf``
dataset folder of each form (trajectories, messages, preferences: one pair per group).
The database is dropped at the end.

    python benchmarks/export.py                          # 100,000 trajectories
    python benchmarks/export.py --trajectories 1000000   # the figure in docs/benchmarks.md
    python benchmarks/export.py --trajectories 10000     # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import admin_url, scratch_database  # noqa: E402

from app.config import get_settings  # noqa: E402
from app.db import migrate  # noqa: E402

GOALS = 1000
# Runs `wsrl` and, as it exits, writes its peak RSS (VmHWM: its own address space's high
# water mark) to stderr. Not wait4's ru_maxrss: Linux carries the forking parent's peak
# over exec, so every export would show this script's size after the load (218 MiB at 1M).
WSRL_WITH_PEAK = """
import atexit, re, sys
from pathlib import Path
def peak():
    status = Path("/proc/self/status").read_text()
    sys.stderr.write("\\npeak-rss-kib " + re.search(r"VmHWM:\\s+(\\d+)", status).group(1) + "\\n")
atexit.register(peak)
sys.argv[0] = "wsrl"
from app.cli import main
main()
"""


def load(
    libpq: str,
    trajectories: int,
    steps: int,
    prompt_tokens: int,
    response_tokens: int,
    group_size: int,
) -> None:
    """COPY goals, rollouts, attempts, steps and llm_calls (explicit attempt ids)."""
    prompt = np.arange(prompt_tokens, dtype="<i4").tobytes()
    response = np.arange(response_tokens, dtype="<i4").tobytes()
    logprobs = np.full(response_tokens, -0.5, dtype="<f4").tobytes()
    parts = json.dumps({"r_type": 1.0, "r_att": 0.5})
    with psycopg.connect(libpq) as conn, conn.cursor() as cur:
        with cur.copy("COPY goals (id, split, instruction, asin) FROM STDIN") as copy:
            for g in range(GOALS):
                copy.write_row((g, "train", f"i need item {g} under 40 dollars", f"B{g:09d}"))
        rollout_cols = (
            "id, goal_id, group_id, mode, status, attempts, reward, success, num_steps, "
            "policy_version_min, policy_version_max, reward_parts"
        )
        rollout_cols += ", sample_index"
        groups = [uuid.uuid4() for _ in range(-(-trajectories // group_size))]
        with cur.copy(f"COPY rollouts ({rollout_cols}) FROM STDIN") as rollouts:
            ids = [uuid.uuid4() for _ in range(trajectories)]
            for i, rid in enumerate(ids):
                group, sample = divmod(i, group_size)
                reward = (i % 5) / 4
                rollouts.write_row(
                    (rid, group % GOALS, groups[group], "train", "succeeded", 1, reward,
                     reward == 1.0, steps, i % 10, i % 10, parts, sample)
                )  # fmt: skip
        with cur.copy("COPY attempts (id, rollout_id, number, status, reward) FROM STDIN") as att:
            for i, rid in enumerate(ids, 1):
                att.write_row((i, rid, 1, "succeeded", 1.0))
        with cur.copy("COPY steps (attempt_id, index, action, observation) FROM STDIN") as st:
            for a in range(1, trajectories + 1):
                for s in range(steps):
                    st.write_row((a, s, f"click[item {s}]", "WebShop [SEP] page"))
        call_cols = (
            "attempt_id, index, policy_version, request_messages, response_text, "
            "prompt_token_ids, response_token_ids, response_logprobs, finish_reason"
        )
        with cur.copy(f"COPY llm_calls ({call_cols}) FROM STDIN") as calls:
            for a in range(1, trajectories + 1):
                group, sample = divmod(a - 1, group_size)
                for s in range(steps):
                    # a group's first prompt is shared: the turn its preference pair is from
                    seen = f"group {group}" if s == 0 else f"episode {a} step {s}"
                    messages = json.dumps(
                        [
                            {"role": "system", "content": "You are a shopping agent."},
                            {"role": "user", "content": f"Instruction: item {seen}"},
                        ]
                    )
                    calls.write_row(
                        (a, s, a % 10, messages, f"click[item {sample} {s}]", prompt,
                         response, logprobs, "stop")
                    )  # fmt: skip
        conn.commit()
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("ANALYZE")  # what autovacuum does soon after a bulk load


def run_export(database_url: str, args: list[str], code: int = 0) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of one ``wsrl export`` process that exits ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSRL_")}
    env["WSRL_DATABASE_URL"] = database_url
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", WSRL_WITH_PEAK, "export", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate()
    elapsed = time.perf_counter() - started
    peak = re.search(r"^peak-rss-kib (\d+)$", err.decode(), re.M)
    if proc.returncode != code or peak is None:
        raise RuntimeError(f"export {args} failed: {err.decode()[-2000:]}")
    return elapsed, int(peak.group(1)) / 1024, out.decode().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=3, help="Steps (and LLM calls) each.")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--response-tokens", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8, help="Rollouts per GRPO group.")
    parser.add_argument("--database-url", default=None, help="Server for the scratch db.")
    args = parser.parse_args()

    server_url = args.database_url or get_settings().resolved_database_url()
    with scratch_database(server_url, "wsrl_bench_export") as database_url:
        migrate.upgrade(database_url)
        started = time.perf_counter()
        load(
            admin_url(database_url),
            args.trajectories,
            args.steps,
            args.prompt_tokens,
            args.response_tokens,
            args.group_size,
        )
        load_s = time.perf_counter() - started
        rows = args.trajectories * (2 + 2 * args.steps)
        print(
            f"loaded {args.trajectories} trajectories ({rows} rows, {args.steps} steps + "
            f"{args.steps} calls each) in {load_s:.1f}s = {rows / load_s:,.0f} rows/s (COPY)"
        )
        with tempfile.TemporaryDirectory() as tmp:
            base_s, base_rss, _ = run_export(
                database_url,
                ["trajectories", "--min-reward", "9", "--out", str(Path(tmp) / "none.jsonl")],
                code=1,  # nothing matches: an error, no file
            )
            print(f"process start + empty export: {base_s:.1f}s, {base_rss:.0f} MiB (subtracted)")
            runs = [
                ("jsonl", []),
                ("parquet", []),
                ("parquet", ["--tokens"]),
                ("hf", ["--form", "trajectories"]),
                ("hf", ["--form", "messages"]),
                ("hf", ["--form", "preferences"]),
            ]
            for fmt, extra in runs:
                out = Path(tmp) / f"t-{fmt}-{len(extra)}-{extra[-1] if extra else ''}"
                cmd = ["trajectories", "--format", fmt, "--out", str(out), *extra]
                seconds, rss, stdout = run_export(database_url, cmd)
                seconds = max(seconds - base_s, 1e-3)
                files = [out] if out.is_file() else [p for p in out.rglob("*") if p.is_file()]
                size = sum(p.stat().st_size for p in files) / 2**20
                rows = stdout.splitlines()[-1].split(" to ")[0].removeprefix("wrote ")
                print(
                    f"export trajectories {fmt:7s} {' '.join(extra):20s}: {seconds:6.1f}s  "
                    f"{args.trajectories / seconds:9,.0f} trajectories/s  peak RSS "
                    f"{rss:6.0f} MiB  {size:7.1f} MiB  ({rows})",
                    flush=True,
                )
                if out.is_dir():
                    shutil.rmtree(out)
                else:
                    out.unlink()
            seconds, rss, _ = run_export(
                database_url, ["goals", "--format", "parquet", "--out", str(Path(tmp) / "g.pq")]
            )
            print(f"export goals parquet ({GOALS} goals): {seconds:.1f}s  peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
