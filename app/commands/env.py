"""``wsrl env``: the environments (WebShop's catalog, reference baselines, the servers).

``env_cli`` is importable so that other modules can add commands to the same group.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import typer
from rich.console import Console

from app.webshop.success import success_rate

console = Console(soft_wrap=True)

env_cli = typer.Typer(
    help="The environments: WebShop's catalog and baselines, the env servers.",
    no_args_is_help=True,
)


def register(cli: typer.Typer) -> None:
    cli.add_typer(env_cli, name="env")


@env_cli.command("catalog")
def catalog(
    products: int = typer.Option(2000, "--products", min=1, help="Number of products."),
    seed: int = typer.Option(0, "--seed", help="Generator seed (same seed, same catalog)."),
    out: Path = typer.Option(..., "--out", help="Folder to write the three JSON files into."),
    human_goals: bool = typer.Option(True, help="Also write items_human_ins.json."),
) -> None:
    """Generate a catalog in the original WebShop file formats."""
    from app.config import get_settings
    from app.webshop.catalog_gen import write_catalog
    from app.work_progress import WorkProgress

    out.mkdir(parents=True, exist_ok=True)
    with WorkProgress(console, get_settings().progress_every_s) as progress:
        paths = write_catalog(
            out, products, seed=seed, human_goals=human_goals,
            progress=lambda done, total: progress.update("products", done, total),
        )  # fmt: skip
    for kind, path in paths.items():
        typer.echo(f"{kind}: {path}")


@env_cli.command("baseline")
def baseline(
    agent: str = typer.Option("rule", "--agent", help="oracle or rule."),
    split: str = typer.Option("test", "--split", help="test, eval or train."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="First N goals of the split."),
    data: Path | None = typer.Option(
        None, "--data", help="Folder with the original files; default: the generated catalog."
    ),
    goals: str | None = typer.Option(None, "--goals", help="synthetic or human."),
    max_steps: int = typer.Option(15, "--max-steps", min=1, help="Steps per episode."),
) -> None:
    """Score a reference agent the WebShop way: score = 100 x mean reward, success = reward 1."""
    from app.config import get_settings
    from app.webshop.agents import POLICIES, run_agent
    from app.webshop.env import WebShopEnv
    from app.work_progress import WorkProgress

    if agent not in POLICIES:
        raise typer.BadParameter(f"unknown agent {agent!r}; expected {', '.join(POLICIES)}")
    settings = get_settings()
    goal_kind = goals or settings.env_goals
    if goal_kind not in ("synthetic", "human"):
        raise typer.BadParameter(f"unknown goal set {goal_kind!r}; expected synthetic or human")
    if split not in ("test", "eval", "train"):
        raise typer.BadParameter(f"unknown split {split!r}; expected test, eval or train")
    with WorkProgress(console, settings.progress_every_s) as progress:
        env = WebShopEnv.load(
            data_dir=data or settings.env_data,
            goals=goal_kind,
            cache_dir=settings.data_dir / "catalog",
            noun_tagger=settings.noun_tagger,
            progress=progress.update,
        )
        ids = env.goal_ids(split)[:limit] if limit else env.goal_ids(split)
        if not ids:
            raise typer.BadParameter(f"split {split!r} has no goals in this catalog")
        policy = POLICIES[agent]
        rewards: list[float] = []
        phase = f"{agent} on {split}"
        progress.update(phase, 0, len(ids), "episodes")
        for goal_index in ids:
            rewards.append(run_agent(env, policy, goal_index, max_steps).reward)
            progress.update(phase, len(rewards), len(ids), "episodes")
    score = 100 * statistics.fmean(rewards)
    success = 100 * success_rate(rewards)
    typer.echo(f"agent={agent} goals={goal_kind} split={split} episodes={len(rewards)}")
    typer.echo(f"score={score:.1f} success={success:.1f}%")
