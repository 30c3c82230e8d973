"""``wsrl env serve`` and ``wsrl env babyai``: environments over HTTP (they join the
``env`` group)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import typer

from app.commands import fail
from app.commands.env import env_cli

logger = logging.getLogger(__name__)


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(3000, "--port", min=1, max=65535, help="Port to listen on."),
    data: Path | None = typer.Option(
        None, "--data", help="Folder with the original files; default: the generated catalog."
    ),
    goals: str | None = typer.Option(None, "--goals", help="synthetic or human."),
    products: int | None = typer.Option(
        None,
        "--products",
        min=1,
        help="Serve the generated catalog with N products (generated once, cached).",
    ),
    session_ttl: float = typer.Option(
        600.0, "--session-ttl", min=0.001, help="Idle seconds before a session expires."
    ),
    max_sessions: int = typer.Option(
        10_000, "--max-sessions", min=1, help="Live sessions at most (429 beyond)."
    ),
    max_sessions_per_client: int | None = typer.Option(
        None,
        "--max-sessions-per-client",
        min=1,
        help="Live sessions one client address may hold (429 beyond); default half of "
        "--max-sessions.",
    ),
    unmatched: str | None = typer.Option(
        None,
        "--unmatched",
        help="An AGL reset whose instruction matches no goal: random (a random goal) or "
        "refuse (409); default WSRL_ENV_UNMATCHED (random).",
    ),
) -> None:
    """Serve the env: native API at /, AgentGym routes at /agentgym, AGL routes at /agl.

    One process holds every session in memory, so there is no --workers: a session's
    requests must all reach the process that holds it.
    """
    from rich.console import Console

    from app.config import get_settings
    from app.webshop.env import WebShopEnv
    from app.webshop.nouns import TaggerUnavailableError
    from app.webshop.server.app import create_app
    from app.webshop.server.runner import serve as run_server
    from app.work_progress import WorkProgress

    settings = get_settings()
    goal_kind = goals or settings.env_goals
    if goal_kind not in ("synthetic", "human"):
        raise typer.BadParameter(f"unknown goal set {goal_kind!r}; expected synthetic or human")
    if data is not None and products is not None:
        raise typer.BadParameter("give --data or --products, not both")
    unmatched = unmatched or settings.env_unmatched
    if unmatched not in ("random", "refuse"):
        raise typer.BadParameter(
            f"{unmatched!r}: expected random or refuse", param_hint="--unmatched"
        )
    data_dir = None if products is not None else (data or settings.env_data)
    started = time.perf_counter()
    try:
        with WorkProgress(Console(soft_wrap=True), settings.progress_every_s) as progress:
            env = WebShopEnv.load(
                data_dir=data_dir,
                goals=goal_kind,
                num_products=products,
                cache_dir=settings.data_dir / "catalog",
                noun_tagger=settings.noun_tagger,
                progress=progress.update,
            )
    except TaggerUnavailableError as exc:
        raise fail(exc) from exc
    except FileNotFoundError as exc:
        raise fail(
            f"{exc}: --data (or WSRL_ENV_DATA) names a folder with the original WebShop's "
            "data files; without it the generated catalog is served"
        ) from exc
    logger.info(
        "loaded %d products and %d %s goals from %s in %.2f s; reward noun tagger: %s",
        env.num_products,
        len(env.goals),
        goal_kind,
        data_dir or f"the generated catalog ({products or 'default size'})",
        time.perf_counter() - started,
        env.nouns.name if env.nouns.exact else f"{env.nouns.name} (approximate, chosen)",
    )
    app = create_app(
        env,
        session_ttl_s=session_ttl,
        max_sessions=max_sessions,
        max_sessions_per_client=max_sessions_per_client,
        token=settings.env_token,
        unmatched=unmatched,
    )
    logger.info("serving the WebShop env on http://%s:%d", host, port)
    run_server(app, host=host, port=port)


def babyai(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(3100, "--port", min=1, max=65535, help="Port to listen on."),
    max_turns: int = typer.Option(
        50, "--max-turns", min=1, help="Actions per episode before it ends unsolved."
    ),
    max_envs: int = typer.Option(10_000, "--max-envs", min=1, help="Open ids at once (429)."),
    session_ttl: float = typer.Option(
        3600.0, "--session-ttl", min=0.001, help="Idle seconds before an id is closed."
    ),
) -> None:
    """Serve BabyAI (minigrid's levels, in words) over AgentGym's BabyAI protocol.

    AgentGym's BabyAI client, or any client of that protocol, plays it at
    http://HOST:PORT (/create, /reset, /step, /observation, /close).
    """
    from app.babyai.server import create_app
    from app.webshop.server.runner import serve as run_server

    app = create_app(max_turns=max_turns, max_envs=max_envs, session_ttl_s=session_ttl)
    logger.info("serving BabyAI (AgentGym's protocol) on http://%s:%d", host, port)
    run_server(app, host=host, port=port)


def register(cli: typer.Typer) -> None:
    """Adds ``serve`` and ``babyai`` to the ``env`` group that :mod:`app.commands.env`
    registers."""
    env_cli.command("serve")(serve)
    env_cli.command("babyai")(babyai)
