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


def _without_typing_blocks(tree: ast.Module) -> ast.Module:
    """The module without its ``if TYPE_CHECKING:`` blocks (imports a type checker reads, never run)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                setattr(node, field, [s for s in stmts if not _is_typing_block(s)])
    return tree


def _is_typing_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str, path: Path, known: set[str], typing: bool = True) -> tuple[set[str], set[str]]:
    """(laya_cli modules, other top-level names) that ``name`` imports anywhere, function bodies included;
    ``typing=False`` leaves out the imports under ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inner, outer = set(), set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree if typing else _without_typing_blocks(tree)):
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


# What each package (or top-level module) may import from the rest of laya_cli (docs/architecture.md): data
# flows one way, runtime < backbones < data < features < model < auditing < training < gates < depthing
# < exporting (whose ``tasks`` call every stage); report formats what it is given; the command line and the
# Python API sit on top. The package root (``__version__``) may be imported from anywhere.
_PIPELINE = ("runtime", "stats", "backbones", "data", "features", "model", "auditing", "training")
MAY_IMPORT = {
    **{pkg: set(_PIPELINE[:i]) for i, pkg in enumerate(_PIPELINE)},
    "gates": {"runtime", "stats", "auditing.names"},  # no torch: the vocabulary and numpy statistics only
    "depthing": {*_PIPELINE, "report.notebook"},
    # exporting is the topmost stage: its ``tasks`` (the one Task interface, chosen once) calls every stage's job
    "exporting": {*_PIPELINE, "gates", "depthing", "report"},
    "report": {"stats"},  # stats.timing: the verdict of a timing recorded before verdicts were
    "api": {*_PIPELINE, "gates", "depthing", "exporting"},
    "cli": {*_PIPELINE, "gates", "depthing", "exporting", "report"},
    "__main__": {"cli"},
}
# A result displays itself in a notebook (_repr_html_, report/notebook.py), importing it only when shown; the model
# card (auditing/card.py) writes its fields with the Markdown escaping rule of report/inert.py.
MAY_IMPORT["auditing"] = MAY_IMPORT["auditing"] | {"report.notebook", "report.inert"}
ANYWHERE = {"laya_cli"}


def _allowed(importer: str, imported: str) -> bool:
    if imported in ANYWHERE:
        return True
    src, dst = importer.split(".")[1], imported.split(".")[1]
    if src == dst:
        return True
    rules = MAY_IMPORT.get(src, set())
    return dst in rules or ".".join(imported.split(".")[1:3]) in rules


def test_packages_import_only_what_docs_architecture_allows():
    files = module_files()
    stray = sorted(
        f"{name} -> {dep}"
        for name, path in files.items()
        if name != "laya_cli"
        for dep in imports_of(name, path, set(files), typing=False)[0]
        if not _allowed(name, dep)
    )
    assert stray == []


def test_no_function_is_longer_than_80_lines():
    """Long functions hide the steps a reader needs named; the longest ten are printed (pytest -s) to watch."""
    lengths = sorted(
        (
            (node.end_lineno - node.lineno + 1, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
            for path in PACKAGE.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        ),
        reverse=True,
    )
    print("\nlongest functions in laya_cli:", *(f"{n:4d}  {where}" for n, where in lengths[:10]), sep="\n")
    assert [where for n, where in lengths if n > 80] == []


def test_the_package_has_at_most_16_rooms_at_the_top():
    """One entry per pipeline stage, the API and the command line (docs/architecture.md): a new concept joins the
    stage that owns it."""
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed"))
    assert len(entries) <= 16, entries


@pytest.mark.parametrize("old", ["laya_cli.train", "laya_cli.heads", "laya_cli.speed", "laya_cli.testing"])
def test_old_module_paths_are_gone(old):
    """No compatibility layer: the paths of before the stage packages (and the helpers that left the wheel) fail."""
    code = f"import {old}"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr
