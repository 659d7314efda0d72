"""The package's shape: self-contained (a wheel has no benchmarks/ or tests/), and data flows one way."""

from __future__ import annotations

import ast
import graphlib
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import laya_cli

PACKAGE = Path(laya_cli.__file__).parent
FOREIGN = ("benchmarks", "tests", "conftest")


def module_files() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.with_suffix("").relative_to(PACKAGE.parent).parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports_of(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(laya_cli modules, other top-level names) that ``name`` imports anywhere, function bodies included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inner, outer = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            candidates = [module, *(f"{module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for c in candidates:
            if c in known and c != name:
                inner.add(c)
            elif not c.startswith("laya_cli"):
                outer.add(c.split(".")[0])
    return inner, outer


def test_no_module_imports_the_checkouts_benchmarks_or_tests():
    files = module_files()
    offenders = {name: sorted(imports_of(name, path, set(files))[1] & set(FOREIGN)) for name, path in files.items()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_every_module_imports_without_the_checkout():
    """Import every module in a process that cannot see the repository root: nothing reaches for it."""
    names = [m.name for m in pkgutil.walk_packages(laya_cli.__path__, "laya_cli.") if not m.name.endswith("__main__")]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        f"leaked = [m for m in sys.modules if m.split('.')[0] in {FOREIGN!r}]\n"
        "assert not leaked, leaked\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(names) > 20  # the walk really found the package


def test_the_import_graph_has_no_cycle():
    files = module_files()
    graph = {name: imports_of(name, path, set(files))[0] for name, path in files.items()}
    # A package's __init__ is imported on the way to any of its modules: that edge is not a cycle.
    graph = {n: {d for d in deps if not n.startswith(d + ".")} for n, deps in graph.items()}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")
    assert set(order) == set(files)


def test_the_command_line_starts_without_torch():
    code = "import sys, laya_cli.cli; assert 'torch' not in sys.modules, 'torch imported by laya_cli.cli'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("module", ["checks", "thresholds", "regression", "junit", "outcome", "outputs"])
def test_the_gates_import_without_torch(module):
    """A CI step that only gates (reads an audit JSON, compares, writes JUnit) needs no torch."""
    name = f"laya_cli.gates.{module}"
    code = f"import sys, {name}; assert 'torch' not in sys.modules, 'torch imported by {name}'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_lazy_exports_resolve():
    for name in laya_cli.__all__:
        assert getattr(laya_cli, name) is getattr(importlib.import_module(f"laya_cli.{laya_cli._EXPORTS[name]}"), name)
    with pytest.raises(AttributeError):
        laya_cli.no_such_name  # noqa: B018


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["audit", "--help"], ["bench", "--help"]])
def test_help_imports_nothing_heavy(argv):
    """What --help must not load (docs/benchmarks.md, startup): torch and the libraries on top of it, nor
    rich (typer's rich help, laya's consoles) or pydantic (typer's validators for an unused flag)."""
    heavy = ("torch", "timm", "captum", "matplotlib", "sklearn", "pandas", "numpy", "rich", "pydantic", "click")
    code = (
        "import sys\n"
        f"sys.argv = ['laya', *{argv!r}]\n"
        "from laya_cli.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))\n"
        "assert not loaded, f'--help imported {loaded}'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage:" in proc.stdout


def test_laya_info_needs_torch_and_nothing_on_top_of_it(digits_ckpt):
    code = (
        "import sys\n"
        f"sys.argv = ['laya', 'info', {str(digits_ckpt)!r}]\n"
        "from laya_cli.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'timm', 'captum', 'matplotlib', 'sklearn', "
        "'pandas', 'torchvision', 'scipy'})\n"
        "assert not loaded, f'laya info imported {loaded}'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
