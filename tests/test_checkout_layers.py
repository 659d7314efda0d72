"""The checkout's folders import one way (issue 69: ``benchmarks/newcomer.py`` imported ``tools/snapshot.py``, which
imported ``tests/helpers``): ``laya_cli`` imports none of them (tests/test_architecture.py), ``benchmarks/`` imports
``laya_cli`` and itself, ``tools/`` also ``benchmarks/`` (its synthetic inputs), and only ``tests/`` imports the
test helpers. Function-level imports count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder -> the checkout's top-level names it must not import
BELOW = {"benchmarks": {"tools", "tests", "helpers", "conftest"}, "tools": {"tests", "helpers", "conftest"}}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_import_runs_up_the_checkout():
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & forbidden)
        for folder, forbidden in BELOW.items()
        for path in (ROOT / folder).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
