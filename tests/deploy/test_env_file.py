"""The ``.env`` that ``make setup`` writes from ``.env.example`` configures a working
local run: nothing in it breaks :class:`app.config.Settings`."""

from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_env_example_loads_with_its_blanks_meaning_unset() -> None:
    settings = Settings(_env_file=ROOT / ".env.example")
    assert settings.llm_base_url is None  # OPENAI_API_BASE= : no endpoint, not ""
    assert settings.api_token == "change-me"


def test_make_setup_writes_env_from_the_example() -> None:
    makefile = (ROOT / "Makefile").read_text()
    setup = next(line for line in makefile.splitlines() if line.startswith("setup:"))
    assert ".env" in setup.split("##")[0].split()
    assert "cp .env.example .env" in makefile
