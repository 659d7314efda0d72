"""Every command-line option, declared once as an ``Annotated`` type.

Commands use them as ``d_star: DStar = HEAD.d_star``: the help text lives here and the default
comes from the dataclass that owns the setting (``config.py``), so ``laya train``,
``laya bench`` and the library cannot disagree on the paper's defaults. No torch here: the
CLI must start fast.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ..runtime.config import (
    AuditSettings,
    DataRequest,
    DepthSettings,
    HeadConfig,
    ScopeSettings,
    TrainConfig,
    TrainRequest,
)
from ..training.bench import BenchRequest

HEAD, TRAIN, DATA, AUDIT, JOB = HeadConfig(), TrainConfig(), DataRequest(), AuditSettings(), TrainRequest()
DEPTH, SCOPE = DepthSettings(), ScopeSettings()
BENCH = BenchRequest()


def split_csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


# --------------------------------------------------------------------------- everywhere

Device = Annotated[str, typer.Option(help="auto, cpu, cuda or mps (auto: CUDA if available).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines.")]
Cache = Annotated[bool, typer.Option(help="Use the on-disk feature cache for frozen backbones.")]
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
Precision = Annotated[
    str,
    typer.Option(
        help="Backbone passes: auto (bf16 autocast on bf16-capable CUDA, else fp32), bf16 (CUDA only) or fp32."
    ),
]

# --------------------------------------------------------------------------- data

Dataset = Annotated[
    str,
    typer.Option(
        help="digits, fashion-mnist, cifar10, artworks, wordnet-supersenses (text), folder:PATH, "
        "wds:PATH/{000..099}.tar, parquet:PATH, hf-disk:PATH, csv:PATH or jsonl:PATH (text)."
    ),
]
EvalDataset = Annotated[
    str | None, typer.Option(help="Use another dataset (default: the checkpoint's own test split).")
]
DataDir = Annotated[str | None, typer.Option(help="Where the dataset lives (see docs/datasets.md).")]
Label = Annotated[str, typer.Option(help="artworks only: genre or artist.")]
ImageSize = Annotated[int | None, typer.Option(help="Side of file-based images (default: the backbone's input).")]
Strict = Annotated[
    bool,
    typer.Option(help="Fail on an undecodable image (or a tar sample without image or class) instead of skipping it."),
]
ImageColumn = Annotated[str, typer.Option(help="parquet:/hf-disk: the column holding the encoded images.")]
LabelColumn = Annotated[
    str, typer.Option(help="parquet:/hf-disk:/csv:/jsonl: the column holding the class (index or name).")
]
TextColumn = Annotated[
    str | None,
    typer.Option(
        help="Text data: the column holding the texts (csv:/jsonl: default 'text'; parquet:/hf-disk: set it for text)."
    ),
]
Encoding = Annotated[
    str | None,
    typer.Option(
        help="csv:/jsonl: the files' text encoding, e.g. latin-1, cp1252, utf-16 (default: UTF-8, with or without "
        "a byte-order mark); recorded in the checkpoint, so audit and export read the data the same way."
    ),
]
MaxLength = Annotated[
    int | None,
    typer.Option(help="Text models: most tokens per text, longer ones truncated (default: min(128, its positions))."),
]
Samples = Annotated[int | None, typer.Option(help="Use a seeded random subset of N test samples (default: all).")]
SampleSeed = Annotated[int, typer.Option(help="Seed of the --samples subset (and of the random method).")]
SubsetSeed = Annotated[int, typer.Option("--seed", help="Seed of the --samples subset.")]

# --------------------------------------------------------------------------- backbone and head

Backbone = Annotated[str, typer.Option(help="mlp, cnn, vit_base, timm:NAME or torchvision:NAME.")]
Head = Annotated[str, typer.Option(help="laya, last, concat or scalarmix.")]
DStar = Annotated[int, typer.Option("--d-star", help="Adapter width d*.")]
Tau = Annotated[float, typer.Option(help="Softmax temperature of the attention (fixed).")]
Psi = Annotated[str, typer.Option(help="Shared transform ψ before scoring: identity or mlp.")]
ScoreHidden = Annotated[int, typer.Option(help="Hidden width of the scoring MLP.")]
Layers = Annotated[
    str | None,
    typer.Option(help="Comma-separated glob patterns over module names to tap ('*' = one name part, '**' = any)."),
]
Pool = Annotated[
    str,
    typer.Option(
        help="Token pooling for B×N×D layers: auto, cls (first token), mean (over real tokens) or last (the last "
        "real token; text decoders). auto: the family's choice (hf text: last for decoders, cls for encoders)."
    ),
]
Pretrained = Annotated[
    bool | None,
    typer.Option(
        "--pretrained/--no-pretrained",
        help="Load the timm/torchvision pretrained weights (default for frozen hub backbones; needs network or "
        "a local hub cache).",
    ),
]
Weights = Annotated[
    Path | None,
    typer.Option(
        help="A state-dict file (.pt/.pth/.bin/.safetensors) for --backbone timm:NAME|torchvision:NAME or --arch."
    ),
]
Arch = Annotated[
    str | None,
    typer.Option(
        help="Your own architecture: module.path:callable or path/to/file.py:callable (imported: trusted code, "
        "see docs/backbones.md); its weights come from --weights."
    ),
]
InputSize = Annotated[
    int | None,
    typer.Option(help="Side of the images the backbone sees (default: its own input size; mlp/cnn: the data's)."),
]
ArchImport = Annotated[
    str | None,
    typer.Option(
        "--arch",
        help="Import this architecture (module:callable or file.py:callable) for a checkpoint trained with --arch.",
    ),
]
Finetune = Annotated[
    bool | None,
    typer.Option(
        "--finetune/--frozen", help="Train the backbone too (default for mlp/cnn) or keep it frozen and cache features."
    ),
]
FeatureDtype = Annotated[
    str,
    typer.Option(
        help="Frozen features as stored and trained on: float32, float16 or bfloat16 (halves the feature cache)."
    ),
]
TrustPickle = Annotated[
    bool,
    typer.Option(
        help="Allow --weights to be a fully pickled nn.Module. This runs code from the file: only for files you trust."
    ),
]

# --------------------------------------------------------------------------- training

CheckpointOut = Annotated[Path, typer.Option(help="Where to write the checkpoint.")]
Epochs = Annotated[int, typer.Option(help="Maximum epochs.")]
BatchSize = Annotated[int, typer.Option(help="Batch size.")]
Lr = Annotated[float, typer.Option(help="Adam learning rate.")]
Patience = Annotated[int, typer.Option(help="Early-stopping patience on validation accuracy.")]
Align = Annotated[
    float,
    typer.Option(
        help="λ of the faithfulness-alignment loss: teaches α to rank layers as removing them moves p_ŷ (laya "
        "heads; 0 = off, 1 = recommended; docs/metrics.md#aligned-training)."
    ),
]
AlignScope = Annotated[
    str,
    typer.Option(
        help="What the alignment loss trains: scorer (the scorer and ψ only, the default) or head (the adapters "
        "too: the whole α path; docs/metrics.md#aligned-training)."
    ),
]
StopOn = Annotated[
    str,
    typer.Option(
        help="Early stopping keeps the epoch with the best validation accuracy, or (combined, laya heads) the best "
        "validation accuracy + faithfulness of α."
    ),
]
LayerNorm = Annotated[
    bool,
    typer.Option(
        "--layer-norm/--no-layer-norm",
        help="Normalise every layer's r_i (LayerNorm without affine) before the head's adapters, so each layer "
        "reaches the head at the same scale (docs/results/collapse.md).",
    ),
]
LayerDropout = Annotated[
    float,
    typer.Option(
        metavar="P",
        help="Layer dropout while training (laya/scalarmix heads): each sample's α over a random subset of the "
        "layers, each dropped with chance P (never all), renormalised; off at evaluation. 0 = off.",
    ),
]
AlphaEntropy = Annotated[
    float,
    typer.Option(
        metavar="λ",
        help="λ of a KL-to-uniform penalty on α, λ·(1 − H(α)/log L), that keeps the attention spread over "
        "layers (laya heads; 0 = off; docs/results/collapse.md).",
    ),
]
AlphaEntropySchedule = Annotated[
    str,
    typer.Option(help="--alpha-entropy's λ over the epochs: constant, or linear (from λ at epoch 1 to 0 at --epochs)."),
]
TauStart = Annotated[
    float | None,
    typer.Option(
        metavar="T0",
        help="Anneal the attention's τ linearly from T0 (epoch 1) to --tau (epoch --epochs) while training "
        "(laya heads); validation and the checkpoint use --tau.",
    ),
]
BenchAlign = Annotated[
    float, typer.Option("--align", help="λ for the laya-aligned head of --heads (a laya head trained with --align λ).")
]
Seed = Annotated[int, typer.Option(help="Seed for initialisation, shuffling and the validation split.")]
Task = Annotated[
    str,
    typer.Option(
        help="classify: a head predicting the dataset's classes; lm: a causal language model's next token at every "
        "position (hf: decoders, --dataset text:PATH; docs/lm.md)."
    ),
]
Objective = Annotated[
    str,
    typer.Option(
        help="--task lm: train on the model's own next-token distribution (kl, as the tuned lens trains) or on "
        "the next token (ce)."
    ),
]
BlockSize = Annotated[
    int | None,
    typer.Option(metavar="T", help="--task lm: tokens per training block (default: 128, or the model's positions)."),
]
DeviceMap = Annotated[
    str | None,
    typer.Option(
        metavar="MAP",
        help="A language model: transformers places the frozen model over the devices (auto, balanced, "
        "balanced_low_0, sequential; needs accelerate), for a model larger than one device; the heads sit with its "
        "readout (docs/lm.md).",
    ),
]
EvalTokens = Annotated[
    int, typer.Option(metavar="N", help="--task lm: held-out positions measured after each epoch and at the end.")
]
Resume = Annotated[
    bool, typer.Option(help="Continue an interrupted run from the state saved beside --out (same options).")
]
Restart = Annotated[
    bool,
    typer.Option(
        help="Discard the state an interrupted run left beside --out and start over (without --resume or "
        "--restart, such a state is an error)."
    ),
]

# --------------------------------------------------------------------------- audit

Compare = Annotated[
    str,
    typer.Option(
        help="Methods to compare with laya and random: ig, gradxact, atp, saliency, contrib, global (comma list), "
        "'all', or '' for none."
    ),
]
Ablation = Annotated[
    str,
    typer.Option(
        help="How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads); "
        "at network scope also bypass (a block's output := its input) or mean-update (input + its mean update)."
    ),
]
Target = Annotated[str, typer.Option(help="Class explained: predicted (ŷ) or label (the true class).")]
Reduce = Annotated[str, typer.Option(help="Per-layer reduction of gradient attributions: sum (signed), abs or l2.")]
Steps = Annotated[
    int, typer.Option(help="Integrated Gradients: the most steps per sample (with --ig-tol 0: exactly these).")
]
IgTol = Annotated[
    float,
    typer.Option(
        "--ig-tol",
        help="Integrated Gradients: each sample's steps double from 4 (network scope: 16) until "
        "|convergence delta| <= TOL x |effect| (at most --steps); 0 = always --steps.",
    ),
]
TieTol = Annotated[
    float,
    typer.Option(
        "--tie-tol",
        help="Noise floor of faithfulness and Deletion@1: a sample's effects Δ (and scores) within TOL of each "
        "other are ties (float rounding; default 1e-5 of p_ŷ); 0 = exact ties only.",
    ),
]
InternalBatchSize = Annotated[
    int | None,
    typer.Option(help="Memory bound: at most this many rows per IG head pass (Captum's internal_batch_size)."),
]
AuditBatchSize = Annotated[
    int | None, typer.Option(help="Samples per audited batch (default: 256, fewer when --max-memory needs it).")
]
ByClass = Annotated[
    bool, typer.Option("--by-class", help="Add faithfulness and Deletion@1 per class (with intervals, as --ci).")
]
PerSample = Annotated[
    bool,
    typer.Option(
        "--per-sample/--no-per-sample",
        help="Keep the per-sample scores in --json (what a --gate-on bound --max-drop baseline needs); "
        "--no-per-sample leaves them out (a smaller file).",
    ),
]
Scope = Annotated[
    str,
    typer.Option(
        help="Where a layer is removed: head (at the head's inputs: direct effects), network (patched inside "
        "the backbone, later layers see it: total effects) or both (and their comparison)."
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
RandomisationSamples = Annotated[
    int,
    typer.Option(
        help="The model-randomisation sanity check runs on the first N audited samples (whole batches; 0 skips it)."
    ),
]
MetricColumns = Annotated[
    str,
    typer.Option(
        "--metrics",
        help="Deeper metrics to compute and show: aopc, sufficiency, completeness, randomisation (comma list) or "
        "'all'. Faithfulness and Deletion@1 always are; a gate naming a deeper metric computes its group.",
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

CiLevel = Annotated[
    float,
    typer.Option(
        "--ci",
        help="Bootstrap confidence level of every metric's interval and of each method's difference from laya "
        "(0 = no intervals).",
    ),
]
Bootstrap = Annotated[int, typer.Option(help="Bootstrap resamples of the samples (seeded, paired across methods).")]
GateOn = Annotated[
    str,
    typer.Option(
        help="'estimate': gate --fail-under/--max-drop on the point value; 'bound': on the confidence interval "
        "(pass, fail or inconclusive)."
    ),
]
InconclusiveExit = Annotated[
    int, typer.Option(help="Exit code when a --gate-on bound check is inconclusive (its interval straddles the bar).")
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

Refit = Annotated[
    bool,
    typer.Option(
        "--refit",
        help="Also retrain a head on the taps ≤ k for each k (any head kind; the checkpoint's training "
        "settings, on its training data).",
    ),
]
RefitEpochs = Annotated[
    int | None, typer.Option(help="Maximum epochs of each --refit head (default: the checkpoint's own).")
]
Thresholds = Annotated[
    str | None, typer.Option(help="Early-exit thresholds in (0, 1], comma list (default: 0.5 … 0.999, 1).")
]
TimeRepeats = Annotated[int, typer.Option(help="Timed rounds per depth (the fastest is kept); 0 = count FLOPs only.")]
TimeBatch = Annotated[int, typer.Option(help="Images per timed backbone pass.")]
DepthBatchSize = Annotated[
    int | None,
    typer.Option("--batch-size", help="Samples per evaluated batch (default: 256, fewer when --max-memory needs it)."),
]
Truncate = Annotated[
    int | None, typer.Option(metavar="K", help="Write a checkpoint whose backbone stops after tap K (1..L) to --out.")
]
TruncateOut = Annotated[
    Path | None, typer.Option("--out", help="Where --truncate or --drop writes the smaller checkpoint.")
]
Drop = Annotated[
    int | None,
    typer.Option(
        metavar="K",
        help="Drop up to K interior layers (bypassed: output := input) in each order and score the test accuracy; "
        "with --out, write the model without the first K layers of --drop-order.",
    ),
]
DropOrder = Annotated[
    str,
    typer.Option(
        help="Which order --drop K --out follows, least important first: alpha, block-influence, network or greedy."
    ),
]
DropDraws = Annotated[int, typer.Option("--draws", help="Seeded random orders in the --drop table.")]
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
BaseSeed = Annotated[int, typer.Option(help="Seed of the first run (1337: the paper config).")]
BenchOut = Annotated[
    Path, typer.Option(help="Output folder; runs go to OUT/<dataset>-<backbone>/ and finished ones are reused.")
]
BenchAuditSamples = Annotated[
    int,
    typer.Option(
        help="Audit this many test samples (the same seeded subset for every run; more than the test split = all)."
    ),
]
BenchAuditSeed = Annotated[int, typer.Option(help="Seed of the audited subset and of the random method.")]
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

# --------------------------------------------------------------------------- the training job

# The options ``laya train`` and ``laya bench`` share: the backbone, the data, the head's shape and its training.
# ``with_job_options`` adds them to a command (after its own) and hands it one ``JobOptions``; ``train_request``
# turns that into the ``TrainRequest`` a run is.
JOB_OPTIONS = {
    "backbone": (Backbone, JOB.backbone),
    "dataset": (Dataset, DATA.name),
    "data_dir": (DataDir, DATA.data_dir),
    "label": (Label, DATA.label),
    "image_size": (ImageSize, DATA.image_size),
    "strict": (Strict, DATA.strict),
    "image_column": (ImageColumn, DATA.image_column),
    "label_column": (LabelColumn, DATA.label_column),
    "text_column": (TextColumn, DATA.text_column),
    "encoding": (Encoding, DATA.encoding),
    "max_length": (MaxLength, JOB.max_length),
    "d_star": (DStar, HEAD.d_star),
    "tau": (Tau, HEAD.tau),
    "psi": (Psi, HEAD.psi),
    "score_hidden": (ScoreHidden, HEAD.score_hidden),
    "epochs": (Epochs, TRAIN.epochs),
    "batch_size": (BatchSize, TRAIN.batch_size),
    "lr": (Lr, TRAIN.lr),
    "patience": (Patience, TRAIN.patience),
    "layers": (Layers, None),
    "pool": (Pool, JOB.pool),
    "pretrained": (Pretrained, JOB.pretrained),
    "weights": (Weights, None),
    "finetune": (Finetune, JOB.finetune),
    "trust_pickle": (TrustPickle, JOB.trust_pickle),
    "feature_dtype": (FeatureDtype, JOB.feature_dtype),
    "cache": (Cache, JOB.use_cache),
}


@dataclass
class JobOptions:
    """The parsed values of ``JOB_OPTIONS``, by name."""

    backbone: str
    dataset: str
    data_dir: str | None
    label: str
    image_size: int | None
    strict: bool
    image_column: str
    label_column: str
    text_column: str | None
    encoding: str | None
    max_length: int | None
    d_star: int
    tau: float
    psi: str
    score_hidden: int
    epochs: int
    batch_size: int
    lr: float
    patience: int
    layers: str | None
    pool: str
    pretrained: bool | None
    weights: Path | None
    finetune: bool | None
    trust_pickle: bool
    feature_dtype: str
    cache: bool


def with_job_options(command: Callable) -> Callable:
    """``command(job: JobOptions, **own)`` as a Typer command taking ``JOB_OPTIONS`` and then its own options."""
    own = [p for name, p in inspect.signature(command, eval_str=True).parameters.items() if name != "job"]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=alias, default=default)
        for name, (alias, default) in JOB_OPTIONS.items()
    ]

    @functools.wraps(command)
    def run(**values):
        return command(job=JobOptions(**{name: values.pop(name) for name in JOB_OPTIONS}), **values)

    run.__signature__ = inspect.Signature(shared + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own])
    run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}
    del run.__wrapped__  # Typer reads the signature above, not the command's
    return run


def train_request(
    job: JobOptions,
    *,
    head: str,
    out: Path | str,
    seed: int,
    device: str,
    resume: bool = False,
    restart: bool = False,
    arch: str | None = None,
    input_size: int | None = None,
    align: float = TRAIN.align,
    align_scope: str = TRAIN.align_scope,
    stop_on: str = TRAIN.stop_on,
    precision: str = TRAIN.precision,
    layer_norm: bool = HEAD.layer_norm,
    layer_dropout: float = TRAIN.layer_dropout,
    alpha_entropy: float = TRAIN.alpha_entropy,
    alpha_entropy_schedule: str = TRAIN.alpha_entropy_schedule,
    tau_start: float | None = TRAIN.tau_start,
) -> TrainRequest:
    """The training run the shared options (and the ones ``laya train`` adds) describe, validated."""
    head_config = HeadConfig(job.d_star, job.tau, job.psi, job.score_hidden, layer_norm=layer_norm)
    return TrainRequest(
        backbone=job.backbone,
        head=head,
        head_config=head_config,
        data=DataRequest(
            name=job.dataset,
            data_dir=job.data_dir,
            image_size=job.image_size,
            label=job.label,
            seed=seed,
            strict=job.strict,
            image_column=job.image_column,
            label_column=job.label_column,
            text_column=job.text_column,
            encoding=job.encoding,
        ),
        train=TrainConfig(
            epochs=job.epochs,
            batch_size=job.batch_size,
            lr=job.lr,
            patience=job.patience,
            seed=seed,
            device=device,
            align=align,
            align_scope=align_scope,
            stop_on=stop_on,
            precision=precision,
            layer_dropout=layer_dropout,
            alpha_entropy=alpha_entropy,
            alpha_entropy_schedule=alpha_entropy_schedule,
            tau_start=tau_start,
        ),
        layers=split_csv(job.layers),
        pool=job.pool,
        pretrained=job.pretrained,
        weights=str(job.weights) if job.weights else None,
        finetune=job.finetune,
        trust_pickle=job.trust_pickle,
        use_cache=job.cache,
        out=str(out),
        resume=resume,
        restart=restart,
        feature_dtype=job.feature_dtype,
        arch=arch,
        input_size=input_size,
        max_length=job.max_length,
    ).validate()


# --------------------------------------------------------------------------- the command line itself


def _show_version(value: bool) -> None:
    from .manners import show_version

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
