"""The command-line options that belong to a command rather than to a setting of a job.

The settings of a job (training, the audit, depth, the data a command reads) are declared once on their
dataclasses (runtime/config.py) and become Typer options through ``cli/declared.py``; what is here are the
options of the command line itself: where outputs go, how they are shown, the gates, the checkpoint read.
Those that share a setting's help read it from its declaration (``help_of``). No torch here: the CLI must
start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..runtime.config import DEVICE_HELP, TIE_TOL_HELP, AuditSettings, DepthSettings, TrainConfig, TrainRequest
from ..runtime.fields import help_of
from ..training.bench import BenchRequest

BENCH = BenchRequest()


# --------------------------------------------------------------------------- everywhere

Device = Annotated[str, typer.Option(help=DEVICE_HELP)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines.")]
Cache = Annotated[bool, typer.Option(help=help_of(TrainRequest, "cache"))]  # laya train's --cache, for the readers
ModelPath = Annotated[Path, typer.Argument(help="A laya checkpoint (model.pt).")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Write every number and setting as JSON to this file.")]
MarkdownOut = Annotated[
    Path | None, typer.Option(help="Write the tables as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY).")
]
MaxMemory = Annotated[
    str | None,
    typer.Option(
        metavar="SIZE",
        help="Memory budget the batch sizes are planned within: a size (2G, 512M) or a fraction of the free "
        "memory (0.5); RSS on the CPU, allocated GPU memory on CUDA (default: 0.5 of the free memory).",
    ),
]
Precision = Annotated[str, typer.Option(help=help_of(TrainConfig, "precision"))]

# --------------------------------------------------------------------------- data

# numpy's generators take no negative seed: refused as the declared setting's is (at least 0)
SubsetSeed = Annotated[int, typer.Option("--seed", min=0, help=help_of(DepthSettings, "seed"))]

# --------------------------------------------------------------------------- backbone and head

ArchImport = Annotated[
    str | None,
    typer.Option(
        "--arch",
        help="Import this architecture (module:callable or file.py:callable) for a checkpoint trained with --arch.",
    ),
]
# --------------------------------------------------------------------------- training

BenchAlign = Annotated[
    float, typer.Option("--align", help="λ for the laya-aligned head of --heads (a laya head trained with --align λ).")
]
# --------------------------------------------------------------------------- audit

Compare = Annotated[
    str,
    typer.Option(
        help="Methods to compare with laya and random: ig, gradxact, atp, saliency, contrib, global (comma list), "
        "'all', or '' for none."
    ),
]
Ablation = Annotated[str, typer.Option(help=help_of(AuditSettings, "ablation"))]  # laya diff
TieTol = Annotated[float, typer.Option("--tie-tol", help=TIE_TOL_HELP)]
PerSample = Annotated[
    bool,
    typer.Option(
        "--per-sample/--no-per-sample",
        help="Keep the per-sample scores in --json (what a --gate-on bound --max-drop baseline needs); "
        "--no-per-sample leaves them out (a smaller file).",
    ),
]
FailUnder = Annotated[
    list[str] | None,
    typer.Option(
        help="Exit 1 when a metric is below a threshold: 'faithfulness=0.7' (every method but random) or "
        "'ig:faithfulness=0.8,laya:deletion@1=0.2'; prefix 'network:' for the network scope "
        "('network:ig:faithfulness=0.8'). Metrics: faithfulness, deletion@1, deletion@1_normalised, aopc, "
        "sufficiency@1, sufficiency@1_normalised, completeness, randomisation, accuracy. Repeatable."
    ),
]
AuditQuiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Print only the verdict line (PASS/FAIL and each failed check); errors still print."
    ),
]
Baseline = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="A previous 'laya audit --json' taken on the same data, samples and settings: show its values and "
        "the change beside each metric; gate with --max-drop.",
    ),
]
MaxDrop = Annotated[
    list[str] | None,
    typer.Option(
        help="Exit 1 when a metric dropped below --baseline by more than allowed: 'faithfulness=0.02' "
        "(absolute, every method but random), 'laya:deletion@1=5%' (relative to the baseline value), "
        "'accuracy=0.01'. Repeatable."
    ),
]
# --------------------------------------------------------------------------- intervals and significance-aware gates

GateOn = Annotated[
    str,
    typer.Option(
        help="'estimate': gate --fail-under/--max-drop on the point value; 'bound': on the confidence interval "
        "(pass, fail or inconclusive)."
    ),
]
InconclusiveExit = Annotated[
    int,
    typer.Option(
        min=0,
        max=255,
        help="Exit code (0-255) when a --gate-on bound check is inconclusive (its interval straddles the bar).",
    ),
]
AllowSettingsChange = Annotated[
    bool,
    typer.Option(
        help="Compare with a --baseline audited with other settings (data, samples, ablation, …) anyway; the "
        "differences are noted."
    ),
]
JunitOut = Annotated[
    Path | None,
    typer.Option(
        "--junit",
        metavar="FILE",
        help="Write the gate checks (--fail-under, --max-drop) as JUnit XML, one test case per check.",
    ),
]
AuditIn = Annotated[
    Path | None,
    typer.Option(
        "--audit",
        metavar="FILE",
        help="A 'laya audit --json' of this model: adds the audit section to report.html (copied into the "
        "export as audit.json).",
    ),
]


# --------------------------------------------------------------------------- depth

Replace = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace output files that already exist (without it an existing output is an error, before any work).",
    ),
]
TruncateOut = Annotated[
    Path | None, typer.Option("--out", help="Where --truncate or --drop writes the smaller checkpoint.")
]
PlotOut = Annotated[
    Path | None,
    typer.Option("--plot", help="Draw accuracy vs backbone compute (truncation, refit, early exit) to this PNG."),
]
DepthIn = Annotated[
    Path | None,
    typer.Option(
        "--depth",
        metavar="FILE",
        help="A 'laya depth --json' result to add to report.html (default: MODEL.depth.json beside the "
        "checkpoint, if there).",
    ),
]


# --------------------------------------------------------------------------- export

ExportOut = Annotated[
    Path,
    typer.Option("--out", metavar="DIR", help="Folder to write (created). A non-empty folder needs --overwrite."),
]
ExportFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Per-sample table format: csv (default), parquet (needs pyarrow) or npz; a language model's "
        "per-token table: parquet (default where pyarrow is installed) or csv.",
    ),
]
Plots = Annotated[
    bool, typer.Option("--plots/--no-plots", help="Draw the PNG figures (report.html is written either way).")
]
Strip = Annotated[
    int, typer.Option("--strip", metavar="K", help="How many samples the image strip shows (0 = no strip).")
]
Overwrite = Annotated[
    bool, typer.Option(help="Replace --out if it holds a previous laya export (never any other folder).")
]
ModelCard = Annotated[
    bool,
    typer.Option(
        "--model-card",
        help="Also write README.md: a Hugging Face model card (model-index with the accuracy and, with --audit, the "
        "audit's metrics; the audit table, the class × layer picture, how it was produced).",
    ),
]
ExportQuiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables; only errors and notes.")]

# --------------------------------------------------------------------------- bench

BenchHeads = Annotated[
    str,
    typer.Option(
        help="Comma list of heads to compare: last, concat, scalarmix, laya, laya-aligned (laya trained with --align)."
    ),
]
BenchSeeds = Annotated[
    int, typer.Option(help="Runs per head; run k uses seed --base-seed + k (init, shuffling, validation split).")
]
BaseSeed = Annotated[int, typer.Option(min=0, help="Seed of the first run (1337: the paper config).")]
BenchOut = Annotated[
    Path, typer.Option(help="Output folder; runs go to OUT/<dataset>-<backbone>/ and finished ones are reused.")
]
BenchAuditSamples = Annotated[
    int,
    typer.Option(
        help="Audit this many test samples (the same seeded subset for every run; more than the test split = all)."
    ),
]
Redo = Annotated[bool, typer.Option(help="Retrain and re-audit every run, even finished ones.")]
BenchObjectives = Annotated[
    str,
    typer.Option(
        "--objective",
        help="--task lm: the objectives trained, each with every seed: kl, ce or kl,ce (comma list).",
    ),
]
# --------------------------------------------------------------------------- info

InfoJson = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a panel.")]
OptionsToml = Annotated[
    bool,
    typer.Option(
        "--options-toml",
        help="Print the options the checkpoint was trained with as a TOML file: 'laya train --config FILE' "
        "reruns the training.",
    ),
]

# --------------------------------------------------------------------------- the command line itself


def _show_version(value: bool) -> None:
    from .version_and_color import show_version

    show_version(value)


Version = Annotated[
    bool,
    typer.Option(
        "--version",
        is_eager=True,
        callback=_show_version,
        help="Print the versions of laya, torch, timm, captum (and transformers, when installed) and exit.",
    ),
]
NoColor = Annotated[
    bool, typer.Option("--no-color", help="No colour in the output (as the NO_COLOR environment variable does).")
]


def _remember(ctx: typer.Context, param: typer.CallbackParam, value):
    """An option the command's function does not take (``command.shared_params``): kept in ``ctx.meta``."""
    ctx.meta[f"laya.{param.name}"] = value
    return value


