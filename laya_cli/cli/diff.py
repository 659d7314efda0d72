"""``laya diff A.pt B.pt``: what changed between two versions of a model on the same samples (the job:
``auditing.diff.job.diff_models``); exit 1 when ``--fail-if-changed`` names a class (or ``any``) that changed.
Like the other commands it takes ``--config``, ``-v`` and ``--log-to`` (``LayaCommand``, command.py) and ``-q``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..runtime import progress
from ..runtime.config import TIE_TOL
from .common import EXIT_GATE_FAILED, err_console, pick_device, wide_console
from .options import (
    Ablation,
    DataDir,
    Device,
    Encoding,
    EvalDataset,
    JsonOut,
    MarkdownOut,
    Quiet,
    Samples,
    SubsetSeed,
    TieTol,
)

ModelA = Annotated[Path, typer.Argument(help="The first checkpoint (the baseline, A).", show_default=False)]
ModelB = Annotated[Path, typer.Argument(help="The second checkpoint (the candidate, B).", show_default=False)]
Permutations = Annotated[int, typer.Option(help="Permutations of each paired permutation test.")]
Level = Annotated[float, typer.Option("--alpha", help="Significance level of a changed class, after correction.")]
Correction = Annotated[str, typer.Option(help="Multiple-testing correction over the classes: holm, bh or none.")]
DiffScope = Annotated[
    str,
    typer.Option(
        help="Where a layer is removed for the LOLO effects Δ: head (at the head's inputs: direct effects) or "
        "network (patched inside the backbone: total effects)."
    ),
]
FailIfChanged = Annotated[
    str | None,
    typer.Option(metavar="CLASS|any", help="Exit 1 when this class (or any class) changed its layer usage."),
]


def diff(
    model_a: ModelA,
    model_b: ModelB,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    encoding: Encoding = None,
    samples: Samples = None,
    seed: SubsetSeed = 0,
    permutations: Permutations = 1000,
    alpha: Level = 0.05,
    correction: Correction = "holm",
    fail_if_changed: FailIfChanged = None,
    scope: DiffScope = "head",
    ablation: Ablation = "mean",
    tie_tol: TieTol = TIE_TOL,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    device: Device = "auto",
    quiet: Quiet = False,
):
    """Compare two versions of a model: per class and layer the change of α, LOLO Δ and contrib, with tests."""
    from ..auditing.diff.compare import DiffSettings
    from ..auditing.diff.job import check_gate, diff_models
    from ..model.laya_model import load_model
    from ..report.diff import diff_markdown, diff_rich_tables
    from ..runtime.config import check_at_least, check_tie_tol
    from ..runtime.errors import LayaError, match_choice
    from ..runtime.fileio import atomic_write_text, check_outputs, strict_json
    from ..runtime.tracking.events import log_diff
    from ..stats.multiple import CORRECTIONS
    from .command import current_run

    check_at_least("--permutations", permutations)
    if not 0 < alpha < 1:
        raise LayaError(f"--alpha must be in (0, 1), got {alpha}")
    correction = match_choice("--correction", correction, CORRECTIONS)
    settings = DiffSettings(permutations, alpha, correction, seed, check_tie_tol(tie_tol))
    check_outputs(json_out, markdown)
    gate = check_gate(fail_if_changed, list(load_model(model_a).classes))
    with progress.enabled(not quiet):
        result = diff_models(
            str(model_a), str(model_b), dataset, data_dir, samples, seed, settings, device=pick_device(device),
            scope=scope.lower(), encoding=encoding, ablation=ablation.lower(),
        )  # fmt: skip
    doc, run = result.to_dict(), current_run()
    doc["options"] = run.record  # the resolved options: defaults, --config, flags (docs/integrations.md)
    tables = [] if quiet else diff_rich_tables(doc)
    wide = wide_console(tables)  # a log or a pipe gets the per-layer table whole, not cut to 80 columns
    for table in tables:
        wide.print(table)
    if json_out is not None:
        atomic_write_text(json_out, strict_json(doc))
    if markdown is not None:
        atomic_write_text(markdown, diff_markdown(doc))
    log_diff(run.track(f"diff {model_a} {model_b}"), doc, [json_out, markdown])
    hit = result.changed if gate == "any" else [c for c in result.changed if c == gate] if gate else []
    if hit:
        err_console.print(f"[bold red]fail-if-changed:[/] layer usage changed significantly: {', '.join(hit)}")
        raise typer.Exit(EXIT_GATE_FAILED)
