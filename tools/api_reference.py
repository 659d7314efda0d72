"""Rewrite the Reference section of docs/api.md from the live docstrings and signatures.

    python tools/api_reference.py          # rewrites docs/api.md in place
    python tools/api_reference.py --check  # exit 1 when the page is out of date (what tests/test_api.py checks)

The page quotes each public function's ``help()`` text; writing it from the code keeps the two equal.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import laya_cli

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
HEADING = "## Reference"


def entries() -> list[tuple[str, object]]:
    """(heading, object) of every documented name, in the page's order."""
    return [
        ("laya_cli.attach", laya_cli.attach),
        ("laya_cli.fit", laya_cli.fit),
        ("laya_cli.audit", laya_cli.audit),
        ("laya_cli.export", laya_cli.export),
        ("laya_cli.depth", laya_cli.depth),
        ("laya_cli.diff", laya_cli.diff),
        ("laya_cli.load", laya_cli.load),
        ("LayaModel.save", laya_cli.LayaModel.save),
        ("AuditResult.to_pandas", laya_cli.AuditResult.to_pandas),
        ("AuditResult.per_sample", laya_cli.AuditResult.per_sample),
        ("AuditResult.to_model_card", laya_cli.AuditResult.to_model_card),
        ("AuditResult.to_json", laya_cli.AuditResult.to_json),
        ("DepthResult.to_pandas", laya_cli.DepthResult.to_pandas),
    ]


def section() -> str:
    blocks = [
        HEADING,
        "",
        "The docstrings, as `help()` shows them (written by `python tools/api_reference.py`; `tests/test_api.py` "
        "checks that this page quotes them).",
    ]
    for title, fn in entries():
        # help() shows the annotations unquoted (they are strings under ``from __future__ import annotations``)
        signature = re.sub(r"(: |-> )'([^']*)'", r"\1\2", f"{fn.__name__}{inspect.signature(fn)}")
        blocks += ["", f"### `{title}`", "", "```text", signature, "", inspect.getdoc(fn), "```"]
    return "\n".join(blocks) + "\n"


def rewritten(text: str) -> str:
    head, found, _ = text.partition(HEADING)
    if not found:
        raise SystemExit(f"{PAGE} has no '{HEADING}' section")
    return head + section()


if __name__ == "__main__":
    text = PAGE.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in sys.argv:
        sys.exit(0 if new == text else 1)
    PAGE.write_text(new, encoding="utf-8")
    print(f"{PAGE}: {len(re.findall('^### ', new, flags=re.M))} entries")
