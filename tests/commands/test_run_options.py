"""``wsrl train`` and ``wsrl dev`` take every field of the run configuration from a flag,
the environment (``WSRL_TRAIN_*``) or a config file, generated from
:class:`trainer.config.RunConfig` (``app/commands/_run_options.py``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()


def print_config(*args: str, env: dict[str, str] | None = None) -> str:
    result = runner.invoke(cli, ["train", *args, "--print-config"], env=env, terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_field_comes_from_a_flag_over_the_environment_over_a_file(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(
        'preset = "dr_grpo"\n[algorithm]\nlr = 0.002\ngroup_size = 6\n'
        '[schedule]\ntrain_starts = ["item", "search"]\n[lora]\nrank = 8\n'
    )
    env = {"WSRL_TRAIN_LR": "0.003", "WSRL_TRAIN_EVAL_EVERY": "5"}
    out = print_config("--config-file", str(toml), "--group-size", "7", env=env)
    assert "algorithm.lr = 0.003  (env WSRL_TRAIN_LR)" in out
    assert "algorithm.group_size = 7  (flag --group-size)" in out
    assert "schedule.eval_every = 5  (env WSRL_TRAIN_EVAL_EVERY)" in out
    assert f"schedule.train_starts = ('item', 'search')  (file {toml})" in out
    assert f"lora.rank = 8  (file {toml})" in out
    # the preset's fields, where nothing else set them
    assert "algorithm.norm_adv_by_std = False  (preset dr_grpo)" in out
    assert "algorithm.batch_groups = 4  (default)" in out


def test_a_yaml_file_sets_fields_too(tmp_path: Path) -> None:
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("algorithm:\n  kl_coef: 0.05\nsampling:\n  temperature: 0.7\n")
    out = print_config("--config-file", str(yaml_file))
    assert f"algorithm.kl_coef = 0.05  (file {yaml_file})" in out
    assert f"sampling.temperature = 0.7  (file {yaml_file})" in out


@pytest.mark.parametrize(
    ("content", "suffix", "env", "message"),
    [
        ("[algorithm]\nlrr = 1\n", ".toml", {}, "no field algorithm.lrr in the run configuration"),
        ("[algorithm]\nlr = 0\n", ".toml", {}, "algorithm.lr=0.0 must be > 0 (e.g. 1e-5). (in "),
        ("[algorithm]\nlr = 'fast'\n", ".toml", {}, "algorithm.lr in "),
        ("lr = [", ".toml", {}, "--config-file "),
        ("lr: 1", ".json", {}, "use a .toml or .yaml file"),
        ("", ".toml", {"WSRL_TRAIN_LR": "fast"}, "WSRL_TRAIN_LR='fast': not a float"),
        ("", ".toml", {"WSRL_TRAIN_LR": "0"}, "WSRL_TRAIN_LR=0.0 must be > 0"),
        ("", ".toml", {"WSRL_TRAIN_ENQUEUE": "maybe"}, "WSRL_TRAIN_ENQUEUE='maybe': use true"),
    ],
)
def test_a_bad_file_or_variable_is_an_error_that_names_it(
    tmp_path: Path, content: str, suffix: str, env: dict[str, str], message: str
) -> None:
    path = tmp_path / f"run{suffix}"
    path.write_text(content)
    result = runner.invoke(
        cli, ["train", "--config-file", str(path), "--print-config"], env=env, terminal_width=200
    )
    assert result.exit_code == 1, result.output
    assert message in result.output


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["train", "--config-file", str(tmp_path / "none.toml")])
    assert result.exit_code == 1 and "No such file" in result.output


def test_a_field_the_backend_cannot_honour_is_refused_wherever_it_was_set(tmp_path: Path) -> None:
    env = {"WSRL_TRAIN_SAMPLE_WEIGHTING": "token"}
    result = runner.invoke(cli, ["train", "--backend", "verl"], env=env, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "WSRL_TRAIN_SAMPLE_WEIGHTING: the verl backend cannot honour it" in result.output
    toml = tmp_path / "run.toml"
    toml.write_text('backend = "local"\n[verl]\nconfig = "qwen"\n')
    result = runner.invoke(cli, ["train", "--config-file", str(toml)], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert f"verl.config in {toml}: the local backend cannot honour it" in result.output


def test_a_field_added_to_the_run_configuration_is_an_option_everywhere(tmp_path: Path) -> None:
    """Adding a run option is one field: here ``sampling.top_p``, added in a process of its
    own, is in ``wsrl train --help`` and ``--print-config`` with its help and default, is
    set by its flag, its variable and a file, and the verl backend, with no key for it,
    refuses it by name."""
    toml = tmp_path / "run.toml"
    toml.write_text("[sampling]\ntop_p = 0.7\n")
    script = textwrap.dedent(
        """
        import dataclasses, sys
        import trainer.config as config

        @dataclasses.dataclass
        class Sampling(config.Sampling):
            top_p: float = config.knob(1.0, "Nucleus sampling's probability mass.")

        @dataclasses.dataclass
        class RunConfig(config.RunConfig):
            sampling: Sampling = config.section(Sampling)

        config.Sampling, config.RunConfig = Sampling, RunConfig
        from typer.testing import CliRunner
        from app.cli import cli

        runner = CliRunner()
        for args, env in (
            (["train", "--help"], {}),
            (["train", "--top-p", "0.9", "--print-config"], {}),
            (["train", "--print-config"], {"WSRL_TRAIN_TOP_P": "0.8"}),
            (["train", "--backend", "verl", "--top-p", "0.9"], {}),
            (["train", "--config-file", sys.argv[1], "--print-config"], {}),
        ):
            result = runner.invoke(cli, args, env=env, terminal_width=200)
            print(f"=== {result.exit_code}")
            print(result.output)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(toml)], capture_output=True, text=True, check=True
    ).stdout
    helps, flagged, from_env, verl, from_file = out.split("=== ")[1:]
    assert "--top-p" in helps and "Nucleus sampling's probability mass." in helps
    assert "sampling.top_p = 0.9  (flag --top-p)" in flagged
    assert "sampling.top_p = 0.8  (env WSRL_TRAIN_TOP_P)" in from_env
    assert verl.startswith("2") and "--top-p: the verl backend cannot honour it" in verl
    assert f"sampling.top_p = 0.7  (file {toml})" in from_file


def test_dev_passes_what_a_file_and_the_environment_set_to_its_trainer(
    dev_trainer_options, tmp_path: Path
) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text("[lora]\nrank = 4\n[algorithm]\nrecompute_old_logprobs = false\n")
    env = {"WSRL_TRAIN_KL_COEF": "0.01"}
    args = ["--model", "m", "--config-file", str(toml), "--eval-goals", "20"]
    options = dev_trainer_options(args, env)

    def value(flag: str) -> str:
        return options[options.index(flag) + 1]

    assert value("--lora-rank") == "4" and value("--kl-coef") == "0.01"
    assert "--no-recompute-old-logprobs" in options
    assert value("--eval-goals") == "20"
    assert value("--train-starts") == "item,search"  # wsrl dev's own default
    assert "--enqueue" not in options and "--backend" not in options


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WSRL_TRAIN_BACKEND": "verl"}, "WSRL_TRAIN_BACKEND"),
        ({"WSRL_TRAIN_ENQUEUE": "false"}, "WSRL_TRAIN_ENQUEUE"),
        ({"WSRL_TRAIN_CONFIG": "qwen"}, "WSRL_TRAIN_CONFIG"),
    ],
)
def test_dev_refuses_what_its_trainer_cannot_honour(env: dict[str, str], named: str) -> None:
    result = runner.invoke(cli, ["dev", "--model", "m"], env=env, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert f"{named}: wsrl dev cannot honour it" in result.output


def test_dev_refuses_an_environment_it_cannot_serve() -> None:
    """An AgentGym server known by URL is trained with ``wsrl train``: dev starts built-in
    environments' servers only."""
    env = {"WSRL_AGENTGYM": '{"grid": "http://127.0.0.1:9"}'}
    result = runner.invoke(cli, ["dev", "--environment", "grid"], env=env, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "wsrl dev runs a built-in environment (webshop, babyai), not 'grid'" in result.output
