"""``wsrl doctor``: every failure it names, and its fix, against real services."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from app.core.preflight import service_checks
from app.db import migrate
from app.db.models import Goal
from app.db.session import make_engine, session_scope
from app.environments import WEBSHOP

pytest.importorskip("verl")
from trainer.backends.verl import config as verl_config
from trainer.backends.verl.config import flash_attn_installed, load_config, needs_flash_attn
from trainer.backends.verl.doctor import disk_check, gpu_checks, model_check, settings_check

runner = CliRunner()
DEAD = "127.0.0.1:9"


def _webshop_checks(settings: Settings, split: str) -> list:
    return service_checks(
        settings, split, environment="webshop", env_probe=WEBSHOP.env_probe(settings)
    )


def _by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_without_a_gpu_the_gpu_checks_fail_with_their_fix() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    checks = _by_name(gpu_checks())
    assert not checks["GPU"].ok and "NVIDIA Container Toolkit" in checks["GPU"].fix
    if shutil.which("nvidia-smi") is None:  # named, not a bare FileNotFoundError
        assert checks["NVIDIA driver"].detail.startswith("RuntimeError: nvidia-smi not found")
    assert checks["import verl"].ok
    assert not checks["import flash_attn"].ok and "trainer image" in checks["import flash_attn"].fix


def _without_flash_attn(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash-attn absent for this test, whether or not this machine has it: a None in
    sys.modules makes ``find_spec`` answer None and ``import`` fail."""
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    assert not flash_attn_installed()


def test_without_flash_attn_the_actor_runs_sdpa_with_padding_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The offline kit's host and `make gpu-image`'s image have no flash-attn (PyPI has
    # only its source): the configs' default attention must not stop the run there.
    _without_flash_attn(monkeypatch)
    model = load_config("smoke", []).actor_rollout_ref.model
    assert model.use_remove_padding is False
    assert model.override_config.attn_implementation == "sdpa"
    assert not needs_flash_attn(load_config("smoke", []))
    assert "import flash_attn" not in _by_name(gpu_checks(flash_attn=False))


def test_an_attention_the_config_names_is_kept_and_doctor_checks_flash_attn_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without_flash_attn(monkeypatch)
    named = load_config(
        "smoke", ["+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"]
    )
    assert named.actor_rollout_ref.model.use_remove_padding is True
    assert needs_flash_attn(named)
    flash = _by_name(gpu_checks(flash_attn=True))["import flash_attn"]
    assert not flash.ok and "FLASH_ATTN_WHEEL" in flash.fix


def test_with_flash_attn_the_configs_attention_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verl_config, "flash_attn_installed", lambda: True)
    model = load_config("smoke", []).actor_rollout_ref.model
    assert model.use_remove_padding is True
    assert "attn_implementation" not in (model.get("override_config") or {})
    assert needs_flash_attn(load_config("smoke", []))


def test_unreachable_services_fail_with_their_fix(test_settings: Settings) -> None:
    settings = test_settings.model_copy(
        update={
            "database_url": f"postgresql+psycopg://postgres@{DEAD}/x",
            "redis_url": f"redis://{DEAD}/0",
            "env_url": f"http://{DEAD}",
        }
    )
    checks = _by_name(_webshop_checks(settings, "train"))
    for name, fix in (
        ("Postgres", "WSRL_DATABASE_URL"),
        ("Redis", "WSRL_REDIS_URL"),
        ("env server", "WSRL_ENV_URL"),
    ):
        assert not checks[name].ok, name
        assert fix in checks[name].fix


def test_goals_absent_then_present(
    make_database: Callable[[], str], test_settings: Settings
) -> None:
    url = make_database()
    settings = test_settings.model_copy(update={"database_url": url})
    unmigrated = _by_name(_webshop_checks(settings, "test"))["goals"]
    assert not unmigrated.ok and "wsrl db upgrade" in unmigrated.detail
    migrate.upgrade(url)
    empty = _by_name(_webshop_checks(settings, "test"))["goals"]
    assert not empty.ok and "no 'test' webshop goals" in empty.detail
    assert "wsrl enqueue" in empty.fix
    engine = make_engine(settings)
    with session_scope(engine) as session:
        session.add(
            Goal(
                id=1, split="test", spec={"asin": "B0"}, instruction="i", weight=1.0,
                source="synthetic",
            )
        )  # fmt: skip
    engine.dispose()
    assert _by_name(_webshop_checks(settings, "test"))["goals"].ok


