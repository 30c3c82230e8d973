"""The README's settings table names every setting, so the documentation cannot drift."""

from __future__ import annotations

from pathlib import Path

from app.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def _variables(name: str, field) -> list[str]:
    alias = field.validation_alias
    if alias is None:
        return [f"WSRL_{name.upper()}"]
    return [choice for choice in alias.choices if isinstance(choice, str) and choice.isupper()]


def test_every_setting_is_in_the_readme_settings_table() -> None:
    text = README.read_text()
    table = text[text.index("## Settings") : text.index("\n## ", text.index("## Settings") + 1)]
    missing = [
        variable
        for name, field in Settings.model_fields.items()
        for variable in _variables(name, field)
        if f"`{variable}`" not in table
    ]
    assert not missing, f"add these settings to the README's settings table: {missing}"


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert text.index("make dev") < text.index("## Settings")
    assert text.index("make test") < text.index("## Settings")
