"""The files CI reads an audit's gates from: ``--json`` (the audit with its ``fail_under``, ``baseline`` and
``verdict`` blocks), ``--junit``, ``--markdown`` and GitHub's job summary (the same Markdown, appended whenever
``$GITHUB_STEP_SUMMARY`` is set). Formats: docs/ci.md. No torch.
"""

from __future__ import annotations

import os

from ..runtime.errors import LayaError
from ..runtime.fileio import append_text, strict_json, write_texts
from .junit import junit_xml
from .outcome import GateOutcome
from .regression import junit_properties
from .settings import AuditOutputs

__all__ = ["AuditOutputs", "append_step_summary", "audit_json", "audit_junit", "write_audit_files"]


def audit_json(doc: dict, outcome: GateOutcome) -> str:
    """``laya audit --json``: the audit's document (``AuditResult.to_dict()``) and what its gates decided."""
    return strict_json({**doc, **outcome.json_blocks()})


def audit_junit(doc: dict, outcome: GateOutcome, seconds: float = 0.0) -> str:
    """``laya audit --junit``: one test case per gate check, the audit's settings (and baseline) as properties."""
    properties = junit_properties(doc, outcome.request.baseline_path)
    return junit_xml(outcome.checks, properties=properties, seconds=seconds)


def append_step_summary(markdown: str) -> str | None:
    """GitHub Actions: the job summary shows the tables without any flag. A summary file that cannot be
    written is a warning (returned), not an error: the audit and its gates stand."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    try:
        append_text(path, markdown + "\n")
    except LayaError as e:
        return f"$GITHUB_STEP_SUMMARY: {e}"
    return None


def write_audit_files(files: AuditOutputs, doc: dict, markdown: str, outcome: GateOutcome, seconds: float = 0.0):
    """Write each file of ``files`` asked for, atomically, and append ``markdown`` to the job summary; returns the
    warning of a job summary that could not be written. ``seconds``: the audit's wall time, for JUnit."""
    texts = [(files.json, lambda: audit_json(doc, outcome)), (files.markdown, lambda: markdown),
             (files.junit, lambda: audit_junit(doc, outcome, seconds))]  # fmt: skip
    write_texts(texts)  # all of them, or none (a full disk)
    return append_step_summary(markdown)
