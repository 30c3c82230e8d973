"""``wsrl scripted-llm``: the scripted OpenAI-compatible LLM server (a test stand-in)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True)


def scripted_llm(
    policy: Annotated[
        str,
        typer.Option(
            help="oracle (knows the goal), oracle-long (the oracle, buying on step --steps: "
            "for benchmarks with fixed-length episodes) or rule."
        ),
    ] = "oracle",
    steps: Annotated[
        int, typer.Option(min=1, help="The step on which oracle-long buys (when it can).")
    ] = 10,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8001,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    latency_ms: Annotated[float, typer.Option(help="Added to every call.")] = 0.0,
    data: Annotated[Path | None, typer.Option(help="Folder with the original data files.")] = None,
    products: Annotated[
        int | None, typer.Option(help="Size of the generated catalog (when no --data).")
    ] = None,
    goals: Annotated[
        str | None, typer.Option(help="synthetic or human: the env server's goal set.")
    ] = None,
    model: Annotated[str, typer.Option(help="Model name it serves.")] = "policy",
    token_ids: Annotated[
        bool, typer.Option(help="Return vLLM token ids when asked (off: untrainable calls).")
    ] = True,
    fault: Annotated[
        str,
        typer.Option(help="Start with a fault: ok, error_5xx, timeout, garbage, invalid_action."),
    ] = "ok",
    fault_count: Annotated[
        int | None, typer.Option(help="Requests the starting fault affects (unset: all).")
    ] = None,
    timeout_s: Annotated[float, typer.Option(help="How long a 'timeout' fault hangs.")] = 600.0,
) -> None:
    """Serve the oracle or rule policy over the OpenAI chat protocol, with token ids.

    The oracle finds its goal by the prompt's instruction in the same catalog as the env
    server: start both with the same --data / --products / --goals.
    """
    from app.config import get_settings
    from app.scripted_llm import create_app
    from app.scripted_llm.app import POLICIES
    from app.scripted_llm.faults import FaultMode
    from app.webshop.env import WebShopEnv
    from app.webshop.server.runner import serve

    if policy not in POLICIES:
        err_console.print(f"[red]Error:[/red] --policy must be one of {', '.join(POLICIES)}")
        raise typer.Exit(2)
    if fault not in {m.value for m in FaultMode}:
        modes = ", ".join(m.value for m in FaultMode)
        err_console.print(f"[red]Error:[/red] --fault must be one of {modes}")
        raise typer.Exit(2)
    if data is not None and products is not None:
        err_console.print("[red]Error:[/red] give --data or --products, not both")
        raise typer.Exit(2)
    settings = get_settings()
    env = None
    if policy in ("oracle", "oracle-long"):
        env = WebShopEnv.load(
            data_dir=None if products is not None else (data or settings.env_data),
            goals=goals or settings.env_goals,
            num_products=products,
            cache_dir=settings.data_dir / "catalog",
            noun_tagger=settings.noun_tagger,
        )
    app = create_app(
        policy,
        env,
        latency_ms,
        model=model,
        token_ids=token_ids,
        fault=fault,
        fault_count=fault_count,
        timeout_s=timeout_s,
        steps=steps,
    )
    serve(app, host=host, port=port)


def register(cli: typer.Typer) -> None:
    cli.command("scripted-llm")(scripted_llm)
