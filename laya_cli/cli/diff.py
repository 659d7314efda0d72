"""``laya diff A.pt B.pt``: what changed between two versions of a model on the same samples (the job:
``auditing.diff.job.diff_models``); exit 1 when ``--fail-if-changed`` names a class (or ``any``) that changed.
Like the other commands it takes ``--config``, ``-v`` and ``--log-to`` (``LayaCommand``, command.py) and ``-q``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ..runtime import progress
from ..runtime.config import TIE_TOL, EvalRequest, LMSettings
from .common import EXIT_GATE_FAILED, err_console, pick_device, print_tables, refuse_device_map, write_outputs
from .declared import Use, with_settings
from .options import Ablation, Device, JsonOut, MarkdownOut, Quiet, Replace, SubsetSeed, TieTol

ModelA = Annotated[Path, typer.Argument(help="The first checkpoint (the baseline, A).", show_default=False)]
ModelB = Annotated[Path, typer.Argument(help="The second checkpoint (the candidate, B).", show_default=False)]
Permutations = Annotated[int, typer.Option(help="Permutations of each paired permutation test.")]
Level = Annotated[float, typer.Option("--alpha", help="Significance level of a changed class, after correction.")]
Correction = Annotated[str, typer.Option(help="Multiple-testing correction over the classes: holm, bh or none.")]
DiffScope = Annotated[
    str,
    typer.Option(
        help="Where a layer is removed for the LOLO effects Δ: head (at the head's inputs: direct effects) or "
        "network (patched inside the backbone: total effects); language models also both."
    ),
]
LmCompare = Annotated[
    str,
    typer.Option(
        "--compare",
        help="Language models: the methods besides laya and random whose per-token faithfulness and Deletion@1 are "
        "compared (ig, gradxact, atp, …; comma list). Classifiers: refused (their diff is per class).",
    ),
]
LmCi = Annotated[
    float, typer.Option("--ci", help="Language models: the confidence level of each change's paired interval.")
]
LmBootstrap = Annotated[
    int, typer.Option(help="Language models: bootstrap resamples of the positions (paired: A and B resampled alike).")
]
FailIfChanged = Annotated[
    str | None,
    typer.Option(metavar="CLASS|any", help="Exit 1 when this class (or any class) changed its layer usage."),
]


@with_settings(data=EvalRequest, lm=Use(LMSettings, only=("device_map",)))
def diff(
    model_a: ModelA,
    model_b: ModelB,
    seed: SubsetSeed = 0,
    permutations: Permutations = 1000,
    alpha: Level = 0.05,
    correction: Correction = "holm",
    fail_if_changed: FailIfChanged = None,
    scope: DiffScope = "head",
    ablation: Ablation = "mean",
    tie_tol: TieTol = TIE_TOL,
    compare: LmCompare = "gradxact",
    ci: LmCi = 0.95,
    bootstrap: LmBootstrap = 1000,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    device: Device = "auto",
    quiet: Quiet = False,
    overwrite: Replace = False,
    *,
    data: EvalRequest,
    lm: LMSettings,
):
    """Compare two versions of a model: per class and layer the change of α, LOLO Δ and contrib, with tests; of a
    language model: per token, the change of each method's faithfulness and Deletion@1, with paired intervals."""
    from ..auditing.diff.compare import DiffSettings
    from ..auditing.diff.job import check_gate, diff_models
    from ..auditing.diff.tokens import checkpoint_kinds
    from ..model.laya_model import load_model
    from ..report.diff import diff_markdown, diff_rich_tables
    from ..runtime.config import check_at_least, check_tie_tol
    from ..runtime.errors import LayaError, match_choice
    from ..runtime.fileio import check_new_outputs, strict_json
    from ..runtime.tracking.events import log_diff
    from ..stats.multiple import CORRECTIONS
    from .command import current_run

    dataset, data_dir, encoding, samples = data.validate().dataset, data.data_dir, data.encoding, data.samples
    check_at_least("--permutations", permutations)
    if not 0 < alpha < 1:
        raise LayaError(f"--alpha must be in (0, 1), got {alpha}")
    correction = match_choice("--correction", correction, CORRECTIONS)
    settings = DiffSettings(permutations, alpha, correction, seed, check_tie_tol(tie_tol))
    check_new_outputs({"--json": json_out, "--markdown": markdown}, overwrite)
    ckpts = checkpoint_kinds(str(model_a), str(model_b))
    given = {"--permutations": permutations, "--alpha": alpha, "--correction": correction,
             "--fail-if-changed": fail_if_changed, "--data-dir": data_dir, "--compare": compare, "--ci": ci,
             "--bootstrap": bootstrap}  # fmt: skip
    refuse_unread(given, language_models=ckpts is not None)
    if ckpts is not None:
        o = LmDiff(compare, scope, ablation, tie_tol, seed, ci, bootstrap, samples, dataset, encoding, lm.device_map)
        return diff_language_models(
            ckpts, (str(model_a), str(model_b)), o, pick_device(device), quiet, (json_out, markdown)
        )
    refuse_device_map(lm.device_map)
    gate = check_gate(fail_if_changed, list(load_model(model_a).classes))
    with progress.enabled(not quiet):
        result = diff_models(
            str(model_a), str(model_b), dataset, data_dir, samples, seed, settings, device=pick_device(device),
            scope=scope.lower(), encoding=encoding, ablation=ablation.lower(),
        )  # fmt: skip
    doc, run = result.to_dict(), current_run()
    doc["options"] = run.record  # the resolved options: defaults, --config, flags (docs/integrations.md)
    print_tables([] if quiet else diff_rich_tables(doc))  # a log or a pipe gets the per-layer table whole
    write_outputs(json_out, lambda: strict_json(doc), markdown, lambda: diff_markdown(doc))
    log_diff(run.track(f"diff {model_a} {model_b}"), doc, [json_out, markdown])
    hit = result.changed if gate == "any" else [c for c in result.changed if c == gate] if gate else []
    if hit:
        err_console.print(f"[bold red]fail-if-changed:[/] layer usage changed significantly: {', '.join(hit)}")
        raise typer.Exit(EXIT_GATE_FAILED)


