"""The files CI reads an audit's gates from: ``--json`` (the audit with its ``fail_under``, ``baseline`` and
``verdict`` blocks), ``--junit``, ``--markdown`` and GitHub's job summary (the same Markdown, appended whenever
``$GITHUB_STEP_SUMMARY`` is set). Formats: docs/ci.md. No torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..runtime.errors import LayaError
from ..runtime.fileio import append_text, check_new_outputs, strict_json, write_texts
from .junit import junit_xml
from .outcome import GateOutcome
from .regression import junit_properties


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


@dataclass(frozen=True)
class AuditOutputs:
    """The files ``laya audit`` was asked to write (None: not asked); the job summary needs no asking."""

    json: str | Path | None = None
    markdown: str | Path | None = None
    junit: str | Path | None = None

    def check_writable(self, overwrite: bool = True) -> AuditOutputs:
        """Each file asked for can be written and, without ``overwrite`` (the command's ``--overwrite``), does not
        exist yet: a LayaError now, not after the audit. Returns these outputs. (The default replaces existing files,
        as ``laya audit`` did before it had ``--overwrite``: the command passes its flag.)"""
        check_new_outputs({"--json": self.json, "--markdown": self.markdown, "--junit": self.junit}, overwrite)
        return self

    def write(self, doc: dict, markdown: str, outcome: GateOutcome, seconds: float = 0.0) -> str | None:
        """Write each file asked for, atomically, and append ``markdown`` to the job summary; returns the warning
        of a job summary that could not be written. ``seconds``: the audit's wall time, for JUnit."""
        files = [(self.json, lambda: audit_json(doc, outcome)), (self.markdown, lambda: markdown),
                 (self.junit, lambda: audit_junit(doc, outcome, seconds))]  # fmt: skip
        write_texts(files)  # all of them, or none (a full disk)
        return append_step_summary(markdown)
