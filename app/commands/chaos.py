"""``wsrl chaos``: train under random faults across worker hosts, then check what must hold.

See :mod:`app.chaos.run` for the deployment and :mod:`app.chaos.faults` for the faults.
Needs root (the worker hosts are network namespaces). Exits 1 when an invariant fails.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.commands import fail

if TYPE_CHECKING:
    from app.chaos.run import RunSpec

console = Console(highlight=False, soft_wrap=True)


def parse_duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``5m`` or ``1h``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise typer.BadParameter(f"{text!r}: a duration such as 300, 300s, 5m or 1h")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def parse_every(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        every = (parse_duration(low), parse_duration(high or low))
    except typer.BadParameter as exc:
        raise typer.BadParameter(f"{text!r}: seconds between faults, LOW-HIGH (20-90)") from exc
    if every[0] <= 0 or every[1] < every[0]:
        raise typer.BadParameter(f"{text!r}: LOW-HIGH with 0 < LOW <= HIGH")
    return every


def chaos(
    duration: Annotated[
        str, typer.Option(help="How long faults are injected: 300, 5m, 1h.")
    ] = "5m",
    seed: Annotated[int, typer.Option(help="Seed of the faults' choice and order.")] = 0,
    hosts: Annotated[int, typer.Option(min=1, max=8, help="Worker hosts.")] = 2,
    every: Annotated[str, typer.Option(help="Seconds between faults, LOW-HIGH.")] = "20-90",
    faults: Annotated[
        bool, typer.Option("--faults/--no-faults", help="--no-faults: the same run, calm.")
    ] = True,
    eval_every: Annotated[int, typer.Option(help="Held-out round every N versions.")] = 20,
    eval_goals: Annotated[int, typer.Option(help="Test goals per held-out round.")] = 200,
    evaluate: Annotated[
        int,
        typer.Option(
            min=0,
            help="Score the starting weights with `wsrl eval` on N test goals under the "
            "faults, instead of training (compare with --no-faults).",
        ),
    ] = 0,
    settle: Annotated[
        str, typer.Option(help="How long what was enqueued may take to end after the faults.")
    ] = "5m",
    out: Annotated[
        Path | None, typer.Option(help="Folder of the run (default <data_dir>/chaos/<time>).")
    ] = None,
) -> None:
    """Train with the local backend on worker hosts while faults are injected; report."""
    from app.chaos.hosts import HostsUnavailable, check_available
    from app.chaos.run import RunSpec

    try:
        check_available()
    except HostsUnavailable as exc:
        raise fail(exc) from exc
    try:
        duration_s, settle_s = parse_duration(duration), parse_duration(settle)
        between = parse_every(every)
    except typer.BadParameter as exc:
        raise fail(exc, code=2) from exc
    try:
        spec = RunSpec(
            _out_dir(out), duration_s, seed, hosts, between, settle_s, faults, evaluate=evaluate
        )
        report = run_chaos(spec, (eval_every, eval_goals))
    except HostsUnavailable as exc:
        raise fail(exc) from exc
    failed = [name for name, violations in report["invariants"].items() if violations]
    if failed:
        raise fail(f"{len(failed)} invariants fail: {', '.join(failed)}")


def _out_dir(out: Path | None) -> Path:
    from app.config import get_settings

    if out is not None:
        return out.resolve()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (get_settings().data_dir / "chaos" / stamp).resolve()


def run_chaos(spec: RunSpec, rounds: tuple[int, int]) -> dict:
    """The run, its report printed and written to ``out/report.json`` and ``report.txt``."""
    from app.chaos.invariants import Window, check_all
    from app.chaos.report import by_kind, figures, recover, render, weights_check
    from app.chaos.run import Chaos
    from app.commands._run_options import as_flags
    from app.commands.dev import DEV_DEFAULTS
    from app.db.session import make_sessionmaker, session_scope
    from trainer.backends.local.entry import ensure_tiny_policy
    from trainer.config import RunConfig

    out = spec.out
    out.mkdir(parents=True, exist_ok=True)
    model = ensure_tiny_policy(out / "data")
    every_n, goals = rounds
    schedule = {**DEV_DEFAULTS, "schedule.eval_every": every_n, "schedule.eval_goals": goals}
    if spec.evaluate:
        schedule["local.enqueue"] = False
    spec.trainer_options = as_flags(schedule)
    run = Chaos(spec, model, _agent_env(out, model))
    began = datetime.now(UTC)
    console.print(
        f"chaos run in {out}: {spec.duration_s:.0f} s, seed {spec.seed}, {spec.hosts} worker hosts"
    )
    try:
        run.start()
        console.print("pipeline up; faults begin" if spec.faults else "pipeline up; no faults")
        run.inject()
        console.print("faults over; waiting for what was enqueued to end")
        until = run.settle()
        evaluation = run.evaluation()
        run.stop_trainer()
        window = Window(until, RunConfig().algorithm.max_staleness)
        with session_scope(make_sessionmaker(run.engine)) as session:
            invariants = check_all(session, run.redis, window)
        invariants["served_weights_are_their_checkpoints"] = weights_check(run.versions)
        with run.engine.connect() as conn:
            recover(conn, run.faults, run.parts.pids)
            numbers = figures(conn, until, began)
    finally:
        run.close()
    report = {
        "duration_s": spec.duration_s,
        "seed": spec.seed,
        "hosts": spec.hosts,
        "faults_on": spec.faults,
        "evaluation": evaluation,
        "faults": [_fault_row(f) for f in run.faults],
        "by_kind": by_kind(run.faults),
        "figures": numbers,
        "versions_checked": sum(1 for d in run.versions.values() if d["digest"]),
        "invariants": invariants,
    }
    text = render(report)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.txt").write_text(text + "\n")
    console.print(text)
    return report


def _fault_row(fault) -> dict:
    return {
        "kind": fault.kind,
        "target": fault.target,
        "began": fault.began.isoformat(),
        "ended": fault.ended.isoformat() if fault.ended else None,
        "recovered_s": fault.recovered_s,
        "notes": fault.notes,
    }


def _agent_env(out: Path, model: Path) -> dict[str, str]:
    """The agent settings ``wsrl dev`` gives its children for the tiny policy."""
    from app.commands.dev import _child_env
    from app.config import Settings

    env = _child_env(Settings(_env_file=None, data_dir=out / "data"), model) or {}
    return {k: v for k, v in env.items() if k.startswith("WSRL_AGENT_")}


def register(cli: typer.Typer) -> None:
    cli.command("chaos")(chaos)
