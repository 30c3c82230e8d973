"""``wsrl report``: reward and success by policy version, from Postgres, as a PNG.

Train episodes come from the ``policy_performance`` view (episodes that ran to the end,
by the newest policy version they saw). Evaluations are drawn by *round* (the eval
rollouts queued together, e.g. by the trainer's ``--eval-every``), each at the version it
started on: the trainer moves on while a round plays, and splitting a round by version
would leave a few episodes per point and mix the starting weights with later ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from app.commands import database_session, fail
from app.core.intervals import mean_half_width, rate_half_width

console = Console(highlight=False)


# Train points are a few dozen episodes each, too noisy to read a trend from alone: they are
# drawn faintly, with their episode-weighted mean over this many versions on top.
SMOOTH_VERSIONS = 10


def smoothed(values: list[float], weights: list[int]) -> list[float]:
    """Trailing mean of ``values`` over ``SMOOTH_VERSIONS`` points, weighted by episodes."""
    out = []
    for i in range(len(values)):
        window = range(max(0, i - SMOOTH_VERSIONS + 1), i + 1)
        total = sum(weights[j] for j in window)
        out.append(sum(values[j] * weights[j] for j in window) / total if total else values[i])
    return out


def interval(row: dict[str, Any], key: str) -> float:
    """Half-width of the normal 95 % interval of a round's ``mean_reward`` or
    ``success_rate`` (binomial), from its episodes."""
    n = int(row["episodes"])
    if key == "success_rate":
        return rate_half_width(float(row["success_rate"]), n)
    return mean_half_width(float(row.get("reward_std") or 0.0), n)


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    """Two panels (mean reward, success rate) against the policy version, one line per
    kind: ``rows`` by version (train) and evaluation rounds (``mode`` = ``eval``).

    Returns the file written: ``out``, with ``.png`` added when it has no suffix (the
    format follows the suffix, as matplotlib's ``savefig`` does).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (reward_ax, success_ax) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for mode in sorted({r["mode"] for r in rows}):
        mine = [r for r in rows if r["mode"] == mode]
        versions = [r["policy_version"] for r in mine]
        episodes = sum(r["episodes"] for r in mine)
        label = f"{mode} ({episodes} episodes)"
        if mode == "eval":
            label = f"eval, held out ({len(mine)} rounds, {episodes} episodes)"
        for ax, key, scale in ((reward_ax, "mean_reward", 1.0), (success_ax, "success_rate", 100)):
            values = [scale * float(r[key]) for r in mine]
            if mode == "eval":
                ax.errorbar(
                    versions, values, yerr=[scale * interval(r, key) for r in mine],
                    marker="o", capsize=3, label=f"{label}, 95 % intervals",
                )  # fmt: skip
                continue
            if len(mine) < SMOOTH_VERSIONS:
                ax.plot(versions, values, marker="o", label=label)
                continue
            points = ax.plot(versions, values, marker=".", alpha=0.35, label=label)
            ax.plot(
                versions,
                smoothed(values, [r["episodes"] for r in mine]),
                color=points[0].get_color(),
                label=f"{mode}, mean of {SMOOTH_VERSIONS} versions",
            )
    reward_ax.set(xlabel="policy version", ylabel="mean reward", title="Reward by policy version")
    success_ax.set(xlabel="policy version", ylabel="success (%)", title="Success by policy version")
    for ax in (reward_ax, success_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    path = out if out.suffix else out.with_suffix(".png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
    return path


def report(
    out: Annotated[Path, typer.Option(help="PNG file to write.")] = Path("report.png"),
) -> None:
    """Plot reward and success by policy version (train and eval) into OUT."""
    from app.db.performance import evaluation_rounds, performance_rows, version_span

    with database_session() as session:
        rows = [r for r in performance_rows(session) if r["mode"] != "eval"]
        rounds = [{**r, "mode": "eval"} for r in evaluation_rounds(session)]
    if not rows and not rounds:
        raise fail(
            "no finished rollouts with a policy version yet; run "
            "`wsrl dev` (or workers + `wsrl train`) first"
        )
    try:
        written = plot(rows + rounds, out)
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}") from exc
    for row in rows + rounds:
        console.print(
            f"{row['mode']:5s} {version_span(row)}: {row['episodes']} episodes, "
            f"reward {float(row['mean_reward']):.3f}, success {float(row['success_rate']):.1%}"
        )
    console.print(f"wrote {written}")


def register(cli: typer.Typer) -> None:
    cli.command("report")(report)
