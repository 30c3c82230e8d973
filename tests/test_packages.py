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
    # Built from a copy of the tracked files: a checkout's egg-info can list files that
    # the patterns do not, and hide the gap.
    import shutil
    import subprocess
    import sys
    import zipfile

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    source = tmp_path / "src"
    for name in tracked:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("webshop_rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [
        f
        for f in tracked
        if f.split("/")[0] in ("app", "trainer", "workers", "migrations")
        and not f.endswith((".py", ".md"))
    ]
    assert data, "no data files found: the test looks in the wrong place"
    missing = sorted(f for f in data if f not in names)
    assert not missing, f"add their patterns to [tool.setuptools.package-data]: {missing}"
