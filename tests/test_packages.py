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


def test_the_wheel_carries_every_data_file_the_code_reads(tmp_path: Path) -> None:
    # A non-editable install (the images, the offline GPU kit) has only what the wheel
    # holds: the verl configs were missing from it, and hydra found no config on the host.
    # The wheel is the kit's own (docker/gpu/kit.py), built from the tracked files.
    import importlib.util
    import sys
    import zipfile

    spec = importlib.util.spec_from_file_location("gpu_kit_wheel", ROOT / "docker/gpu/kit.py")
    kit = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kit  # its dataclasses look their module up there
    spec.loader.exec_module(kit)
    wheel = kit.project_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [
        f
        for f in kit.tracked_files()
        if f.split("/")[0] in ("app", "trainer", "workers", "migrations")
        and not f.endswith((".py", ".md"))
    ]
    assert data, "no data files found: the test looks in the wrong place"
    missing = sorted(f for f in data if f not in names)
    assert not missing, f"add their patterns to [tool.setuptools.package-data]: {missing}"