def test_agent_settings_that_contradict_the_config_fail(test_settings: Settings) -> None:
    config = load_config("fast")
    # Nothing set: the config's protocol is published, whatever the defaults say.
    assert "tools mode" in settings_check(test_settings, config, "fast").detail
    wrong = test_settings.model_copy(update={"agent_mode": "text"})
    check = settings_check(wrong, config, "fast")
    assert not check.ok and "WSRL_AGENT_MODE=text is set here" in check.detail
    right = test_settings.model_copy(update={"agent_mode": "tools", "max_steps": 15})
    assert settings_check(right, config, "fast").ok
    # Tool mode sends no structured_outputs: the setting does not matter there.
    tools = right.model_copy(update={"agent_constrain_actions": True})
    assert settings_check(tools, config, "fast").ok


def test_constrained_text_replies_fail_on_the_verl_path(test_settings: Settings) -> None:
    """verl computes the old logprobs without the decoding masks: a constrained reply's
    importance ratio would be wrong, so the preflight refuses the combination."""
    config = load_config("smoke")
    text = test_settings.model_copy(update={"agent_mode": "text", "agent_history_steps": 1})
    assert settings_check(text, config, "smoke").ok
    constrained = text.model_copy(update={"agent_constrain_actions": True})
    check = settings_check(constrained, config, "smoke")
    assert not check.ok
    assert "WSRL_AGENT_CONSTRAIN_ACTIONS=True is set here" in check.detail
    assert "without the decoding masks" in check.detail


def test_too_little_disk_fails() -> None:
    config = load_config("qwen3b")
    assert not disk_check(config, free_bytes=2**30).ok
    assert disk_check(config, free_bytes=2**40).ok


def test_a_model_folder_without_config_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert not model_check(str(tmp_path)).ok
    (tmp_path / "config.json").write_text("{}")
    assert model_check(str(tmp_path)).ok
    assert "not cached" in model_check("no-such-org/no-such-model").detail


def test_a_model_not_cached_fails_on_an_offline_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """With HF_HUB_OFFLINE set (first-run.sh sets it), a Hub id that is not in the cache
    cannot be downloaded at start: the preflight says so before Ray and vLLM start."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check = model_check("no-such-org/no-such-model")
    assert not check.ok
    assert "not in the Hugging Face cache and HF_HUB_OFFLINE is set" in check.detail
    assert "carry the model" in check.detail


def test_wsrl_doctor_exits_1_and_prints_each_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import get_settings

    monkeypatch.setenv("WSRL_DATABASE_URL", f"postgresql+psycopg://postgres@{DEAD}/x")
    monkeypatch.setenv("WSRL_REDIS_URL", f"redis://{DEAD}/0")
    monkeypatch.setenv("WSRL_ENV_URL", f"http://{DEAD}")
    get_settings.cache_clear()
    try:
        result = runner.invoke(cli, ["doctor", "--backend", "local"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    assert result.output.count("FAIL") == 4
    assert "fix: start it" in result.output
    assert "0 of 4 checks passed" in result.output


@pytest.mark.parametrize("tagger", ["spacy", "rules"])
def test_the_env_check_names_the_reward_tagger(
    tmp_path: Path, test_settings: Settings, tagger: str
) -> None:
    from app.webshop.env import WebShopEnv
    from app.webshop.server.app import create_app
    from app.webshop.server.runner import serve_in_thread

    env = WebShopEnv.load(num_products=40, cache_dir=tmp_path, noun_tagger=tagger)
    with serve_in_thread(create_app(env)) as server:
        settings = test_settings.model_copy(update={"env_url": server.url})
        check = _by_name(_webshop_checks(settings, "train"))["env server"]
    assert check.ok, check.detail
    if tagger == "spacy":
        assert "reward noun tagger spacy (the original's;" in check.detail
    else:
        assert "reward noun tagger rules (approximate, chosen with WSRL_NOUN_TAGGER" in (
            check.detail
        )


def test_wsrl_doctor_checks_the_runs_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """BabyAI's env server is checked where it is (WSRL_BABYAI_URL), not WebShop's."""
    from app.config import get_settings

    monkeypatch.setenv("WSRL_DATABASE_URL", f"postgresql+psycopg://postgres@{DEAD}/x")
    monkeypatch.setenv("WSRL_REDIS_URL", f"redis://{DEAD}/0")
    monkeypatch.setenv("WSRL_BABYAI_URL", f"http://{DEAD}")
    get_settings.cache_clear()
    try:
        result = runner.invoke(cli, ["doctor", "--backend", "local", "--environment", "babyai"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    assert "fix: start it (`wsrl env babyai`), set WSRL_BABYAI_URL" in result.output
    assert "wsrl env serve" not in result.output
