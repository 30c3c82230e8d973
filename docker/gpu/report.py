"""The GPU first run's report (docker/gpu/first-run.sh), from what the run recorded.

    python docker/gpu/report.py watch-endpoint   # log each endpoint record Redis holds
    python docker/gpu/report.py summary LOGS     # markdown: steps, versions, eval, GPU

Reads the project's settings (``WSRL_*``) for Postgres and Redis, as every process does.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

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
            print(f"{time.strftime('%H:%M:%S')} {record.decode() if record else None}", flush=True)
            last = record
        time.sleep(poll_s)


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
    out += ["## Workers' LLM calls by the policy version that served them", ""]
    out.append(
        _table(
            _rows(
                "SELECT policy_version, count(*) AS calls, "
                "count(*) FILTER (WHERE response_token_ids IS NOT NULL) AS with_token_ids, "
                "count(*) FILTER (WHERE response_logprobs IS NOT NULL) AS with_logprobs, "
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
        used = [int(r.split(",")[0]) for r in gpu.read_text().splitlines() if re.match(r"^\d+,", r)]
        if used:
            out.append(f"GPU memory used, peak: {max(used)} MiB ({len(used)} samples)\n")
    trainer = logs / "trainer.log"
    if trainer.exists():
        rates = re.findall(r"generation throughput: ([\d.]+) tokens/s", trainer.read_text())
        if rates:
            out.append(
                f"vLLM generation throughput (its own log): max {max(map(float, rates))} "
                f"tokens/s over {len(rates)} reports\n"
            )
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
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
