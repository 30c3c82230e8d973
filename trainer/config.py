"""The run configuration: every training default lives here, each documented once.

:class:`RunConfig` is one training run: the algorithm (:class:`TrainerConfig`), sampling,
the schedule, the model and one section per backend. Each field is an option of ``wsrl
train`` and ``wsrl dev``, with its default and its help (``app/commands/_run_options.py``
generates them), and the verl configs' shared keys are filled from and validated into the
same classes (``trainer/backends/verl/config.py``); :data:`DEV_RUN` is what ``wsrl dev``
changes.

Algorithm names are verl's (``verl.trainer.ppo.core_algos``): ``adv_estimator`` picks an
advantage estimator from its registry, ``loss_mode`` a policy loss, ``loss_agg_mode`` how
token losses become one number. :meth:`TrainerConfig.preset` gives the usual combinations
(Dr.GRPO = GRPO advantages without std normalisation + ``seq-mean-token-sum-norm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from trainer.backends import choices, get_backend

SAMPLE_MODES = ("transition", "trajectory")
WEIGHTINGS = ("token", "rollout")
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+", "low_var_kl+")
GROUP_ESTIMATORS = ("grpo", "rloo", "grpo_vectorized", "rloo_vectorized", "opo", "grpo_passk")


def knob(default: Any, help: str, flag: str | None = None, repeat: bool = False) -> Any:
    """A field with its default and its help text: an option of ``wsrl train`` and ``wsrl
    dev`` (``app/commands/run_options.py``), named ``--<field-name>`` unless ``flag`` names
    it otherwise; ``repeat``: a tuple given by repeating its option."""
    return field(default=default, metadata={"help": help, "flag": flag, "repeat": repeat})


def section(cls: type, flag_prefix: str = "") -> Any:
    """A section of :class:`RunConfig`: its fields' options are ``--<flag_prefix><name>``."""
    return field(default_factory=cls, metadata={"flag_prefix": flag_prefix})


def help_of(cls: type, name: str) -> str:
    """The help text of field ``name`` of the dataclass ``cls``, as a terminal shows it."""
    text = next(f for f in fields(cls) if f.name == name).metadata["help"]
    return text.replace("``", "").replace(":func:", "")


PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {"adv_estimator": "grpo", "norm_adv_by_std": True, "loss_mode": "vanilla"},
    "dr_grpo": {
        "adv_estimator": "grpo",
        "norm_adv_by_std": False,
        "loss_mode": "vanilla",
        "loss_agg_mode": "seq-mean-token-sum-norm",
    },
    "rloo": {"adv_estimator": "rloo", "loss_mode": "vanilla"},
    "gspo": {
        "adv_estimator": "grpo",
        "loss_mode": "gspo",
        "loss_agg_mode": "seq-mean-token-mean",
        "clip_ratio_low": 3e-4,
        "clip_ratio_high": 4e-4,
    },
}


