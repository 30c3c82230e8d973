"""The suite ignores the caller's ``WSRL_*`` settings: junk in the shell running pytest
changes no result (tests/conftest.py, ``hermetic_settings``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import get_settings

ROOT = Path(__file__).resolve().parents[1]
JUNK = {
    "WSRL_DATA_DIR": "/nonexistent/wsrl-junk",
    "WSRL_DATABASE_URL": "postgresql+psycopg://junk@256.0.0.1:1/junk",
    "WSRL_REDIS_URL": "redis://256.0.0.1:1/0",
    "WSRL_GROUP_SIZE": "junk",
    "OPENAI_API_BASE": "http://256.0.0.1:1/v1",
}


def test_the_callers_settings_are_gone_inside_the_suite() -> None:
    # Whatever the caller exported, a test sees the defaults.
    assert not [n for n in os.environ if n.startswith("WSRL_") and "_TEST_" not in n]
    settings = get_settings()
    assert settings.data_dir == Path(".wsrl")
    assert settings.database_url is None
    assert settings.llm_base_url is None


def test_a_test_may_still_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WSRL_DATA_DIR", "/tmp/chosen")
    get_settings.cache_clear()
    try:
        assert get_settings().data_dir == Path("/tmp/chosen")
    finally:
        get_settings.cache_clear()


@pytest.mark.slow
def test_junk_settings_in_the_callers_shell_change_no_result() -> None:
    pytest.importorskip("verl")
    tests = [
        "tests/test_hermetic.py::test_the_callers_settings_are_gone_inside_the_suite",
        "tests/trainer/test_verl_configs.py::"
        "test_config_loads_through_hydra_and_passes_verl_validation[smoke]",
    ]
    env = {**os.environ, **JUNK}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
