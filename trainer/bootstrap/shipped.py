"""The tiny policy the repository ships (``trainer/bootstrap/tiny-0``), and how it is known
to stand for what :func:`trainer.bootstrap.build.bootstrap` would build today
(decision 0029)."""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.checkpoint_protocol import BOOTSTRAP_MANIFEST

if TYPE_CHECKING:
    from trainer.bootstrap.build import BootstrapConfig, Inputs

MANIFEST = BOOTSTRAP_MANIFEST
SHIPPED = Path(__file__).resolve().parent / "tiny-0"
"""The default configuration's tiny policy, built once and kept in the repository: every
machine starts from the same weights (a build's weights depend on the CPU and the numeric
libraries), and a fresh clone trains within minutes instead of after the 8-minute build.
Rebuilt with ``wsrl policy bootstrap --force --out trainer/bootstrap/tiny-0`` whenever its
:func:`fingerprint` changes; a test fails until then."""
BUILD_CODE = ("build", "copy_pretraining", "demonstrations", "tiny_policy")
"""The modules of :mod:`trainer.bootstrap` whose code shapes the weights (with
:mod:`trainer.samples` and :mod:`trainer.tensors`); the prompts and actions they are trained
on are fingerprinted as data."""


def _code_shape(path: Path) -> str:
    """A module's code without its comments, docstrings and layout."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [
                statement
                for statement in body
                if not (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                )
            ]
            node.body = kept or [ast.Pass()]
    return ast.unparse(tree)


def fingerprint(inputs: Inputs, config: BootstrapConfig) -> str:
    """sha256 over what decides a build besides the machine: the configuration, the
    demonstrations (prompts and actions), the tokenizer's texts and the code of
    :data:`BUILD_CODE`. The same fingerprint on another machine builds weights that differ
    only as two CPUs' float sums do."""
    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(config), sort_keys=True).encode())
    for demo in inputs.demos:
        digest.update(json.dumps(asdict(demo), sort_keys=True).encode())
    for text in (*inputs.tokenizer_texts, *inputs.product_ids):
        digest.update(text.encode() + b"\0")
    here = Path(__file__).resolve().parent
    code = [here / f"{name}.py" for name in BUILD_CODE]
    code += [here.parent / "samples.py", here.parent / "tensors.py"]
    for path in code:
        digest.update(_code_shape(path).encode())
    return digest.hexdigest()


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file of a checkpoint folder but its manifest."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST
    }


def shipped_manifest(digest: str, shipped: Path = SHIPPED) -> dict[str, Any] | None:
    """The shipped checkpoint's manifest when it was built from inputs with fingerprint
    ``digest``, else None."""
    path = shipped / MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("fingerprint") == digest else None


def copy(shipped: Path, out: Path) -> None:
    """The shipped checkpoint's files and manifest into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name in [*file_hashes(shipped), MANIFEST]:
        shutil.copy2(shipped / name, out / name)
