"""The verl configs compose through hydra on top of verl's ppo_trainer.yaml and pass
verl's own validation; our checks reject broken combinations with a fix in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.config import RolloutConfig

from trainer.backends.verl.config import ASYNC_OVERRIDES, CONFIG_NAMES, load_config
from trainer.config import RunConfig

MODELS = {
    "smoke": ".wsrl/policy/tiny-0",  # the locally bootstrapped tiny policy
    "fast": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen3b": "Qwen/Qwen2.5-3B-Instruct",
    "smollm2": ".wsrl/models/smollm2-135m",  # as `wsrl model get smollm2-135m` converts it
}


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_config_loads_through_hydra_and_passes_verl_validation(name: str) -> None:
    config = load_config(name)
    validate_config(config, need_reference_policy(config), need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig)
    assert config.actor_rollout_ref.model.path == MODELS[name]
    assert 4 <= rollout.n <= 8
    assert 1e-6 <= config.actor_rollout_ref.actor.optim.lr <= 1e-5
    assert rollout.multi_turn.max_assistant_turns == 15
    assert config.actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser == "hermes"
    assert config.algorithm.adv_estimator == "grpo"
    assert config.webshop.gpu_memory_estimate_gib > 0


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_async_overrides_give_a_valid_separate_gpu_config(name: str) -> None:
    config = load_config(name, ASYNC_OVERRIDES)
    validate_config(config, need_reference_policy(config), need_critic(config))
    assert config.webshop.mode == "async"
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_async_overrides_let_the_colocated_replica_free_its_memory(name: str) -> None:
    # verl's classic trainer starts a vLLM replica beside the actor in every mode and
    # sleeps it after init_workers; only with free_cache_engine does sleep free anything.
    rollout = omega_conf_to_dataclass(load_config(name, ASYNC_OVERRIDES).actor_rollout_ref.rollout)
    assert rollout.free_cache_engine and rollout.enable_sleep_mode


def test_async_with_an_idle_replica_holding_memory_is_refused() -> None:
    overrides = [*ASYNC_OVERRIDES, "actor_rollout_ref.rollout.free_cache_engine=false"]
    with pytest.raises(ValueError, match="free_cache_engine=true"):
        load_config("fast", overrides)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_workers_are_served_on_a_fixed_port_of_every_interface(name: str) -> None:
    endpoint = load_config(name).webshop.endpoint
    assert (endpoint.listen_host, endpoint.port, endpoint.advertise_host) == ("0.0.0.0", 8200, None)
    assert load_config(name, ["webshop.endpoint.port=null"]).webshop.endpoint.port is None


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_a_policy_port_workers_cannot_use_is_refused(port: str) -> None:
    with pytest.raises(ValueError, match=r"webshop\.endpoint\.port"):
        load_config("fast", [f"webshop.endpoint.port={port}"])


def test_smollm2_plays_its_model_in_text_mode_within_its_context(
    smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config trains the folder `wsrl model get smollm2-135m` writes, which verl's own
    model config loads; its template renders no tools, so it plays text mode; prompt and
    reply fit the model's context and a reply fits a sample; its lr is above the Qwens'."""
    from trainer.models import chat_template_supports_tools

    monkeypatch.setenv("WSRL_DATA_DIR", str(smollm2.parents[1]))
    config = load_config("smollm2")
    assert config.actor_rollout_ref.model.path == str(smollm2)
    model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    assert model.tokenizer.eos_token == "<|im_end|>" and model.hf_config.vocab_size == 49152
    assert not chat_template_supports_tools(smollm2)
    assert config.webshop.agent_mode == "text"
    data = config.data
    assert data.max_prompt_length + data.max_response_length <= model.tokenizer.model_max_length
    assert data.max_response_length >= config.webshop.max_tokens
    lr = config.actor_rollout_ref.actor.optim.lr
    assert all(lr > load_config(q).actor_rollout_ref.actor.optim.lr for q in ("fast", "qwen"))


def test_a_tools_config_with_a_template_without_tools_is_refused(
    smollm2: Path, test_settings
) -> None:
    from trainer.backends.verl.config import agent_protocol_of

    config = load_config("fast", [f"actor_rollout_ref.model.path={smollm2}"])
    with pytest.raises(ValueError, match=r"renders no tools.*webshop\.agent_mode=text"):
        agent_protocol_of(config, test_settings, "fast")
    text = load_config(
        "fast", [f"actor_rollout_ref.model.path={smollm2}", "webshop.agent_mode=text"]
    )
    assert agent_protocol_of(text, test_settings, "fast").mode == "text"


def test_a_bootstrapped_policy_is_played_as_it_was_bootstrapped(test_settings) -> None:
    """The verl backend reads how a checkpoint is played where the local one does
    (trainer.checkpoint_protocol): a config that plays the shipped tiny policy with another
    history than its demonstrations' is refused, naming the key and the value to set."""
    from trainer.backends.verl.config import agent_protocol_of
    from trainer.bootstrap.shipped import SHIPPED

    path = f"actor_rollout_ref.model.path={SHIPPED}"
    played = agent_protocol_of(load_config("smoke", [path]), test_settings, "smoke")
    assert (played.history_steps, str(played.result_refs)) == (1, "numbers")
    other = load_config("smoke", [path, "webshop.history_steps=3"])
    with pytest.raises(ValueError, match=r"webshop\.history_steps=3, but .* set webshop\.history"):
        agent_protocol_of(other, test_settings, "smoke")


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_flat_groups_are_left_out_by_one_default_but_in_the_smoke_config(name: str) -> None:
    """``wsrl train``, Compose and first-run.sh read this one default (the run
    configuration's); only the smoke config, a plumbing run whose policy scores 0, trains
    on flat groups, and says so in its file."""
    from trainer.backends.verl.config import run_config

    skips = run_config(load_config(name)).algorithm.skip_zero_variance
    assert skips == (name != "smoke") and RunConfig().algorithm.skip_zero_variance


def test_unknown_config_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="smoke, fast, qwen, qwen3b, smollm2"):
        load_config("llama")


def test_async_without_rollout_gpus_says_which_keys_to_set() -> None:
    with pytest.raises(ValueError, match=r"rollout\.nnodes>=1"):
        load_config("fast", ["webshop.mode=async", "webshop.max_staleness=1"])


def test_async_on_policy_is_rejected() -> None:
    overrides = [o for o in ASYNC_OVERRIDES if not o.startswith("webshop.max_staleness")]
    with pytest.raises(ValueError, match="max_staleness"):
        load_config("fast", [*overrides, "webshop.max_staleness=0"])


def test_group_of_one_is_rejected() -> None:
    with pytest.raises(
        ValueError, match=r"actor_rollout_ref\.rollout\.n \(group_size\)=1 gives grpo no baseline"
    ):
        load_config("fast", ["actor_rollout_ref.rollout.n=1"])


@pytest.mark.parametrize(
    ("override", "named"),
    [
        # Sampling was not read back from a verl config: a negative temperature passed.
        ("actor_rollout_ref.rollout.temperature=-1", r"actor_rollout_ref\.rollout\.temperature \("),
        ("webshop.max_tokens=0", r"webshop\.max_tokens \(max_tokens\)=0 must be >= 1"),
        ("webshop.eval_temperature=-1", r"webshop\.eval_temperature \(eval_temperature\)=-1"),
    ],
)
def test_a_bad_sampling_value_names_its_verl_key(override: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        load_config("fast", [override])


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="colocated, async"):
        load_config("fast", ["webshop.mode=sideways"])


@pytest.mark.gpu
@pytest.mark.slow
def test_fast_config_trains_one_step_on_gpu() -> None:
    """Needs a GPU, the Qwen2.5-0.5B weights in the HF cache and the full stack running."""
    import subprocess

    result = subprocess.run(
        [
            "wsrl",
            "train",
            "--backend",
            "verl",
            "--config",
            "fast",
            "--override",
            "trainer.total_training_steps=1",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_checkpoints_go_to_the_data_volume_and_are_bounded(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WSRL_DATA_DIR", "/data")
    config = load_config(name)
    assert str(config.trainer.default_local_dir).startswith("/data/checkpoints/verl/")
    assert config.trainer.max_actor_ckpt_to_keep == 2
    assert config.webshop.checkpoint_gib > 0


def test_too_little_disk_for_the_checkpoints_is_refused() -> None:
    from trainer.backends.verl.config import check_checkpoint_disk

    config = load_config("qwen3b")  # 36 GiB a checkpoint, 2 kept + 1 being written
    check_checkpoint_disk(config, free_bytes=200 * 2**30)
    with pytest.raises(ValueError, match="need about 108 GiB"):
        check_checkpoint_disk(config, free_bytes=50 * 2**30)
