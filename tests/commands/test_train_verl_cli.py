"""``wsrl train --backend verl``: the errors a user sees without the right config or machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()


def test_train_verl_unknown_config_lists_choices() -> None:
    pytest.importorskip("verl")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "llama"])
    assert result.exit_code == 1
    assert "smoke, fast, qwen, qwen3b, smollm2" in result.output


@pytest.fixture
def fresh_settings(monkeypatch: pytest.MonkeyPatch):
    """Settings read anew from the environment this test sets."""
    from app.config import get_settings

    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_train_verl_refuses_a_config_the_workers_would_not_play(fresh_settings) -> None:
    pytest.importorskip("verl")
    fresh_settings.setenv("WSRL_AGENT_MODE", "text")
    fresh_settings.setenv("WSRL_MAX_STEPS", "10")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "fast"])
    assert result.exit_code == 1
    assert "WSRL_MAX_STEPS=10 is set here but the verl config 'fast'" in result.output
    assert "WSRL_AGENT_MODE=text" in result.output and "expects tools" in result.output


def test_train_verl_without_gpu_says_so(fresh_settings) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    fresh_settings.setenv("WSRL_AGENT_MODE", "tools")
    fresh_settings.setenv("WSRL_MAX_STEPS", "15")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--config", "fast"])
    assert result.exit_code == 1
    assert "needs NVIDIA GPUs" in result.output


# --- every flag reaches the verl run or is refused ---------------------------------------------


def test_the_verl_run_receives_lr_group_size_and_discount() -> None:
    """`wsrl train --backend verl --lr 1e-6 --group-size 8 --step-discount 1.0` used to
    return into the verl run before reading them."""
    pytest.importorskip("verl")
    from app.commands._run_options import collect
    from trainer.backends.verl.config import load_config
    from trainer.backends.verl.entry import verl_overrides

    given = {
        "algorithm.lr": 1e-6,
        "algorithm.group_size": 8,
        "algorithm.step_discount": 1.0,
        "schedule.eval_every": 3,
        "sampling.max_tokens": 64,
    }
    user = collect({**given, "backend": "verl", "verl.config": "fast"})
    config = load_config("fast", verl_overrides(user.build(), user.sources))
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert config.actor_rollout_ref.rollout.n == 8
    assert config.webshop.step_discount == 1.0
    assert config.webshop.eval_every == 3
    assert config.webshop.max_tokens == 64  # refused before: the workers' 256 applied


def test_print_config_shows_the_flags_in_the_resolved_verl_config() -> None:
    pytest.importorskip("verl")
    args = ["train", "--backend", "verl", "--config", "smoke", "--lr", "1e-6"]
    args += ["--group-size", "8", "--step-discount", "1.0", "--print-config"]
    result = runner.invoke(cli, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "actor_rollout_ref.actor.optim.lr = 1e-06  (algorithm.lr; flag --lr)" in result.output
    assert "actor_rollout_ref.rollout.n = 8  (algorithm.group_size; flag" in result.output
    assert "webshop.step_discount = 1.0  (algorithm.step_discount; flag" in result.output
    assert "data.train_batch_size = 2  (algorithm.batch_groups; config smoke)" in result.output


def test_a_list_flag_reaches_verl_as_a_list() -> None:
    """A flag holding several values was written as a YAML block (``- item``), which
    Hydra's override parser refused: ``--train-starts item,search`` stopped every verl run."""
    pytest.importorskip("verl")
    args = ["train", "--backend", "verl", "--config", "fast", "--train-starts", "item,search"]
    result = runner.invoke(cli, [*args, "--print-config"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "webshop.train_starts = ['item', 'search']  (schedule.train_starts; flag" in (
        result.output
    )


def test_lora_flags_are_verls_lora_keys() -> None:
    pytest.importorskip("verl")
    args = ["train", "--backend", "verl", "--config", "smollm2", "--lora-rank", "16"]
    args += ["--lora-alpha", "8", "--lora-target-modules", "q_proj,v_proj", "--print-config"]
    result = runner.invoke(cli, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "actor_rollout_ref.model.lora_rank = 16  (lora.rank; flag --lora-rank)" in result.output
    assert "actor_rollout_ref.model.lora_alpha = 8  (lora.alpha; flag" in result.output
    assert "actor_rollout_ref.model.target_modules = ['q_proj', 'v_proj']  (lora." in result.output
    plain = runner.invoke(cli, [*args[:5], "--print-config"], terminal_width=200)
    assert "actor_rollout_ref.model.target_modules = 'all-linear'  (lora." in plain.output
    assert "actor_rollout_ref.model.lora_rank = 0  (lora.rank; config smollm2)" in plain.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lora-rank", "-1"], "--lora-rank=-1 must be >= 0"),
        (["--lora-rank", "8", "--lora-alpha", "0"], "--lora-alpha=0 must be > 0"),
        (["--lora-rank", "8", "--lora-target-modules", ","], "--lora-target-modules='' names no"),
        (
            ["--lora-rank", "8", "--lora-target-modules", "all-linear,q_proj"],
            "all-linear already names every linear layer",
        ),
    ],
)
def test_a_bad_lora_value_names_its_flag(args: list[str], message: str) -> None:
    result = runner.invoke(cli, ["train", *args, "--print-config"], terminal_width=200)
    assert result.exit_code == 1, result.output
    assert message in result.output


def test_a_user_override_wins_over_a_flag() -> None:
    pytest.importorskip("verl")
    args = ["train", "--backend", "verl", "--config", "fast", "--lr", "1e-6", "--print-config"]
    args += ["--override", "actor_rollout_ref.actor.optim.lr=3e-6"]
    result = runner.invoke(cli, args, terminal_width=200)
    assert "actor_rollout_ref.actor.optim.lr = 3e-06  (algorithm.lr; --override)" in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--backend", "verl", "--sample-weighting", "token"], "--sample-weighting"),
        (
            ["--backend", "verl", "--device", "cuda", "--sample-weighting", "token"],
            "--device, --sample-weighting",
        ),
        (["--backend", "verl", "--no-enqueue"], "--enqueue"),
        (["--backend", "local", "--config", "qwen"], "--config"),
        (["--override", "data.seed=1"], "--override"),
    ],
)
def test_a_flag_the_backend_would_ignore_is_refused_by_name(args: list[str], named: str) -> None:
    result = runner.invoke(cli, ["train", *args], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert f"{named}: the" in result.output and "cannot honour it" in result.output


def test_a_bad_value_names_its_flag() -> None:
    pytest.importorskip("verl")
    result = runner.invoke(cli, ["train", "--backend", "verl", "--group-size", "1"])
    assert result.exit_code == 1
    assert "--group-size=1 gives grpo no baseline" in result.output


# --- a real model by name: SmolLM2 ---------------------------------------------------------------


def test_print_config_resolves_the_smollm2_config() -> None:
    pytest.importorskip("verl")
    args = ["train", "--backend", "verl", "--config", "smollm2", "--print-config"]
    result = runner.invoke(cli, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert (
        "actor_rollout_ref.actor.optim.lr = 1e-05  (algorithm.lr; config smollm2)" in result.output
    )
    assert "webshop.max_tokens = 128  (sampling.max_tokens; config smollm2)" in result.output


def test_model_by_name_trains_the_folder_wsrl_model_get_converted(
    smollm2: Path, fresh_settings
) -> None:
    pytest.importorskip("verl")
    from app.commands._run_options import collect
    from trainer.backends.verl.config import load_config
    from trainer.backends.verl.entry import verl_overrides

    fresh_settings.setenv("WSRL_DATA_DIR", str(smollm2.parents[1]))
    user = collect({"backend": "verl", "verl.config": "fast", "model": "smollm2-135m"})
    overrides = verl_overrides(user.build(), user.sources)
    assert f"actor_rollout_ref.model.path={smollm2}" in overrides
    assert load_config("fast", overrides).actor_rollout_ref.model.path == str(smollm2)
    # a Hugging Face id or a folder passes as typed; `tiny` is the bootstrapped policy
    user = collect({"backend": "verl", "model": "Qwen/Qwen2.5-0.5B-Instruct"})
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct" in verl_overrides(
        user.build(), user.sources
    )


def test_a_known_model_not_converted_says_how_to_convert_it(tmp_path: Path, fresh_settings) -> None:
    pytest.importorskip("verl")
    from trainer.backends.verl.doctor import model_check

    fresh_settings.setenv("WSRL_DATA_DIR", str(tmp_path))
    args = ["train", "--backend", "verl", "--config", "smollm2", "--model", "smollm2-135m"]
    result = runner.invoke(cli, [*args, "--print-config"], terminal_width=200)
    assert result.exit_code == 1
    assert "not converted yet: run `wsrl model get smollm2-135m`" in result.output
    # the config's own path (no --model): the preflight's model check says the same
    check = model_check(str(tmp_path / "models" / "smollm2-135m"))
    assert not check.ok and "run `wsrl model get smollm2-135m`" in check.detail