@dataclass
class TrainerConfig:
    """One training run. Invalid combinations fail at construction with a fix in the message."""

    # --- groups and batches --------------------------------------------------------------
    group_size: int = knob(
        4,
        "Rollouts per goal in one GRPO group; advantages are computed within a group.",
    )
    batch_groups: int = knob(
        4,
        "Complete groups per policy update (one update = batch_groups * group_size rollouts).",
    )
    max_staleness: int = knob(
        1,
        "Oldest policy version allowed in a trained group, counted back from the "
        "current one (0 = strictly on-policy).",
    )
    min_group_rollouts: int = knob(
        2,
        "A finished group with fewer successfully finished rollouts than this is discarded.",
    )
    skip_zero_variance: bool = knob(
        True,
        "Leave groups whose rollouts all scored the same out of the update: their "
        "advantages are 0, so without KL or entropy terms they add no gradient, only "
        "compute (they still count as used). A step whose groups are all flat makes no "
        "update and keeps the version, and the trainer logs a warning saying so.",
    )

    # --- samples ---------------------------------------------------------------------------
    sample_mode: str = knob(
        "trajectory",
        "``transition``: one sample per LLM call; ``trajectory``: an episode's turns "
        "joined into one sample while each prompt extends the previous prompt + "
        "response (the default agent rebuilds its prompt every step, so there every "
        "turn is its own sample and ``samples/prefix_mismatches`` counts the turns).",
    )
    max_sample_tokens: int = knob(
        2048, "Samples longer than this (prompt + responses) are dropped and counted."
    )
    sample_weighting: str = knob(
        "rollout",
        "``rollout``: each rollout counts the same in the loss, whatever its number of "
        "turns; ``token``: each generated token does (verl's plain token-mean over "
        "whole episodes). See :func:`trainer.samples.build_samples` for why multi-turn "
        "agents want ``rollout``.",
    )

    # --- algorithm (names from verl's registries) -------------------------------------------
    adv_estimator: str = knob("grpo", "Advantage estimator registered in verl (grpo, rloo, ...).")
    norm_adv_by_std: bool = knob(
        True, "GRPO only: divide by the group's reward std (off: Dr.GRPO)."
    )
    step_discount: float = knob(
        0.95,
        "An episode's return is its reward times ``step_discount`` per policy step "
        "after the first: within a group, of two rollouts that buy the same, the "
        "shorter scores higher, so a detour (a sub-page, leaving and coming back) is "
        "learned against instead of costing nothing. Sampled rollouts leave a detour by "
        "chance where greedy play repeats it to the step limit; the discount makes its "
        "cost visible to the update. 1: the env's reward as is (decision 0019).",
    )
    loss_mode: str = knob(
        "vanilla", "Policy loss registered in verl (vanilla = PPO clip, gspo, cispo, ...)."
    )
    loss_agg_mode: str = knob(
        "token-mean", f"How token losses are aggregated: {', '.join(LOSS_AGG_MODES)}."
    )
    clip_ratio_low: float = knob(0.2, "Lower clip range of the importance ratio (1 - low).")
    clip_ratio_high: float = knob(
        0.2, "Upper clip range of the importance ratio (1 + high); > low gives DAPO's clip-higher."
    )
    clip_ratio_c: float = knob(
        3.0, "Dual-clip bound for negative advantages (vanilla loss); must be > 1."
    )
    kl_coef: float = knob(
        0.0, "Weight of a KL penalty to a frozen reference model; 0 loads no reference."
    )
    kl_penalty: str = knob(
        "low_var_kl", "KL estimator passed to verl's kl_penalty (kl, mse, low_var_kl, ...)."
    )
    entropy_coef: float = knob(0.0, "Entropy bonus weight (0: entropy is only reported).")
    recompute_old_logprobs: bool = knob(
        True,
        "Old logprobs from a forward pass before the update (off: the logprobs the "
        "inference server returned with the rollout).",
    )

    # --- optimisation ----------------------------------------------------------------------
    lr: float = knob(
        1e-4,
        "AdamW learning rate.",
    )
    weight_decay: float = knob(0.0, "AdamW weight decay.")
    grad_clip: float = knob(1.0, "Max global gradient norm; <= 0 disables clipping.")
    micro_batch_size: int = knob(
        4, "Samples per forward/backward; gradients accumulate over a whole batch."
    )
    update_epochs: int = knob(1, "Passes over one batch per policy update.")
    seed: int = knob(
        0,
        "Seed of torch and of the batch shuffling.",
    )
    device: str = knob(
        "cpu",
        "torch device of the local backend (cpu or cuda).",
    )

    def __post_init__(self) -> None:
        _check_positive(self, ("group_size", "batch_groups", "max_sample_tokens"))
        _check_positive(self, ("micro_batch_size", "update_epochs", "min_group_rollouts"))
        if not 0.0 < self.step_discount <= 1.0:
            raise ValueError(f"step_discount={self.step_discount}: use a value in (0, 1].")
        if self.max_staleness < 0:
            raise ValueError(
                f"max_staleness={self.max_staleness} is negative; use 0 for on-policy "
                "training or a positive number of versions."
            )
        if self.sample_mode not in SAMPLE_MODES:
            raise ValueError(f"sample_mode={self.sample_mode!r}: use one of {SAMPLE_MODES}.")
        if self.sample_weighting not in WEIGHTINGS:
            raise ValueError(
                f"sample_weighting={self.sample_weighting!r}: use one of {WEIGHTINGS}."
            )
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode={self.loss_agg_mode!r}: use one of {LOSS_AGG_MODES}.")
        if self.kl_penalty not in KL_PENALTIES:
            raise ValueError(f"kl_penalty={self.kl_penalty!r}: use one of {KL_PENALTIES}.")
        self._check_numbers()
        self._check_groups()
        self._check_algorithm_names()  # last: importing verl's registries takes seconds

    def _check_numbers(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr} must be > 0 (e.g. 1e-5).")
        if self.clip_ratio_low <= 0 or self.clip_ratio_high <= 0:
            raise ValueError("clip_ratio_low and clip_ratio_high must be > 0 (e.g. 0.2).")
        if self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c={self.clip_ratio_c} must be > 1 (e.g. 3.0).")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("kl_coef and entropy_coef must be >= 0 (0 disables them).")

    def _check_groups(self) -> None:
        if self.adv_estimator == "gae":
            raise ValueError(
                "adv_estimator='gae' needs a critic, which this trainer has not; "
                "use 'grpo' or 'rloo'."
            )
        if self.adv_estimator in GROUP_ESTIMATORS and self.group_size < 2:
            raise ValueError(
                f"group_size={self.group_size} gives {self.adv_estimator} no baseline "
                "(every advantage would be 0): set group_size >= 2."
            )
        if self.adv_estimator in GROUP_ESTIMATORS and self.min_group_rollouts < 2:
            raise ValueError(
                f"adv_estimator={self.adv_estimator!r} compares rollouts within a group: "
                "set min_group_rollouts >= 2 (and group_size >= 2)."
            )
        if self.min_group_rollouts > self.group_size:
            raise ValueError(
                f"min_group_rollouts={self.min_group_rollouts} > group_size={self.group_size}: "
                "no group could ever be trained; lower min_group_rollouts."
            )

    def _check_algorithm_names(self) -> None:
        from verl.trainer.ppo import core_algos

        estimators = sorted(core_algos.ADV_ESTIMATOR_REGISTRY)
        if self.adv_estimator not in estimators:
            raise ValueError(f"adv_estimator={self.adv_estimator!r}: use one of {estimators}.")
        losses = sorted(core_algos.POLICY_LOSS_REGISTRY)
        if self.loss_mode not in losses:
            raise ValueError(f"loss_mode={self.loss_mode!r}: use one of {losses}.")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TrainerConfig:
        """A config for a named algorithm (grpo, dr_grpo, rloo, gspo) with overrides."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: use one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def with_(self, **changes: Any) -> TrainerConfig:
        """A validated copy with some fields changed."""
        return replace(self, **changes)


def _check_positive(config: TrainerConfig, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1.")


@dataclass
class Sampling:
    """How train rollouts are sampled from the policy."""

    temperature: float = knob(1.0, "Sampling temperature of train rollouts.")
    max_tokens: int = knob(48, "Max new tokens per LLM call.")

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0 (0: greedy).")
        _check_positive(self, ("max_tokens",))


@dataclass
class Schedule:
    """Which goals the rollouts play, and when held-out evaluations run."""

    environment: str = knob("webshop", "Environment the rollouts play: webshop, babyai.")
    split: str = knob("train", "Goal split the train rollouts are drawn from.")
    train_starts: tuple[str, ...] = knob(
        ("search",),
        "Starts (search, results, item) each train group draws one of: the page the "
        "policy starts on. Evaluations always start at search.",
    )
    eval_every: int = knob(0, "Evaluate on held-out test goals every N policy versions (0: never).")
    eval_goals: int = knob(
        50, "Test goals per evaluation (200: a 95 percent interval of about +/- 6 points)."
    )
    eval_temperature: float = knob(0.0, "Sampling temperature of evaluations (0: greedy).")

    def __post_init__(self) -> None:
        from app.config import get_settings
        from app.db.lifecycle import parse_starts
        from app.environments import get_environment

        environment = get_environment(self.environment, get_settings())
        try:
            self.train_starts = tuple(parse_starts(",".join(self.train_starts)))
        except ValueError as exc:
            raise ValueError(f"train_starts: {exc}") from None
        if not environment.openings and self.train_starts != ("search",):
            raise ValueError(
                f"train_starts={','.join(self.train_starts)}: {self.environment} has no "
                "openings; its episodes start at search only"
            )
        if self.eval_every < 0:
            raise ValueError(f"eval_every={self.eval_every} must be >= 0 (0: never).")
        _check_positive(self, ("eval_goals",))
        if self.eval_temperature < 0:
            raise ValueError(f"eval_temperature={self.eval_temperature} must be >= 0.")


@dataclass
class LocalSection:
    """The local backend (this process, CPU or one GPU): its policy server and polling."""

    policy_port: int = knob(0, "Port of the policy server (0 = any).")
    policy_host: str = knob("127.0.0.1", "Address the policy server listens on (0.0.0.0: all).")
    advertise_host: str | None = knob(
        None,
        "Host name workers reach the policy server by, published with the endpoint "
        "(default: the listening address; set it when that is 0.0.0.0 or workers run "
        "elsewhere, e.g. the Compose service name).",
    )
    poll_s: float = knob(1.0, "Seconds between looks at Postgres for complete groups.", "poll")
    checkpoint_dir: Path | None = knob(None, "Default: <data_dir>/trainer/checkpoints.")
    enqueue: bool = knob(True, "Enqueue rollouts (off: train on what others enqueue).")


@dataclass
class VerlSection:
    """The verl backend (GPUs): a named Hydra config and overrides of its keys."""

    config: str = knob("fast", "verl config name (smoke, fast, qwen, qwen3b, smollm2).")
    overrides: tuple[str, ...] = knob(
        (), "KEY=VALUE overrides of the verl config (repeat it).", "override", repeat=True
    )
    preflight: bool = knob(True, "Run the checks of `wsrl doctor` first, stop on a failure.")


@dataclass
class Lora:
    """LoRA: a low-rank adapter trained on frozen base weights, and synced alone."""

    rank: int = knob(
        0,
        "LoRA rank: train a low-rank adapter on the frozen base model and sync only the "
        "adapter to the server (0: train the whole model).",
    )
    alpha: int = knob(32, "LoRA alpha: the adapter's update is scaled by alpha / rank.")
    target_modules: tuple[str, ...] = knob(
        ("all-linear",),
        "Layers the adapter wraps: all-linear (every linear layer but the output head), or "
        "names such as q_proj,v_proj.",
    )

    def __post_init__(self) -> None:
        self.target_modules = tuple(m.strip() for m in self.target_modules if m.strip())
        if self.rank < 0:
            raise ValueError(f"rank={self.rank} must be >= 0 (0: no adapter, the whole model).")
        if self.alpha <= 0:
            raise ValueError(f"alpha={self.alpha} must be > 0 (e.g. twice the rank).")
        if not self.target_modules:
            raise ValueError("target_modules='' names no layer: use all-linear or module names.")
        if "all-linear" in self.target_modules and len(self.target_modules) > 1:
            raise ValueError(
                f"target_modules={','.join(self.target_modules)}: all-linear already "
                "names every linear layer; give it alone or list the names."
            )

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def peft_target_modules(self) -> str | list[str]:
        """``target_modules`` as peft (and verl) take it: the string ``all-linear`` or a
        list of module names."""
        if self.target_modules == ("all-linear",):
            return "all-linear"
        return list(self.target_modules)


TINY = "tiny"
"""The model name of the bundled tiny policy (``wsrl policy bootstrap``)."""


def tiny_policy_path(data_dir: Path, seed: int = 0) -> Path:
    """Where ``wsrl policy bootstrap`` (default options) writes the tiny policy."""
    return data_dir / "policy" / f"tiny-{seed}"


@dataclass
class RunConfig:
    """One training run, whichever backend trains it. Built validated: a bad value fails
    at construction with a fix in the message."""

    backend: str = knob("local", f"{choices()}.")
    model: str = knob(
        TINY,
        "Checkpoint folder to start from, a model `wsrl model get` converted (smollm2-135m), "
        "or 'tiny' (bootstrapped).",
    )
    steps: int | None = knob(None, "Steps to train in this run (default: forever).")
    preset: str = knob("grpo", "grpo, dr_grpo, rloo or gspo.")
    algorithm: TrainerConfig = section(TrainerConfig)
    sampling: Sampling = section(Sampling)
    schedule: Schedule = section(Schedule)
    lora: Lora = section(Lora, flag_prefix="lora-")
    local: LocalSection = section(LocalSection)
    verl: VerlSection = section(VerlSection)

    @classmethod
    def build(cls, values: dict[str, Any]) -> RunConfig:
        """A validated run configuration from ``values`` by path (``algorithm.lr``,
        ``model``): the rest are defaults, the algorithm's after ``preset``'s."""
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for path, value in values.items():
            name, _, field_name = path.partition(".")
            if field_name:
                nested.setdefault(name, {})[field_name] = value
            else:
                top[name] = value
        preset = top.get("preset", cls.preset)
        if preset not in PRESETS:
            raise ValueError(f"preset={preset!r}: use one of {sorted(PRESETS)}.")
        for f in fields(cls):
            if "flag_prefix" not in f.metadata:
                continue
            given = nested.pop(f.name, {})
            if f.default_factory is TrainerConfig:
                top[f.name] = TrainerConfig.preset(preset, **given)
            else:
                top[f.name] = f.default_factory(**given)  # type: ignore[misc]
        if nested:
            raise ValueError(f"no section {', '.join(sorted(nested))} in the run configuration")
        return cls(**top)

    def __post_init__(self) -> None:
        get_backend(self.backend)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}: use one of {sorted(PRESETS)}.")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps={self.steps} must be >= 1 (or unset: forever).")


DEV_RUN: dict[str, dict[str, Any]] = {
    "schedule": {"train_starts": ("item", "search"), "eval_every": 20, "eval_goals": 200},
}
"""What ``wsrl dev`` changes in :class:`RunConfig`'s defaults: half the train groups learn
option choice on an item page, half play the whole task, and 200 held-out goals every 20
versions (docs/benchmarks.md's acceptance runs used exactly these)."""
