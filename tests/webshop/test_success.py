"""Success is defined once (app/webshop/success.py): a full reward. Everything that counts
successes asks it, so no module of ours tests a value for equality with the literal 1.0."""

from __future__ import annotations

import ast
from pathlib import Path

from app.webshop.success import is_success, success_rate

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "app" / "webshop" / "success.py"


def test_a_success_is_a_full_reward() -> None:
    assert is_success(1.0) and is_success(1)
    assert not is_success(0.99) and not is_success(0.0) and not is_success(None)
    assert success_rate([1.0, 0.5, 1.0, 0.0]) == 0.5
    assert success_rate([]) == 0.0


def _comparisons_with_one(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare) or not any(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) and o.value == 1.0 and type(o.value) is float
               for o in operands):  # fmt: skip
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_restates_what_a_success_is() -> None:
    sources = [p for pkg in ("app", "workers", "trainer") for p in (ROOT / pkg).rglob("*.py")]
    restated = [c for p in sources if p != DEFINITION for c in _comparisons_with_one(p)]
    assert not restated, "use app.webshop.success instead of:\n" + "\n".join(restated)
