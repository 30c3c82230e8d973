"""The offline GPU kit (docker/gpu/kit.py): what it carries, how its pieces come back
together, and the checks its rehearsal makes. The whole rehearsal (download, build,
install under Python 3.12) is CI's `make gpu-kit-check`; these run on its parts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.verl_pins import verl_extra_pins

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "docker" / "gpu"
_spec = importlib.util.spec_from_file_location("gpu_kit", GPU / "kit.py")
kit = importlib.util.module_from_spec(_spec)
sys.modules["gpu_kit"] = kit
_spec.loader.exec_module(kit)

HASH = "0" * 64


def _lock(tmp_path: Path, pins: dict[str, str]) -> Path:
    path = tmp_path / "lock.txt"
    path.write_text(
        "".join(f"{n}=={v} \\\n    --hash=sha256:{HASH}\n    # via x\n" for n, v in pins.items())
    )
    return path


def test_each_locked_package_is_carried_taken_from_the_host_or_left_out_with_a_reason(
    tmp_path: Path,
) -> None:
    lock = kit.read_lock(
        _lock(
            tmp_path,
            {
                "torch": "2.11.0",
                "numpy": "2.3.5",
                "Ray": "2.60.0",
                "msgpack": "1.2.4",
                "flashinfer-cubin": "0.6.12",
            },
        )
    )
    host = tmp_path / "host.txt"
    host.write_text("# comment\ntorch==2.11.0\nnumpy==2.5.2\nmsgpack\n")
    omit = tmp_path / "omit.txt"
    omit.write_text("flashinfer-cubin not used by the FLASH_ATTN backend\n")
    plan = kit.plan(lock, kit.read_host(host), kit.read_omit(omit))
    assert [p.name for p in plan.carried] == ["numpy", "ray"]  # numpy: host's differs
    assert plan.host == {"msgpack": "unread", "torch": "2.11.0"}
    assert plan.omitted == {"flashinfer-cubin": "not used by the FLASH_ATTN backend"}

    omit.write_text("flashinfer-cubin\n")
    with pytest.raises(SystemExit, match="without a reason"):
        kit.read_omit(omit)
    omit.write_text("tilelang not here\n")
    with pytest.raises(SystemExit, match="does not have"):
        kit.plan(lock, {}, kit.read_omit(omit))


def test_the_repository_lock_host_set_and_omissions_agree() -> None:
    lock, host, omit = kit.read_lock(), kit.read_host(), kit.read_omit()
    plan = kit.plan(lock, host, omit)
    assert lock["torch"].version == host["torch"] == "2.11.0"  # the host's CUDA torch is used
    assert "torch" in plan.host and "vllm" in {p.name for p in plan.carried}
    assert all(p.hashes for p in lock.values()), "every locked package has its hashes"


def test_the_lock_holds_the_installed_verl_and_every_version_its_gpu_extras_pin() -> None:
    pytest.importorskip("verl")
    from importlib import metadata

    lock = kit.read_lock()
    assert lock["verl"].version == metadata.version("verl")
    pins = {**verl_extra_pins("vllm"), **verl_extra_pins("fsdp")}
    assert {"vllm", "torch", "flash-attn"} <= set(pins)
    wrong = {
        n: (v, lock[n].version if n in lock else None)
        for n, v in pins.items()
        if n not in lock or lock[n].version != v
    }
    assert not wrong, f"verl pins (pin, lock): {wrong}"


def test_the_trainer_image_installs_from_the_same_lock() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile.trainer").read_text()
    assert "kit.py requirements --without flash-attn > /tmp/gpu-lock.txt" in dockerfile
    assert "pip install -q --no-deps --require-hashes -r /tmp/gpu-lock.txt" in dockerfile
    # every other install names no package of its own: the lock is the one list
    installs = re.findall(r"pip install ([^\n\\]+)", dockerfile)
    assert sorted(i.strip() for i in installs) == sorted(
        [
            "-q --no-deps --require-hashes -r /tmp/gpu-lock.txt",
            '-q --no-deps "flash-attn @ ${FLASH_ATTN_WHEEL}"; fi',
            "-q --no-deps . && pip check",
        ]
    ), installs
    wheel = re.search(r"^ARG FLASH_ATTN_WHEEL=\S+/flash_attn-([\d.]+)\+", dockerfile, re.M)
    assert wheel and wheel.group(1) == kit.read_lock()["flash-attn"].version
    # then every package at the lock's version (flash-attn too, where it was installed)
    assert 'kit.py verify $([ -n "$FLASH_ATTN_WHEEL" ] || echo --without flash-attn)' in (
        dockerfile
    )


def test_verify_names_each_package_not_as_locked(tmp_path: Path) -> None:
    # The trainer image's last check, run here on this Python's own packages.
    from importlib import metadata

    installed = {kit.canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    ours = {"pip", "setuptools", "wheel", "webshop-rl"}
    pins = {n: v for n, v in installed.items() if n not in ours}
    assert kit.lock_mismatches(kit.read_lock(_lock(tmp_path, pins)), set()) == []
    assert "pydantic" in pins and "redis" in pins
    pins["pydantic"] = "0.0.1"
    gone = pins.pop("redis")
    pins["flash-attn"] = "2.8.3"
    wrong = kit.lock_mismatches(kit.read_lock(_lock(tmp_path, pins)), {"flash-attn"})
    assert wrong == [
        f"pydantic: locked 0.0.1, installed {installed['pydantic']}",
        f"redis: installed {gone}, not in the lock",
    ]
    assert kit.lock_mismatches(kit.read_lock(_lock(tmp_path, pins)), set())[0] == (
        "flash-attn: locked 2.8.3, installed none"
    )


def test_the_pieces_come_back_together_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    out = tmp_path / "kit"
    pieces = kit.pack([(wheel, f"wheels/{wheel.name}")], out, piece_mib=0.3)
    assert len(pieces) == 4 and all(p["bytes"] <= 0.3 * 2**20 for p in pieces)
    manifest = {"pieces": pieces, "carried": [{"file": wheel.name, "sha256": kit.sha256(wheel)}]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    kit.unpack(out, tmp_path / "back")
    assert (tmp_path / "back" / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()

    damaged = out / pieces[2]["file"]
    damaged.write_bytes(b"x" + damaged.read_bytes()[1:])
    with pytest.raises(SystemExit, match="damaged"):
        kit.unpack(out, tmp_path / "again")
    damaged.unlink()
    with pytest.raises(SystemExit, match="missing"):
        kit.unpack(out, tmp_path / "again")


def _dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n\nbody\n")


def test_requirements_are_checked_over_the_kit_and_the_hosts_set(tmp_path: Path) -> None:
    pytest.importorskip("packaging")
    site = tmp_path / "site"
    _dist(
        site,
        "vllm",
        "0.24.0",
        "torch==2.11.0",
        "numpy<2.4",
        "flashinfer-python",
        "xformers; sys_platform == 'darwin'",
        "av; extra == 'video'",
    )
    _dist(site, "numpy", "2.3.5")
    host = {"torch": "2.11.0", "numpy": "2.5.2", "msgpack": None}
    omit = {"flashinfer-python": "unused backend"}
    assert kit.check_requirements(site, host, omit, ["vllm", "msgpack>=9"]) == []

    problems = kit.check_requirements(site, {**host, "torch": "2.10.0"}, omit, ["vllm", "ray"])
    assert problems == [
        "ray (wanted by (root): ray) is in neither the kit nor the host's set",
        "torch 2.10.0 does not satisfy vllm's torch==2.11.0",
    ]
    assert "av" in kit.check_requirements(site, host, omit, ["vllm[video]"])[0]


def test_module_level_imports_must_resolve_lazy_and_guarded_ones_need_not(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    (site / "engine").mkdir(parents=True)
    (site / "engine" / "__init__.py").write_text(
        "import os\nimport torch\nfrom . import worker\n"
        "try:\n    import flashinfer\nexcept ImportError:\n    pass\n"
        "def lazy():\n    import tilelang\n"
    )
    (site / "engine" / "worker.py").write_text("import msgspec\n")
    manifest = {"omitted": {"flashinfer-python": "unused", "tilelang": "unused"}}
    host = {"torch": "2.11.0"}
    assert kit.import_graph_gaps(site, host, manifest, ["engine"]) == [
        "engine.worker imports msgspec: not in the kit or the host's set"
    ]
    (site / "msgspec").mkdir()
    (site / "msgspec" / "__init__.py").write_text("")
    assert kit.import_graph_gaps(site, host, manifest, ["engine"]) == []
    (site / "engine" / "worker.py").write_text("import msgspec\nimport tilelang\n")
    assert kit.import_graph_gaps(site, host, manifest, ["engine"]) == [
        "engine.worker imports tilelang: tilelang is left out"
    ]


def test_the_lock_covers_every_dependency_the_project_declares_for_the_gpu_host() -> None:
    # A dependency added to pyproject.toml without `make gpu-lock` would be missing on the
    # offline host (and in the trainer image): this fails first.
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("embedded", "verl", "export"):
        declared += project["optional-dependencies"][extra]
    lock = kit.read_lock()
    unmet = []
    for line in declared:
        req = Requirement(line)
        pkg = lock.get(kit.canonical(req.name))
        if pkg is None or not req.specifier.contains(Version(pkg.version), prereleases=True):
            unmet.append(f"{req} (lock: {pkg.version if pkg else 'absent'})")
    assert not unmet, f"run `make gpu-lock`: {unmet}"


def test_a_piece_and_the_working_tree_fit_one_device_call() -> None:
    """Every call carries the working tree (the shipped tiny policy included) beside its
    piece, within 64 MiB: the default piece shrinks as the tree grows."""
    tree = kit.tree_mib()
    assert 4 < tree < 40, tree  # the repository's files, not build/ or .venv/
    assert tree + kit.piece_limit(tree) <= kit.CALL_MIB - 1
    assert kit.piece_limit(2.0) == kit.PIECE_MIB  # a small tree: the 60 MiB cap rules
    assert kit.piece_limit(20.5) == 42


@pytest.mark.parametrize("command", ["run", "prepare"])
def test_first_run_refuses_a_model_folder_without_a_config(command: str, tmp_path: Path) -> None:
    """`MODEL=` names a model folder on the host; a wrong one stops the run before it
    installs or starts anything, with what to name instead."""
    out = tmp_path / "out"
    env = {**os.environ, "MODEL": str(tmp_path / "no-such-model"), "OUT": str(out)}
    run = subprocess.run(
        ["bash", str(GPU / "first-run.sh"), command], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    assert "no config.json there; name a Hugging Face model folder" in run.stderr
    assert not out.exists()


def test_a_known_models_gguf_travels_in_pieces_and_is_checked_on_arrival(
    smollm2: Path, tmp_path: Path
) -> None:
    """`make gpu-kit MODEL=smollm2-135m`: the GGUF (98 MB, where the converted folder is
    260 MiB) goes into the pieces under the manifest's name and sha256, which the host
    checks after unpacking; first-run.sh then converts it with `wsrl model get`."""
    from trainer.models import KNOWN_MODELS

    known = KNOWN_MODELS["smollm2-135m"]
    gguf, entry = kit.known_model("smollm2-135m", smollm2.parents[1])  # its downloads/
    assert entry["name"] == "smollm2-135m" and entry["sha256"] == known.sha256
    assert entry["file"] == "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert entry["bytes"] == gguf.stat().st_size > 90 * 2**20
    out = tmp_path / "kit"
    pieces = kit.pack([(gguf, entry["file"])], out, piece_mib=kit.PIECE_MIB)
    assert len(pieces) == 2 and all(p["bytes"] <= kit.PIECE_MIB * 2**20 for p in pieces)
    manifest = {"pieces": pieces, "carried": [], "model": entry}
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert kit.unpack(out, tmp_path / "back")["model"] == entry
    assert kit.sha256(tmp_path / "back" / entry["file"]) == known.sha256

    (out / "manifest.json").write_text(json.dumps({**manifest, "model": {**entry, "sha256": HASH}}))
    with pytest.raises(SystemExit, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf: sha256 differs"):
        kit.unpack(out, tmp_path / "again")


def test_an_unknown_model_for_the_kit_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--model llama-7b: unknown model 'llama-7b': known are"):
        kit.known_model("llama-7b", tmp_path)
