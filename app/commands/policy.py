"""``wsrl policy bootstrap``: the tiny CPU policy, warm-started on fair demonstrations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.db.lifecycle import RolloutStart

if TYPE_CHECKING:
    from app.webshop.env import WebShopEnv

policy_cli = typer.Typer(
    help="The bundled tiny policy (a small Qwen2 model built locally), evaluations, LoRA merges."
)
console = Console(soft_wrap=True)


@policy_cli.command("bootstrap")
def bootstrap_command(
    out: Annotated[
        Path | None, typer.Option(help="Checkpoint folder; default <data_dir>/policy/tiny-SEED.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of data order and initialisation.")] = 0,
    episodes: Annotated[
        int | None, typer.Option(min=1, help="Demonstration episodes (default 200).")
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="Passes over the demonstrations (default 6).")
    ] = None,
    hidden: Annotated[int | None, typer.Option(min=8, help="Hidden size (default 128).")] = None,
    layers: Annotated[int | None, typer.Option(min=1, help="Transformer blocks (default 3).")] = (
        None
    ),
    vocab: Annotated[
        int | None, typer.Option(min=300, help="BPE vocabulary, ids on top (default 8192).")
    ] = None,
    result_choice: Annotated[
        str,
        typer.Option(
            help="Result the demonstrator opens: first (the best-ranked: 33.9 % held-out "
            "success before any RL, docs/decisions/0039) or random (RL learns which; "
            "docs/decisions/0030)."
        ),
    ] = "first",
    result_refs: Annotated[
        str, typer.Option(help="How the prompts name results: numbers or ids.")
    ] = "numbers",
    eval_goals: Annotated[
        int,
        typer.Option(
            min=0, help="Held-out goals (test, then eval) to evaluate on afterwards (0 = none)."
        ),
    ] = 0,
    force: Annotated[
        bool, typer.Option(help="Build even when cached or shipped with the repository.")
    ] = False,
    constrain_actions: Annotated[
        bool | None,
        typer.Option(
            help="Evaluate with replies limited to the page's valid actions "
            "(default: WSRL_AGENT_CONSTRAIN_ACTIONS)."
        ),
    ] = None,
    greedy_only: Annotated[bool, typer.Option(help="Evaluate greedy only.")] = False,
    model: Annotated[
        str | None,
        typer.Option(
            help="Warm-start this pretrained model (a name `wsrl model get` converted, or a "
            "checkpoint folder) on the same demonstrations instead of building the tiny "
            "policy: RL's start for a model that scores 0 zero-shot. Default out: "
            "<data_dir>/policy/NAME-warm-SEED."
        ),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(min=0, help="Peak learning rate (default 1e-3 tiny, 5e-5 with --model)."),
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="With --model: cuda or cpu (default: cuda if present).")
    ] = None,
) -> None:
    """Build the tiny policy (tokenizer + model) and imitate fair demonstrations; cached
    per config. Run it with agent_history_steps = the manifest's history_steps (1).

    The default configuration's build ships with the repository (trainer/bootstrap/tiny-0)
    and is copied, in seconds, while the demonstrations and the bootstrap's code are those
    it was built from; --force builds anyway.

    Writes a Hugging Face checkpoint folder (AutoModelForCausalLM / AutoTokenizer load it).
    No download: the tokenizer is trained on the catalog and the action grammar.
    """
    from app.config import get_settings
    from app.work_progress import WorkProgress
    from trainer.bootstrap.build import BootstrapConfig, bootstrap
    from trainer.bootstrap.tiny_policy import TinySize
    from trainer.config import tiny_policy_path

    if result_choice not in ("random", "first"):
        raise typer.BadParameter(
            f"{result_choice!r}: random or first", param_hint="--result-choice"
        )
    if result_refs not in ("numbers", "ids"):
        raise typer.BadParameter(f"{result_refs!r}: numbers or ids", param_hint="--result-refs")
    settings = get_settings()
    if model is not None:
        if hidden or layers or vocab:
            raise typer.BadParameter(
                "--hidden, --layers and --vocab shape the tiny policy; a pretrained model "
                "has its own shape",
                param_hint="--model",
            )
        env, target = _warm_start(
            settings, model, out, seed, episodes, epochs, lr, device, result_refs, result_choice,
            force,
        )  # fmt: skip
        _evaluate_built(settings, env, target, eval_goals, seed, constrain_actions, greedy_only)
        return
    if device is not None:
        raise typer.BadParameter("the tiny policy builds on the CPU", param_hint="--device")
    size = TinySize()
    if hidden is not None:
        size = TinySize(
            hidden_size=hidden, heads=max(2, hidden // 32), intermediate_size=hidden * 8 // 3
        )
    size = replace(size, layers=layers or size.layers, vocab_size=vocab or size.vocab_size)
    config = BootstrapConfig(
        seed=seed,
        episodes=episodes or BootstrapConfig.episodes,
        epochs=epochs or BootstrapConfig.epochs,
        lr=lr or BootstrapConfig.lr,
        size=size,
        result_refs=result_refs,
        result_choice=result_choice,
    )
    target = out or tiny_policy_path(settings.data_dir, seed)
    with WorkProgress(console, settings.progress_every_s) as progress:
        env = load_env(settings, progress)
        manifest = bootstrap(env, target, config, force=force, progress=progress.update)
    if manifest["cached"]:
        state = "cached"
    elif manifest["shipped"]:
        state = "copied from the repository's build, its inputs unchanged"
    else:
        state = f"built in {manifest['seconds']:.0f} s"
    console.print(
        f"tiny policy in {target} ({state}): {manifest['parameters']:,} parameters, "
        f"{manifest['demonstrations']} demonstration steps, loss {manifest['final_loss']:.3f}"
    )
    _evaluate_built(settings, env, target, eval_goals, seed, constrain_actions, greedy_only)


def _evaluate_built(
    settings, env, target: Path, goals: int, seed: int, constrain: bool | None, greedy_only: bool
) -> None:
    """``bootstrap --eval-goals N``: the policy just built, played as its manifest says."""
    from trainer.checkpoint_protocol import policy_protocol

    if not goals:
        return
    temperatures = (("greedy", 0.0),) if greedy_only else (("greedy", 0.0), ("sampled", 1.0))
    _evaluate(
        env, target, goals, seed, policy_protocol(settings, target),
        constrain=settings.agent_constrain_actions if constrain is None else constrain,
        temperatures=temperatures,
    )  # fmt: skip


def _warm_start(
    settings, name: str, out: Path | None, seed: int, episodes: int | None, epochs: int | None,
    lr: float | None, device: str | None, result_refs: str, result_choice: str, force: bool,
) -> tuple[WebShopEnv, Path]:  # fmt: skip
    """``wsrl policy bootstrap --model NAME``: :func:`trainer.bootstrap.warm_start.warm_start`;
    returns the env it loaded and the folder written."""
    from app.work_progress import WorkProgress
    from trainer.bootstrap.warm_start import WarmStartConfig, default_device, warm_start
    from trainer.models import ModelError, resolve_model

    try:
        base = resolve_model(settings.data_dir, name)
    except ModelError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from exc
    if base is None or not (base / "config.json").is_file():
        raise typer.BadParameter(
            f"{name}: neither a model `wsrl model get` converted nor a checkpoint folder "
            "(with a config.json)",
            param_hint="--model",
        )
    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device!r}: cuda or cpu", param_hint="--device")
    if device == "cuda" and default_device() != "cuda":
        raise typer.BadParameter("no CUDA device here", param_hint="--device")
    config = WarmStartConfig(
        seed=seed,
        episodes=episodes or WarmStartConfig.episodes,
        epochs=epochs or WarmStartConfig.epochs,
        lr=lr or WarmStartConfig.lr,
        result_refs=result_refs,
        result_choice=result_choice,
    )
    target = out or settings.data_dir / "policy" / f"{base.name}-warm-{seed}"
    with WorkProgress(console, settings.progress_every_s) as progress:
        env = load_env(settings, progress)
        manifest = warm_start(
            env, base, target, config, device=device, force=force, progress=progress.update
        )
    state = "cached" if manifest["cached"] else f"trained in {manifest['seconds']:.0f} s"
    console.print(
        f"{base.name} warm-started in {target} ({state} on {manifest['device']}): "
        f"{manifest['demonstrations']} demonstration steps, loss {manifest['final_loss']:.3f}"
    )
    return env, target


@policy_cli.command("eval")
def eval_command(
    model: Annotated[
        Path,
        typer.Option(
            help="Checkpoint folder (a bootstrap or a train step), or a model `wsrl model get` "
            "converted, by name."
        ),
    ],
    goals: Annotated[
        int,
        typer.Option(min=1, help="First N held-out goals: the test split, then the eval split."),
    ] = 200,
    seed: Annotated[int, typer.Option(help="Seed of sampled replies.")] = 0,
    constrain_actions: Annotated[
        bool | None,
        typer.Option(
            help="Replies limited to the page's valid actions "
            "(default: WSRL_AGENT_CONSTRAIN_ACTIONS)."
        ),
    ] = None,
    greedy_only: Annotated[bool, typer.Option(help="Evaluate greedy only.")] = True,
    start: Annotated[
        RolloutStart,
        typer.Option(
            help="Page the policy starts on: search (the task), or results or item, reached "
            "by the scripted opening that train groups use (docs/decisions/0017)."
        ),
    ] = RolloutStart.SEARCH,
) -> None:
    """Held-out success and mean reward of a checkpoint, in this process (no services):
    the first N held-out goals (test, then eval: 1,500 in the generated catalog), greedy,
    with the agent protocol the workers would play it with: the bootstrap's or the
    trainer's that saved the checkpoint, else the settings (WSRL_MAX_STEPS,
    WSRL_AGENT_HISTORY_STEPS, WSRL_AGENT_RESULT_REFS). With
    ``--start item`` every episode begins on its target's own page: comparing it with
    ``--start results`` and the task tells whether a policy loses on the options or on the
    choice of the product."""
    from app.config import get_settings
    from app.work_progress import WorkProgress
    from trainer.checkpoint_protocol import policy_protocol
    from trainer.lora import is_adapter
    from trainer.models import ModelError, resolve_model

    settings = get_settings()
    try:
        model = resolve_model(settings.data_dir, str(model)) or model
    except ModelError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from exc
    if not (model / "config.json").is_file() and not is_adapter(model):
        raise typer.BadParameter(
            f"{model} is not a checkpoint folder (no config.json) nor a LoRA adapter (no "
            "adapter_config.json)",
            param_hint="--model",
        )
    with WorkProgress(console, settings.progress_every_s) as progress:
        env = load_env(settings, progress)
    constrain = settings.agent_constrain_actions if constrain_actions is None else constrain_actions
    temperatures = (("greedy", 0.0),) if greedy_only else (("greedy", 0.0), ("sampled", 1.0))
    _evaluate(
        env, model, goals, seed, policy_protocol(settings, model),
        constrain=constrain, temperatures=temperatures, start=start,
    )  # fmt: skip


def held_out_goal_ids(env, n: int) -> list[int]:
    """The first ``n`` goals never trained on: the test split, then the eval split (a
    larger sample than the test split alone narrows the intervals of a comparison)."""
    held_out = env.goal_ids("test") + env.goal_ids("eval")
    if n > len(held_out):
        raise typer.BadParameter(
            f"{n} goals asked; this catalog holds {len(held_out)} held-out goals (test + eval).",
            param_hint="--goals",
        )
    return held_out[:n]


def _evaluate(
    env,
    target: Path,
    goals: int,
    seed: int,
    protocol,
    *,
    constrain: bool,
    temperatures: tuple[tuple[str, float], ...],
    start: RolloutStart = RolloutStart.SEARCH,
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.config import get_settings
    from app.work_progress import WorkProgress
    from trainer.bootstrap.inprocess_eval import evaluate
    from trainer.config import Lora
    from trainer.lora import LoraError, adapter_rank, is_adapter, load_policy

    ids = held_out_goal_ids(env, goals)
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    if is_adapter(target):  # a LoRA checkpoint: its adapter over its base
        try:
            model = load_policy(target, Lora(rank=adapter_rank(target)), trainable=False)
        except LoraError as exc:
            raise typer.BadParameter(str(exc), param_hint="--model") from exc
    else:
        model = AutoModelForCausalLM.from_pretrained(str(target)).eval()
    tests = min(len(ids), len(env.goal_ids("test")))  # the test split comes first
    console.print(
        f"{len(ids)} held-out goals ({tests} test, {len(ids) - tests} eval), "
        f"{protocol.max_steps}-step limit, {protocol.history_steps} "
        f"step{'' if protocol.history_steps == 1 else 's'} of history, results by "
        f"{'number' if protocol.result_refs == 'numbers' else 'id'}, constrained to valid "
        f"actions: {constrain}"
        + ("" if start == RolloutStart.SEARCH else f", starting on the {start} page")
    )
    every_s = get_settings().progress_every_s
    for name, temperature in temperatures:
        with WorkProgress(console, every_s) as progress:
            result = evaluate(
                model,
                tokenizer,
                env,
                ids,
                protocol=replace(protocol, constrain_actions=constrain),
                temperature=temperature,
                seed=seed,
                start=start,
                progress=lambda done, total, detail, name=name: progress.update(
                    f"{name}, episode steps", done, total, detail
                ),
            )
        console.print(
            f"{name}: success {result.success_rate:.1%} (95 % CI +/- {result.success_ci:.1%}), "
            f"mean reward {result.mean_reward:.3f} (+/- {result.reward_ci:.3f}), "
            f"invalid steps {result.invalid_steps}/{result.steps}"
        )


@policy_cli.command("merge")
def merge_command(
    adapter: Annotated[
        Path, typer.Argument(help="A LoRA checkpoint folder (a train step of a --lora-rank run).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write (must not exist).")],
) -> None:
    """Fold a LoRA adapter into its base model: a plain checkpoint for tools that take
    whole weights (vLLM without --enable-lora, wsrl train without --lora-rank)."""
    from app.commands import fail
    from trainer.lora import LoraError, merge

    if out.exists():
        raise fail(f"{out} exists; name a new folder")
    try:
        merged = merge(adapter, out)
    except LoraError as exc:
        raise fail(exc) from exc
    console.print(f"merged {adapter} into its base: {merged}")


def register(cli: typer.Typer) -> None:
    cli.add_typer(policy_cli, name="policy")


def load_env(settings, progress) -> WebShopEnv:
    """The configured catalog and goals (built or compiled on first use, with progress)."""
    from app.webshop.env import WebShopEnv

    return WebShopEnv.load(
        settings.env_data,
        settings.env_goals,
        cache_dir=settings.data_dir / "catalog",
        noun_tagger=settings.noun_tagger,
        progress=progress.update,
    )
