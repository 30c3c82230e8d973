"""``wsrl doctor``: the preflight of a training run, each failure with its fix.

The ``trainer-gpu`` Compose service runs it before ``wsrl train --backend verl``, so a
missing GPU, a wrong image, an unreachable service or settings the workers would not
play stop the run in seconds, not after minutes of Ray, FSDP and vLLM start-up. Exit
status 1 when any check fails.
"""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class Check:
    """One preflight finding; ``fix`` says what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def _check(name: str, probe: Callable[[], str], fix: str) -> Check:
    """Run ``probe`` (its return value is the detail); any exception is a failure."""
    try:
        return Check(name, True, probe())
    except Exception as exc:  # a preflight reports every failure, whatever it is
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)


# --- GPU stack ------------------------------------------------------------------------------


def needs_flash_attn(config) -> bool:
    """Whether verl's actor loads flash-attn under ``config``: padding removal, or the
    attention it asks transformers for (verl's default: ``flash_attention_2``). A host
    without flash-attn (the offline kit's) runs with ``sdpa`` and padding kept."""
    model = config.actor_rollout_ref.model
    attn = (model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")
    return bool(model.get("use_remove_padding")) or attn == "flash_attention_2"


def gpu_checks(flash_attn: bool = True) -> list[Check]:
    """GPU visible, driver and CUDA versions, and the GPU stack's imports (flash-attn only
    where the config uses it: :func:`needs_flash_attn`)."""

    def gpu() -> str:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible: the verl backend needs NVIDIA GPUs")
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        return (
            f"{torch.cuda.device_count()} x {', '.join(sorted(names))}, CUDA {torch.version.cuda}"
        )

    def driver() -> str:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        version = out.stdout.strip().splitlines()[0]
        if int(version.split(".")[0]) < 580:
            raise RuntimeError(f"driver {version} is older than R580, which CUDA 13 needs")
        return f"driver {version}"

    checks = [
        _check(
            "GPU",
            gpu,
            "run on a machine with an NVIDIA GPU; in Compose the trainer-gpu service needs "
            "the NVIDIA Container Toolkit (docker run --gpus all nvidia/cuda:13.0.0-base "
            "nvidia-smi must work)",
        ),
        _check(
            "NVIDIA driver",
            driver,
            "install driver R580 or newer (CUDA 13), or use CUDA forward compatibility",
        ),
    ]
    modules = [
        ("verl", "use the trainer image (docker/Dockerfile.trainer) or pip install verl==0.9.1"),
        ("vllm", "use the trainer image: vLLM as verl[vllm]==0.9.1 pins it"),
    ]
    if flash_attn:
        modules.append(
            (
                "flash_attn",
                "use the trainer image: flash-attn built for its torch and CUDA; or run "
                "without it: "
                "--override actor_rollout_ref.model.use_remove_padding=false "
                "--override +actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            )
        )
    for module, fix in modules:
        checks.append(_check(f"import {module}", _importer(module), fix))
    return checks


def _importer(module: str) -> Callable[[], str]:
    def probe() -> str:
        imported = importlib.import_module(module)
        return f"{module} {getattr(imported, '__version__', '')}".strip()

    return probe


# --- model, disk ----------------------------------------------------------------------------


def model_check(path: str) -> Check:
    """A local checkpoint folder, or a Hub model in the cache (else it will be downloaded)."""

    def probe() -> str:
        local = Path(path)
        if local.is_dir():
            if not (local / "config.json").is_file():
                raise FileNotFoundError(f"{local} has no config.json")
            return f"local checkpoint {local}"
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return f"{path} in the Hugging Face cache"
        return f"{path} not cached: downloaded at start (needs network)"

    return _check(
        "model",
        probe,
        "point actor_rollout_ref.model.path at a Hugging Face model id or a checkpoint "
        "folder with config.json; mount the cache at HF_HOME",
    )


def disk_check(config: Any, free_bytes: int | None = None) -> Check:
    from trainer.backends.verl.config import check_checkpoint_disk

    def probe() -> str:
        check_checkpoint_disk(config, free_bytes)
        return f"room for the checkpoints in {config.trainer.default_local_dir}"

    return _check("checkpoint disk", probe, "see the detail")


# --- services and settings ------------------------------------------------------------------


def service_checks(settings: Any, split: str) -> list[Check]:
    """Postgres (migrated, goals present), Redis and the env server reachable."""
    from sqlalchemy import func, select, text
    from sqlalchemy.exc import ProgrammingError

    from app.core.env_client import EnvClient
    from app.db.models import Goal
    from app.db.session import make_engine

    def postgres() -> str:
        engine = make_engine(settings)
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        finally:
            engine.dispose()
        return "reachable"

    def goals() -> str:
        engine = make_engine(settings)
        try:
            with engine.connect() as connection:
                count = connection.scalar(
                    select(func.count()).select_from(Goal).where(Goal.split == split)
                )
        except ProgrammingError as exc:
            raise LookupError("the database is not migrated: run `wsrl db upgrade`") from exc
        finally:
            engine.dispose()
        if not count:
            raise LookupError(f"no {split!r} goals in Postgres")
        return f"{count} {split!r} goals"

    def redis() -> str:
        from redis import Redis

        client = Redis.from_url(settings.resolved_redis_url(), socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()
        return "reachable"

    def env() -> str:
        with EnvClient(settings.env_url, timeout_s=5.0) as client:
            health = client.health()  # 503 (an error here) when its tagger failed to load
        return f"{settings.env_url}: {health.get('goals')} goals, {_tagger_text(health)}"

    return [
        _check(
            "Postgres",
            postgres,
            "start it (make services, or the postgres Compose service), set "
            "WSRL_DATABASE_URL, then `wsrl db upgrade`",
        ),
        _check(
            "Redis",
            redis,
            "start it (make services, or the redis Compose service), set WSRL_REDIS_URL",
        ),
        _check(
            "env server",
            env,
            "start it (`wsrl env serve`, or the webshop Compose service), set WSRL_ENV_URL",
        ),
        _check(
            "goals",
            goals,
            "`wsrl enqueue --split SPLIT --count 1` or `wsrl export goals` loads them from "
            "the env server (the trainer does too on its first request)",
        ),
    ]


def _tagger_text(health: dict[str, Any]) -> str:
    """The reward's noun tagger as the env server's ``/health`` names it."""
    tagger = health.get("noun_tagger")
    if not isinstance(tagger, dict):
        return "reward noun tagger not reported (an env server older than this wsrl)"
    if tagger.get("exact"):
        return f"reward noun tagger {tagger.get('name')} (the original's; {tagger.get('state')})"
    return (
        f"reward noun tagger {tagger.get('name')} (approximate, chosen with "
        "WSRL_NOUN_TAGGER: rewards differ from the original's on about 1 % of purchases)"
    )


def settings_check(settings: Any, config: Any, config_name: str) -> Check:
    """No explicit agent setting of this host contradicts the protocol the config trains
    for (the trainer publishes it; workers play it)."""
    from trainer.backends.verl.config import agent_protocol_of

    def probe() -> str:
        protocol = agent_protocol_of(config, settings, config_name)
        return f"published with each version: {protocol.describe()}"

    return _check("agent settings", probe, "see the detail")


def run_checks(backend: str, config_name: str, overrides: Sequence[str] = ()) -> list[Check]:
    from app.config import get_settings

    settings = get_settings()
    checks: list[Check] = []
    split = "train"
    if backend == "verl":
        from trainer.backends.verl.config import load_config

        config = load_config(config_name, overrides)
        split = str(config.webshop.goal_split)
        checks += gpu_checks(flash_attn=needs_flash_attn(config))
        checks.append(model_check(str(config.actor_rollout_ref.model.path)))
        checks.append(disk_check(config))
        checks.append(settings_check(settings, config, config_name))
    checks += service_checks(settings, split)
    return checks


def print_checks(checks: Sequence[Check]) -> None:
    """One line per check; a failed one with its fix below."""
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = "[green]ok  [/green]" if check.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {check.name:<{width}}  {check.detail}")
        if not check.ok:
            console.print(f"     {'':<{width}}  fix: {check.fix}")


def doctor(
    backend: Annotated[str, typer.Option(help="verl (GPU) or local (CPU).")] = "verl",
    config: Annotated[str, typer.Option(help="verl config: smoke, fast, qwen or qwen3b.")] = "fast",
) -> None:
    """Check that a training run can start: GPU stack, model, disk, services, settings."""
    if backend not in ("verl", "local"):
        console.print(f"[red]Error:[/red] unknown backend {backend!r}: use verl or local")
        raise typer.Exit(2)
    try:
        checks = run_checks(backend, config)
    except ValueError as exc:  # an unknown or invalid verl config
        console.print(f"[red]Error:[/red] {exc}")
        raise typer.Exit(1) from exc
    print_checks(checks)
    failed = [c for c in checks if not c.ok]
    console.print(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    if failed:
        raise typer.Exit(1)


def register(cli: typer.Typer) -> None:
    cli.command("doctor")(doctor)
