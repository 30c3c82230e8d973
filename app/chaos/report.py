"""The chaos run's report: faults with their recovery, rollouts lost and duplicated,
training made, the served weights against their checkpoints, and the invariants.

A fault's recovery is the time from its target's return (the process started again, the
service answering, the link mended) until the pipeline made progress: for the trainer, a
new version published; for a worker host (its worker killed, its link cut or slowed), an
attempt of that host's worker succeeding; for anything else, any attempt succeeding.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from app.chaos.faults import ON_A_HOST, Fault
from app.db.performance import evaluation_rounds


def recover(conn: Connection, faults: Sequence[Fault], pids: Mapping[str, Sequence[int]]) -> None:
    """Fills each fault's ``recovered_s`` (None: no progress after it)."""
    for fault in faults:
        if fault.ended is None:
            continue
        if fault.kind == "trainer":
            sql = "SELECT min(created_at) FROM policy_versions WHERE created_at > :after"
            params: dict[str, Any] = {}
        elif fault.kind in ON_A_HOST:
            sql = (
                "SELECT min(finished_at) FROM attempts WHERE status = 'succeeded' "
                "AND finished_at > :after AND worker LIKE ANY(:workers)"
            )
            params = {"workers": [f"%:{pid}" for pid in pids.get(f"worker-{fault.target}", [])]}
        else:
            sql = (
                "SELECT min(finished_at) FROM attempts WHERE status = 'succeeded' "
                "AND finished_at > :after"
            )
            params = {}
        # a restarted trainer publishes before it says it is ready (the fault's end)
        after = fault.began if fault.kind == "trainer" else fault.ended
        progress = conn.execute(text(sql), {"after": after, **params}).scalar()
        back = max((progress - fault.ended).total_seconds(), 0.0) if progress else None
        fault.recovered_s = back


def figures(conn: Connection, until: datetime, began: datetime) -> dict[str, Any]:
    """Counts over the rollouts enqueued in the run's window (``began`` .. ``until``)."""
    window = {"until": until}
    rows = conn.execute(
        text(
            "SELECT r.status, count(*), "
            "count(*) FILTER (WHERE (SELECT count(*) FROM attempts a WHERE a.rollout_id = r.id "
            "AND a.status = 'succeeded') > 1) "
            "FROM rollouts r WHERE r.created_at < :until GROUP BY r.status"
        ),
        window,
    ).all()
    by_status = {str(status): count for status, count, _ in rows}
    attempts = dict(
        conn.execute(
            text(
                "SELECT a.status, count(*) FROM attempts a JOIN rollouts r ON r.id = a.rollout_id "
                "WHERE r.created_at < :until GROUP BY a.status"
            ),
            window,
        ).all()
    )
    minutes = max((until - began).total_seconds() / 60, 1e-9)
    return {
        "rollouts": sum(by_status.values()),
        "by_status": by_status,
        "lost": by_status.get("queued", 0) + by_status.get("running", 0),
        "duplicated": sum(dup for _, _, dup in rows),
        "attempts": {str(k): v for k, v in attempts.items()},
        "succeeded_per_minute": by_status.get("succeeded", 0) / minutes,
        "train_steps": conn.execute(text("SELECT count(*) FROM train_steps")).scalar(),
        "versions": conn.execute(text("SELECT count(*) FROM policy_versions")).scalar(),
        "held_out_rounds": [
            {k: r[k] for k in ("policy_version", "episodes", "success_rate", "mean_reward")}
            for r in evaluation_rounds(conn)
        ],
    }


def weights_check(versions: Mapping[int, Mapping[str, str | None]]) -> list[str]:
    """Versions whose served weights differ from their checkpoint's."""
    return [
        f"version {v}: served {d['served']} but {d['checkpoint']} holds {d['digest']}"
        for v, d in sorted(versions.items())
        if d["digest"] is not None and d["digest"] != d["served"]
    ]


def by_kind(faults: Sequence[Fault]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Fault]] = defaultdict(list)
    for fault in faults:
        groups[fault.kind].append(fault)
    out = {}
    for kind, group in sorted(groups.items()):
        times = [f.recovered_s for f in group if f.recovered_s is not None]
        down = [(f.ended - f.began).total_seconds() for f in group if f.ended is not None]
        out[kind] = {
            "count": len(group),
            "down_s": max(down) if down else None,
            "recovered": len(times),
            "p50_s": statistics.median(times) if times else None,
            "max_s": max(times) if times else None,
        }
    return out


def render(report: Mapping[str, Any]) -> str:
    """The report as plain text lines (the JSON file holds everything)."""
    f = report["figures"]
    lines = [
        f"chaos: {report['duration_s']:.0f} s, seed {report['seed']}, "
        f"{report['hosts']} worker hosts, {len(report['faults'])} faults"
        + ("" if report["faults_on"] else " (--no-faults)"),
    ]
    for kind, k in report["by_kind"].items():
        p50 = "-" if k["p50_s"] is None else f"{k['p50_s']:.1f}"
        worst = "-" if k["max_s"] is None else f"{k['max_s']:.1f}"
        lines.append(
            f"  {kind:17} x{k['count']}: down up to {k['down_s']:.0f} s; progress again "
            f"{k['recovered']}/{k['count']} times, p50 {p50} s, max {worst} s after its return"
        )
    lines.append(
        f"rollouts {f['rollouts']} {json.dumps(f['by_status'], sort_keys=True)}: "
        f"lost {f['lost']}, duplicated {f['duplicated']}; "
        f"{f['succeeded_per_minute']:.1f} succeeded a minute; attempts "
        f"{json.dumps(f['attempts'], sort_keys=True)}"
    )
    lines.append(
        f"train steps {f['train_steps']}, policy versions {f['versions']}; weights of "
        f"{report['versions_checked']} served versions hashed against their checkpoints"
    )
    for r in f["held_out_rounds"]:
        lines.append(
            f"  held-out round at v{r['policy_version']}: {r['episodes']} episodes, "
            f"success {float(r['success_rate'] or 0):.3f}, "
            f"mean reward {float(r['mean_reward'] or 0):.3f}"
        )
    if report["evaluation"]:
        lines.append(f"wsrl eval of the starting weights: {report['evaluation']}")
    for name, violations in report["invariants"].items():
        lines.append(f"{'holds' if not violations else 'FAILS'}: {name}")
        lines.extend(f"    {v}" for v in violations)
    return "\n".join(lines)
