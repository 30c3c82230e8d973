"""Every folder of our Python code is a regular package: the import-linter contracts in
``make lint`` (the layers) do not see modules in namespace packages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_code_folder_has_an_init() -> None:
    missing = [
        str(folder.relative_to(ROOT))
        for top in ("app", "workers", "trainer")
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]
        if folder.is_dir() and any(folder.glob("*.py")) and not (folder / "__init__.py").exists()
    ]
    assert not missing, f"add an __init__.py to: {missing}"


def test_the_files_pyproject_names_exist() -> None:
    import re

    named = re.findall(
        r"(?<![\w/])((?:app|workers|trainer|tests)/[\w/]+\.py)\b",
        (ROOT / "pyproject.toml").read_text(),
    )
    assert named, "pyproject.toml's comments name no file (the pattern is stale)"
    missing = [path for path in named if not (ROOT / path).is_file()]
    assert not missing, f"pyproject.toml names files that do not exist: {missing}"
