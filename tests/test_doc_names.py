"""Names the docs and docstrings give the code exist: every dotted ``laya_cli.x.y``, every package-relative
``pkg.module.name`` (three parts or more) and every path into the checkout (``laya_cli/…``, ``benchmarks/…``,
``tools/…``, ``tests/…``) in docs/*.md, README.md and the source of ``laya_cli``, ``benchmarks`` and ``tools``
resolves. A module renamed or a function moved leaves no reference behind it (issue 69: ``run.run_export``,
``laya_cli.runtime.config``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = "auditing|backbones|cli|data|depthing|exporting|features|gates|model|report|runtime|stats|training"
DOTTED = re.compile(r"(?<![\w.])laya_cli(?:\.[A-Za-z_]\w*)+")
RELATIVE = re.compile(rf"`+((?:{PACKAGES})(?:\.[A-Za-z_]\w*){{2,}})(?:\(\))?`+")
PATH = re.compile(r"(?<![\w./-])((?:laya_cli|benchmarks|tools|tests)/[\w/.-]*\w\.(?:py|md|toml))")
FILE_ENDINGS = {"json", "pt", "md", "safetensors", "csv", "html", "txt"}  # model.depth.json is a file, not a name
ELSEWHERE = {"tests/test_models.py"}  # timm's own test file, named as the model for the zoo's checks


def _sources() -> list[Path]:
    return [
        *ROOT.glob("docs/**/*.md"),
        ROOT / "README.md",
        *ROOT.glob("laya_cli/**/*.py"),
        *ROOT.glob("benchmarks/**/*.py"),
        *ROOT.glob("tools/*.py"),
    ]


def _resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute reached from the longest importable module before it."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def _missing() -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for source in _sources():
        text, where = source.read_text(encoding="utf-8"), str(source.relative_to(ROOT))
        names = set(DOTTED.findall(text))
        names |= {"laya_cli." + n for n in RELATIVE.findall(text) if n.rsplit(".", 1)[1] not in FILE_ENDINGS}
        for name in names:
            if not _resolves(name):
                missing.setdefault(name, []).append(where)
        for path in set(PATH.findall(text)) - ELSEWHERE:
            if not (ROOT / path).exists():
                missing.setdefault(path, []).append(where)
    return missing


def test_every_name_and_path_the_docs_give_exists():
    missing = _missing()
    assert not missing, "names that no longer exist:\n" + "\n".join(f"{n}: {', '.join(w)}" for n, w in missing.items())


def test_the_check_finds_a_stale_name(tmp_path, monkeypatch):
    """The check can fail: the names issue 69 found stale are reported."""
    stale = tmp_path / "stale.md"
    stale.write_text("``run.run_export``, `laya_cli.runtime.config`, ``exporting.tokens.run_token_export``, "
                     "`benchmarks/zoo_sweep.py`", encoding="utf-8")  # fmt: skip
    monkeypatch.setattr("test_doc_names._sources", lambda: [stale])
    monkeypatch.setattr("test_doc_names.ROOT", tmp_path)
    assert set(_missing()) == {"laya_cli.runtime.config", "laya_cli.exporting.tokens.run_token_export",
                               "benchmarks/zoo_sweep.py"}  # fmt: skip
