"""One run configuration: the defaults of ``wsrl train``, ``wsrl dev``, :class:`TrainerConfig`
and the verl configs are the fields of :class:`trainer.config.RunConfig`, written once."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml

from app.cli import cli
from trainer.config import DEV_RUN, RunConfig, TrainerConfig

COMMANDS = typer.main.get_command(cli).commands  # type: ignore[attr-defined]


def option_defaults(command: str) -> dict[str, object]:
    """Each option's default, by its field's name (``lr``) or path (``schedule.split``)."""
    out: dict[str, object] = {}
    for p in COMMANDS[command].params:
        path = p.name.replace("__", ".")
        out[path] = out[path.rpartition(".")[2]] = p.default
    return out


def test_the_trainer_config_defaults_are_the_run_configurations() -> None:
    # The defaults `make dev`'s acceptance runs measured (docs/benchmarks.md).
    config = TrainerConfig()
    assert config == RunConfig().algorithm
    assert (config.group_size, config.batch_groups, config.lr) == (4, 4, 1e-4)
    assert (config.max_staleness, config.step_discount) == (1, 0.95)


def test_wsrl_train_options_default_to_the_run_configuration() -> None:
    run, defaults = RunConfig(), option_defaults("train")
    algorithm = run.algorithm
    assert defaults["group_size"] == algorithm.group_size
    assert defaults["batch_groups"] == algorithm.batch_groups
    assert defaults["lr"] == algorithm.lr
    assert defaults["max_staleness"] == algorithm.max_staleness
    assert defaults["step_discount"] == algorithm.step_discount
    assert defaults["sample_mode"] == algorithm.sample_mode
    assert defaults["sample_weighting"] == algorithm.sample_weighting
    assert defaults["seed"] == algorithm.seed
    assert (defaults["temperature"], defaults["max_tokens"]) == (1.0, run.sampling.max_tokens)
    assert defaults["train_starts"] == ",".join(run.schedule.train_starts)
    assert defaults["eval_every"] == run.schedule.eval_every
    assert defaults["eval_goals"] == run.schedule.eval_goals
    assert defaults["local.poll_s"] == run.local.poll_s
    assert defaults["verl.config"] == run.verl.config


def test_wsrl_dev_defaults_are_the_run_configuration_with_its_named_changes() -> None:
    run, defaults = RunConfig(), option_defaults("dev")
    assert defaults["group_size"] == run.algorithm.group_size == 4
    assert defaults["batch_groups"] == run.algorithm.batch_groups == 4
    assert defaults["lr"] == run.algorithm.lr == 1e-4
    assert defaults["max_staleness"] == run.algorithm.max_staleness == 1
    assert defaults["split"] == run.schedule.split
    # What `wsrl dev` changes is written once, in DEV_RUN (the acceptance runs' values).
    assert defaults["train_starts"] == ",".join(DEV_RUN["schedule"]["train_starts"])
    assert defaults["train_starts"] == "item,search"
    assert (defaults["eval_every"], defaults["eval_goals"]) == (20, 200)


def test_the_help_of_a_flag_is_the_fields() -> None:
    from trainer.config import help_of

    helps = {p.name: p.help for p in COMMANDS["train"].params}
    assert helps["algorithm__step_discount"] == help_of(TrainerConfig, "step_discount")
    dev_helps = {p.name: p.help for p in COMMANDS["dev"].params}
    assert dev_helps["algorithm__lr"] == help_of(TrainerConfig, "lr")


def test_the_cli_reads_the_defaults_without_importing_verl_or_torch() -> None:
    """Building a validated config at import (verl's registries) cost ``wsrl --help`` 8 s."""
    import subprocess
    import sys

    code = "import sys, app.cli; print(sorted({'verl', 'torch', 'sqlalchemy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the verl configs -------------------------------------------------------------------------

verl_config = pytest.importorskip("trainer.backends.verl.config")
CONFIGS = Path(verl_config.__file__).parent / "configs"


def written_keys(path: Path) -> dict[str, object]:
    """The dotted keys a YAML file writes, with their values."""
    out: dict[str, object] = {}

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(yaml.safe_load(path.read_text()), "")
    return out


@pytest.mark.parametrize("name", verl_config.CONFIG_NAMES)
def test_a_verl_config_differs_from_the_run_defaults_only_where_a_file_says_so(name: str) -> None:
    config = verl_config.load_config(name)
    written = {
        **written_keys(CONFIGS / "webshop_base.yaml"),
        **written_keys(CONFIGS / f"{name}.yaml"),
    }
    defaults = verl_config.run_defaults()
    for path, key in verl_config.VERL_KEYS.items():
        value = verl_config.OmegaConf.select(config, key)
        node = defaults
        for part in key.split("."):
            node = node[part]
        if key in written:
            continue  # an explicit, commented GPU value of that file
        assert value == node, f"{key} ({path}) is {value}, not the run default {node}"


def test_the_base_verl_config_restates_no_run_default() -> None:
    defaults = verl_config.run_defaults()
    restated = []
    for key, value in written_keys(CONFIGS / "webshop_base.yaml").items():
        node: object = defaults
        for part in key.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if node == value:
            restated.append(key)
    assert not restated, f"webshop_base.yaml restates run defaults: {restated}"


def test_the_verl_config_is_validated_by_the_run_configurations_classes() -> None:
    with pytest.raises(ValueError, match=r"webshop\.step_discount \(step_discount\)=1\.5"):
        verl_config.load_config("fast", ["webshop.step_discount=1.5"])
    with pytest.raises(ValueError, match=r"webshop\.train_starts \(train_starts\)"):
        verl_config.load_config("fast", ["webshop.train_starts=[checkout]"])
    loaded = verl_config.run_config(verl_config.load_config("fast"))
    assert loaded.algorithm.group_size == 8 and loaded.algorithm.lr == 5e-6


def test_an_environment_without_openings_refuses_other_starts() -> None:
    from trainer.config import Schedule

    assert Schedule(environment="babyai").train_starts == ("search",)
    with pytest.raises(ValueError, match="babyai has no openings; its episodes start at search"):
        Schedule(environment="babyai", train_starts=("item", "search"))
    with pytest.raises(ValueError, match="unknown environment 'nope'; known: babyai, webshop"):
        Schedule(environment="nope")
