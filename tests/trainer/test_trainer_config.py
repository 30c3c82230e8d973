"""TrainerConfig validation: every bad value fails at construction with a fix in the message."""

import re
import subprocess
import sys

import pytest
from helpers.processes import REPO

from trainer.config import TrainerConfig


def test_defaults_are_valid() -> None:
    config = TrainerConfig()
    assert config.adv_estimator == "grpo"
    assert config.sample_mode == "trajectory"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sample_mode": "episode"}, "use one of ('transition', 'trajectory')"),
        ({"adv_estimator": "grpoo"}, "adv_estimator='grpoo': use one of"),
        ({"adv_estimator": "gae"}, "needs a critic"),
        ({"loss_mode": "ppo"}, "loss_mode='ppo': use one of"),
        ({"loss_agg_mode": "mean"}, "loss_agg_mode='mean'"),
        ({"kl_penalty": "k9"}, "kl_penalty='k9'"),
        ({"group_size": 1, "min_group_rollouts": 1}, "set group_size >= 2"),
        ({"min_group_rollouts": 1}, "set min_group_rollouts >= 2"),
        ({"group_size": 4, "min_group_rollouts": 5}, "lower min_group_rollouts"),
        ({"max_staleness": -1}, "use 0 for on-policy"),
        ({"micro_batch_size": 0}, "micro_batch_size=0 must be >= 1"),
        ({"lr": 0.0}, "lr=0.0 must be > 0"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c=1.0 must be > 1"),
        ({"kl_coef": -0.1}, "kl_coef and entropy_coef must be >= 0"),
        ({"clip_ratio_high": 0.0}, "must be > 0"),
    ],
)
def test_invalid_config_raises_with_fix(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainerConfig(**changes)


def test_dr_grpo_preset_is_seq_mean_token_sum_norm_without_std() -> None:
    config = TrainerConfig.preset("dr_grpo", group_size=4)
    assert config.loss_agg_mode == "seq-mean-token-sum-norm"
    assert config.norm_adv_by_std is False
    assert config.group_size == 4


def test_unknown_preset_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown preset 'ppo': use one of \['dr_grpo'"):
        TrainerConfig.preset("ppo")


def test_with_revalidates() -> None:
    with pytest.raises(ValueError, match="sample_mode"):
        TrainerConfig().with_(sample_mode="x")


def test_a_bad_number_is_refused_before_verl_is_imported() -> None:
    """Importing verl's registries takes seconds (about 10 for `wsrl train --lr -1`, which
    checked the names first); a number needs no registry."""
    code = (
        "import sys\n"
        "from trainer.config import TrainerConfig\n"
        "try:\n"
        "    TrainerConfig(lr=-1.0)\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'verl'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.stdout.splitlines() == ["lr=-1.0 must be > 0 (e.g. 1e-5).", "[]"], done.stderr