# The options one kind of model's diff reads alone, at their defaults: given for the other kind, they are refused.
CLASSIFIERS_ONLY = {"--permutations": 1000, "--alpha": 0.05, "--correction": "holm", "--fail-if-changed": None,
                    "--data-dir": None}  # fmt: skip
LANGUAGE_MODELS_ONLY = {"--compare": "gradxact", "--ci": 0.95, "--bootstrap": 1000}


def refuse_unread(given: dict, language_models: bool) -> None:
    """One line naming the options set that this kind of model's diff does not read (they would be ignored)."""
    from ..runtime.errors import LayaError

    other = CLASSIFIERS_ONLY if language_models else LANGUAGE_MODELS_ONLY
    unread = [flag for flag, default in other.items() if given[flag] != default]
    if unread:
        kind = "language models" if language_models else "classifiers"
        raise LayaError(f'{", ".join(unread)}: not read by a diff of {kind} (docs/audit.md, "laya diff")')


@dataclass(frozen=True)
class LmDiff:
    """``laya diff``'s options that a language model's diff reads."""

    compare: str
    scope: str
    ablation: str
    tie_tol: float
    seed: int
    ci: float
    bootstrap: int
    samples: int | None
    dataset: str | None
    encoding: str | None
    device_map: str | None = None  # --device-map: transformers places each frozen model (docs/lm.md)


def diff_language_models(ckpts, paths: tuple[str, str], o: LmDiff, device: str, quiet: bool, files) -> None:
    """Two ``--task lm`` checkpoints audited per token on the same positions and compared (auditing/diff/tokens.py);
    the tables, the JSON and Markdown asked for."""
    from ..auditing.diff import tokens
    from ..auditing.names import parse_methods
    from ..report.diff import lm_diff_markdown, lm_diff_rich_tables
    from ..runtime.config import AuditSettings, check_at_least, check_tie_tol
    from ..runtime.errors import LayaError
    from ..runtime.fileio import strict_json
    from ..runtime.tracking.events import log_diff
    from .audit import TOKENS_AUDITED
    from .command import current_run

    if not 0 < o.ci < 1:
        raise LayaError(f"--ci must be a level in (0, 1) for a language model's diff, got {o.ci}")
    check_at_least("--bootstrap", o.bootstrap)
    if o.ablation.lower() not in ("mean", "bypass"):
        raise LayaError(f"a language model's diff removes a layer by its mean (head) or bypasses it (network): "
                        f"--ablation {o.ablation} applies to classifiers")  # fmt: skip
    settings = AuditSettings(tie_tol=check_tie_tol(o.tie_tol), seed=o.seed, device=device, ci=o.ci).validate()
    with progress.enabled(not quiet):
        doc = tokens.diff_language_models(
            ckpts, paths, parse_methods(o.compare), settings, o.scope.lower(), o.dataset,
            o.samples or TOKENS_AUDITED, o.bootstrap, o.encoding, o.device_map,
        )  # fmt: skip
    run = current_run()
    doc["options"] = run.record
    print_tables([] if quiet else lm_diff_rich_tables(doc))
    write_outputs(files[0], lambda: strict_json(doc), files[1], lambda: lm_diff_markdown(doc))
    log_diff(run.track(f"diff {paths[0]} {paths[1]}"), doc, list(files))
