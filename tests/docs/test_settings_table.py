"""The settings table of docs/operations.md names every setting, so the docs cannot drift."""

from __future__ import annotations

from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"


def _variables(name: str, field) -> list[str]:
    alias = field.validation_alias
    if alias is None:
        return [f"WSRL_{name.upper()}"]
    return [choice for choice in alias.choices if isinstance(choice, str) and choice.isupper()]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_setting_is_in_the_operations_settings_table() -> None:
    table = _section(OPERATIONS.read_text(), "## Settings")
    missing = [
        variable
        for name, field in Settings.model_fields.items()
        for variable in _variables(name, field)
        if f"`{variable}`" not in table
    ]
    assert not missing, f"add these settings to the table in docs/operations.md: {missing}"


def test_settings_table_names_no_removed_setting() -> None:
    table = _section(OPERATIONS.read_text(), "## Settings")
    known = {v for name, field in Settings.model_fields.items() for v in _variables(name, field)}
    rows = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `WSRL_")]
    unknown = [variable for variable in rows if variable not in known]
    assert not unknown, f"docs/operations.md documents settings app/config.py lacks: {unknown}"


def test_readme_starts_with_the_two_commands() -> None:
    first_section = _section(README.read_text(), "## Two commands")
    assert "make dev" in first_section
    assert "make test" in first_section