def _check_log_to(ctx: typer.Context, param: typer.CallbackParam, value: str | None):
    """``--log-to``: a known tracker whose package is installed (else exit 2 before any work), kept in ctx.meta."""
    from ..runtime.tracking.registry import check_log_to

    check_log_to(value)
    return _remember(ctx, param, value)


Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", callback=_remember, help="Also print the resolved options (defaults, --config file, flags)."
    ),
]


def _load_config(ctx: typer.Context, param: typer.CallbackParam, value: Path | None):
    from .config import load_config

    return load_config(ctx, param, value)


Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        is_eager=True,
        callback=_load_config,
        help="Read options from a TOML file (top-level keys and/or a table named after the command; keys are the "
        "long option names). Flags given on the command line override the file (docs/integrations.md).",
    ),
]
LogTo = Annotated[
    str | None,
    typer.Option(
        "--log-to",
        envvar="LAYA_LOG_TO",
        metavar="TRACKER[:TARGET]",
        callback=_check_log_to,
        help="Also log the run to an experiment tracker: mlflow[:TRACKING_URI], tensorboard[:LOG_DIR] or "
        "wandb[:PROJECT] (needs pip install 'laya-audit[mlflow]', '[tensorboard]' or '[wandb]'; "
        "docs/integrations.md). Env: LAYA_LOG_TO.",
    ),
]
