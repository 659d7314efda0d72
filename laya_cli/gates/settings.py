"""The gates' settings: what makes ``laya audit`` fail a build (``--fail-under``, ``--baseline`` with
``--max-drop``) and how a check is decided (``--gate-on``, ``--inconclusive-exit``). Declared once
(``runtime.declare.setting``), for the command line only (the Python API returns the numbers); no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..runtime.declare import Settings, setting
from ..runtime.fileio import check_new_outputs

GATE_ON = ("estimate", "bound")


@dataclass(frozen=True)
class GateSettings(Settings):
    PANEL: ClassVar[str] = "Gates"

    fail_under: list[str] | None = setting(
        None,
        "Exit 1 when a metric is below a threshold: 'faithfulness=0.7' gates the model's own attribution (laya, "
        "the head's α); a reference method only when named ('ig:faithfulness=0.8') or with 'all:' (every audited "
        "method but random); comma-separated; prefix 'network:' for the network scope "
        "('network:faithfulness=0.5'). Metrics: faithfulness, deletion@1, deletion@1_normalised, aopc, "
        "sufficiency@1, sufficiency@1_normalised, completeness, randomisation, accuracy. Repeatable.",
    )
    baseline: str | None = setting(
        None,
        "A previous 'laya audit --json' taken on the same data, samples and settings: show its values and the "
        "change beside each metric; gate with --max-drop.",
        metavar="FILE",
        cli_type=Path | None,
    )
    max_drop: list[str] | None = setting(
        None,
        "Exit 1 when a metric dropped below --baseline by more than allowed: 'faithfulness=0.02' (absolute, the "
        "model's own attribution, laya), 'ig:deletion@1=5%' (relative to the baseline value), 'all:faithfulness=0.02' "
        "(every method but random), 'accuracy=0.01'. Repeatable.",
    )
    allow_settings_change: bool = setting(
        False,
        "Compare with a --baseline audited with other settings (data, samples, ablation, …) anyway; the "
        "differences are noted.",
        flag="--allow-settings-change/--no-allow-settings-change",
    )
    gate_on: str = setting(
        "estimate",
        "'estimate': gate --fail-under/--max-drop on the point value; 'bound': on the confidence interval (pass, "
        "fail or inconclusive).",
        choices=GATE_ON,
    )
    inconclusive_exit: int = setting(
        1,
        "Exit code (0-255) when a --gate-on bound check is inconclusive (its interval straddles the bar).",
        minimum=0,
        below=256,
        rule="an exit code, 0-255",
    )


@dataclass(frozen=True)
class AuditOutputs(Settings):
    """The files ``laya audit`` was asked to write (None: not asked; the job summary needs no asking) and how it
    shows its result: the command line's own options, declared so that the command is made from them
    (``gates.outputs.write_audit_files`` writes them)."""

    PANEL: ClassVar[str] = "Outputs"

    json: Path | None = setting(
        None, "Write every number and setting as JSON to this file.", param="json_out", flag="--json"
    )
    markdown: Path | None = setting(None, "Write the tables as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY).")
    junit: Path | None = setting(
        None, "Write the gate checks (--fail-under, --max-drop) as JUnit XML, one test case per check.", metavar="FILE"
    )
    per_sample: bool = setting(
        True,
        "Keep the per-sample scores in --json (what a --gate-on bound --max-drop baseline needs); "
        "--no-per-sample leaves them out (a smaller file).",
        flag="--per-sample/--no-per-sample",
    )
    quiet: bool = setting(
        False,
        "Print only the verdict line (PASS/FAIL and each failed check); errors still print.",
        flag="--quiet",
        short="-q",
    )
    overwrite: bool = setting(
        False,
        "Replace output files that already exist (without it an existing output is an error, before any work).",
        flag="--overwrite",
    )

    @property
    def paths(self) -> list[Path | None]:
        return [self.json, self.markdown, self.junit]

    def check_writable(self, overwrite: bool | None = None) -> AuditOutputs:
        """Each file asked for can be written and, without ``overwrite`` (default: the command's ``--overwrite``),
        does not exist yet: a LayaError now, not after the audit. Returns these outputs."""
        overwrite = self.overwrite if overwrite is None else overwrite
        check_new_outputs({"--json": self.json, "--markdown": self.markdown, "--junit": self.junit}, overwrite)
        return self
