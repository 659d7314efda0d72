"""Every setting of a job, declared once: its flag, help, default and checks on its dataclass field.

Plain dataclasses, no torch. Each field is a ``setting(default, help, …)`` (runtime/fields.py): the command line
builds its options from them (``cli/declared.py``), the Python API takes their names as keywords, ``validate()``
applies the declared checks (``check_fields``) and adds the ones that involve several fields, and the docs'
option tables are written from them (``tools/option_tables.py``). The defaults are the paper's (docs/metrics.md,
docs/usage.md): d* = 96, τ = 1.5, ψ = identity, score_hidden = 192; Adam lr 3e-4, batch 128, ≤ 50 epochs,
patience 5, seed 1337.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import LayaError, match_choice
from .fields import check_fields, setting

PSI_CHOICES = ("identity", "mlp")
READS = ("states", "updates")  # what a language model's LAYA head weighs of each layer (model/lenses.py LayaLM)
POOL_CHOICES = ("auto", "cls", "mean", "last")  # last: the last real token (decoders; text only)
# How a layer is removed (docs/metrics.md, "Removing a layer"): at head scope r_i := its training mean, zero, or
# α_i := 0 (mask); at network scope tap i's output := its training mean, zero, its input (bypass: the block's update
# skipped, as layer-pruning does), or its input + the training mean of its update (mean-update).
HEAD_ABLATIONS = ("mean", "zero", "mask")
NETWORK_ABLATIONS = ("mean", "zero", "bypass", "mean-update")
ABLATIONS = ("mean", "zero", "mask", "bypass", "mean-update")
BY_INPUT = ("bypass", "mean-update")  # network removals that put a block's own input in place of its output
TARGETS = ("predicted", "label")
REDUCES = ("sum", "abs", "l2")
LABELS = ("genre", "artist")
FEATURE_DTYPES = ("float32", "float16", "bfloat16")  # how frozen features are stored (--feature-dtype)
DEVICES = ("auto", "cpu", "cuda", "mps")  # --device (runtime/device.py resolves it)
PRECISIONS = ("auto", "bf16", "fp32")  # --precision of backbone passes (runtime/device.py)


@dataclass(frozen=True)
class Removal:
    """``--ablation`` parsed once: ``name`` as given (the JSON's ``ablation``), ``head`` the removal the head scope
    runs (bypass and mean-update replace a block's output by its input, which the head does not read: there the head
    removes by mean), ``network`` the one the network scope runs (None: mask changes only the head)."""

    name: str
    head: str
    network: str | None

    @classmethod
    def parse(cls, name: str) -> Removal:
        """The removal ``name`` stands for (an ``ABLATIONS`` name, any case), or the one-line error."""
        name = check_choice("--ablation", name, ABLATIONS)
        return cls(name, name if name in HEAD_ABLATIONS else "mean", name if name in NETWORK_ABLATIONS else None)

    def at(self, scope: str, network_scopes: str = "--scope network or both") -> Removal:
        """This removal, checked once against ``scope`` (head, network or both): a network-only removal at head
        scope, or mask (head only) at network scope, is the one-line error."""
        if scope == "head" and self.head != self.name:
            raise LayaError(f"--ablation {self.name} removes a block inside the network: use it with {network_scopes}")
        if scope != "head" and self.network is None:
            raise LayaError(
                f"--scope network patches activations inside the backbone: use --ablation "
                f"{', '.join(NETWORK_ABLATIONS)} (--ablation {self.name} only changes the head)"
            )
        return self


# Data up to this size is held in memory (decoded images of a dataset, features of a split); larger
# data streams: images decoded batch by batch, features in the sharded store (docs/scaling.md).
IN_MEMORY_MB = 1024


def in_memory_budget_mb() -> float:
    """``LAYA_IN_MEMORY_MB`` (0 = always stream), else ``IN_MEMORY_MB``."""
    try:
        return float(os.environ.get("LAYA_IN_MEMORY_MB", IN_MEMORY_MB))
    except ValueError:
        raise LayaError(f"LAYA_IN_MEMORY_MB must be a number of MiB, got {os.environ['LAYA_IN_MEMORY_MB']!r}") from None


def cache_dir():
    """Where laya keeps what it computed once: feature-cache entries, sharded stores, image scans."""
    return Path(os.environ.get("LAYA_CACHE_DIR", Path.home() / ".cache" / "laya" / "features"))


def offline() -> bool:
    """``LAYA_OFFLINE`` set (to anything but empty, 0, false, no, off): laya downloads nothing: no
    dataset, no pretrained weights (the command line also puts the Hugging Face hub offline)."""
    return os.environ.get("LAYA_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")


def digest(**parts) -> str:
    """A short, stable hash of JSON-able parts: feature-cache keys and resume fingerprints."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def diff_options(recorded: dict, wanted: dict, defaults: dict | None = None, prefix: str = "") -> list[str]:
    """Each option that differs, as 'train.lr 0.0003 -> 0.001' (nested dicts by dotted names).

    An option absent from ``recorded`` (one a newer laya added) counts as changed only when
    ``wanted`` sets it to something else than its entry in ``defaults``.
    """
    out = []
    for k in sorted(set(recorded) | set(wanted)):
        want = wanted.get(k)
        have = recorded[k] if k in recorded else (defaults or {}).get(k, None)
        if isinstance(have, dict) and isinstance(want, dict):
            sub = (defaults or {}).get(k)
            out += diff_options(have, want, sub if isinstance(sub, dict) else None, f"{prefix}{k}.")
        elif have != want:
            out.append(f"{prefix}{k} {have!r} -> {want!r}")
    return out


def check_at_least(option: str, value, minimum: int = 1) -> None:
    """One rule for every count option: ``--samples``, ``--epochs``, ``--batch-size``…"""
    if value is not None and value < minimum:
        raise LayaError(f"{option} must be at least {minimum}, got {value}")


def check_choice(option: str, value: str, choices) -> str:
    """The canonical spelling of ``value`` among ``choices`` (case-insensitive), or a LayaError."""
    return match_choice(option, value, choices)


def check_encoding(name: str | None) -> str | None:
    """``--encoding``: Python's name of the text codec (``latin-1`` -> ``iso8859-1``; ``utf-8`` for UTF-8 with or
    without a byte-order mark), None when not given; an unknown name, or a codec that is no text encoding
    (``base64``), is a LayaError."""
    import codecs

    if name is None:
        return None
    try:
        codec = codecs.lookup(name.strip())
    except LookupError:
        codec = None
    if codec is None or not getattr(codec, "_is_text_encoding", True):
        raise LayaError(f"--encoding {name}: not a text encoding Python knows (e.g. utf-8, latin-1, cp1252, utf-16)")
    return "utf-8" if codec.name in ("utf-8", "utf-8-sig") else codec.name


def split_csv(value) -> list[str]:
    """A comma list as its items (a list or tuple is taken as it is; None: none)."""
    if value is None or isinstance(value, (list, tuple)):
        return list(value or [])
    return [v.strip() for v in str(value).split(",") if v.strip()]


DEVICE_HELP = "auto, cpu, cuda or mps (auto: CUDA if available)."


def device_setting():
    """``--device``: the command line's default is auto (resolved by the command), a library object's cpu."""
    return setting("cpu", DEVICE_HELP, choices=DEVICES, command_default="auto")


@dataclass
class HeadConfig:
    d_star: int = setting(96, "Adapter width d*.", flag="--d-star", above=0)
    tau: float = setting(1.5, "Softmax temperature of the attention (fixed).", above=0)
    psi: str = setting("identity", "Shared transform ψ before scoring: identity or mlp.", choices=PSI_CHOICES)
    score_hidden: int = setting(192, "Hidden width of the scoring MLP.", above=0)
    layer_norm: bool = setting(
        False,
        "Normalise every layer's r_i (LayerNorm without affine) before the head's adapters, so each layer "
        "reaches the head at the same scale (docs/results/collapse.md).",
        flag="--layer-norm/--no-layer-norm",
    )
    reads: str | None = setting(
        None,
        "--task lm: what the head weighs of each layer: its state h_i (states), or the update its block added to the "
        "residual stream, h_i − h_{i−1} (updates; h_1 as it is): α then weighs what removing a block removes, and α "
        "uniform reads the model's own last state. Default: updates (a classifier's head reads states) "
        "(docs/lm.md).",
        choices=READS,
    )

    LATER = {"layer_norm": False, "reads": None}  # as DataRequest.LATER

    def validate(self) -> HeadConfig:
        check_fields(self)
        return self

    def to_dict(self) -> dict:
        """As the checkpoint records it: the options added later only when set (a default run's config is what it
        was before them; ``HeadConfig(**d)`` gives their defaults back)."""
        return {k: v for k, v in asdict(self).items() if not (k in self.LATER and v == self.LATER[k])}


ALIGN_TARGETS = ("head", "network", "both")  # --align-target (training/network_target.py)
NETWORK_TARGETS = ("network", "both")  # the targets that remove blocks inside the network (both: head's too)
ALIGN_SCOPES = ("scorer", "head")  # --align-scope (training/alignment.py)
ALIGN_LOSSES = ("rank", "distill", "both")  # --align-loss (training/alignment.py)
ALIGN_SOURCES = ("given", "default")  # TrainConfig.align_source (training/defaults.py)
STOP_ON = ("accuracy", "combined")  # --stop-on (training/loop.py)
ENTROPY_SCHEDULES = ("constant", "linear")  # --alpha-entropy-schedule (training/shaping.py)


@dataclass
class TrainConfig:
    epochs: int = setting(50, "Maximum epochs.", minimum=1)
    batch_size: int = setting(128, "Batch size.", minimum=1)
    lr: float = setting(3e-4, "Adam learning rate.", above=0, below=1e30, rule="positive and below 1e30 (a float32)")
    patience: int = setting(5, "Early-stopping patience on validation accuracy.", minimum=1)
    seed: int = setting(1337, "Seed for initialisation, shuffling and the validation split.", minimum=0)
    device: str = device_setting()
    align: float | None = setting(
        None,
        "λ of the faithfulness-alignment loss: teaches α to rank layers as removing them moves p_ŷ (laya "
        "heads; 0 = off). Default: per kind of model, from the measurements in docs/results/network-alignment.md "
        "(0.3 with --align-target both for the built-in mlp trained end to end, 1 with network for a frozen "
        "Hugging Face transformer and for --task lm; 0 elsewhere); recorded resolved.",
        minimum=0,
        rule="0 (off) or positive",
    )
    align_scope: str = setting(
        "scorer",
        "What the alignment loss trains: scorer (the scorer and ψ only, the default) or head (the adapters "
        "too: the whole α path; docs/metrics.md#aligned-training).",
        choices=ALIGN_SCOPES,
    )
    align_target: str | None = setting(
        None,
        "What --align ranks α against: head (the head's own leave-one-layer-out effects: direct), network (the "
        "network-scope effects `laya audit --scope network` scores α against: each block removed inside the backbone; "
        "a frozen backbone's removals are computed once per run, for a share of its rows; end to end on 32 rows of "
        "every batch; --task lm: each layer bypassed, at 16 positions of one block a batch) or both (the two terms "
        "summed, λ each; --task lm: the head's at the same positions, with the running r̄). Default: the kind of "
        "model's (both for the built-in mlp end to end, network for a frozen hf: transformer and --task lm, else "
        "head); given alone, "
        "--align is 1.",
        choices=ALIGN_TARGETS,
    )
    align_loss: str | None = setting(
        None,
        "How --align fits α to the effects: rank (RankNet's pairwise loss: their order), distill (cross-entropy to "
        "softmax(Δ / 0.1): their sizes too) or both (the two summed). Default: the kind of model's (both for a "
        "frozen Hugging Face transformer with mean pooling, else rank; docs/results/network-alignment.md); "
        "recorded resolved.",
        choices=ALIGN_LOSSES,
    )
    align_removal: str = setting(
        "auto",
        "--align-target network: how a block is removed — auto (bypass where every tapped block keeps its input's "
        "shape, as residual blocks do; else mean), mean, zero, bypass or mean-update; recorded resolved.",
        choices=("auto", *NETWORK_ABLATIONS),
    )
    align_source: str = setting(
        "given",
        "Where the term came from: given (by the caller) or default (the kind of model's, training/defaults.py). "
        "A default term that cannot run on this data (a frozen backbone's network target on loaders of features "
        "only: no inputs to cache its removals from) is dropped with a note; a given one is refused.",
        choices=ALIGN_SOURCES,
        cli=False,
        api=False,
    )
    stop_on: str = setting(
        "accuracy",
        "Early stopping keeps the epoch with the best validation accuracy, or (combined, laya heads) the best "
        "validation accuracy + faithfulness of α.",
        choices=STOP_ON,
    )
    precision: str = setting(
        "auto",
        "Backbone passes: auto (bf16 autocast on bf16-capable CUDA, else fp32), bf16 (CUDA only) or fp32.",
        choices=PRECISIONS,
    )  # recorded resolved (runtime/device.py)
    # Training that keeps α informative (training/shaping.py, docs/results/collapse.md): each sample's α over a
    # random subset of the layers (P each dropped, never all), a KL-to-uniform penalty on α with its schedule,
    # and τ annealed linearly from tau_start (epoch 1) to the head's τ (the last epoch). 0 / None: off.
    layer_dropout: float = setting(
        0.0,
        "Layer dropout while training (laya/scalarmix heads): each sample's α over a random subset of the "
        "layers, each dropped with chance P (never all), renormalised; off at evaluation. 0 = off.",
        metavar="P",
        minimum=0,
        below=1,
        rule="in [0, 1) (the chance each layer is dropped)",
    )
    alpha_entropy: float = setting(
        0.0,
        "λ of a KL-to-uniform penalty on α, λ·(1 − H(α)/log L), that keeps the attention spread over "
        "layers (laya heads; 0 = off; docs/results/collapse.md).",
        metavar="λ",
        minimum=0,
        rule="0 (off) or positive",
    )
    alpha_entropy_schedule: str = setting(
        "constant",
        "--alpha-entropy's λ over the epochs: constant, or linear (from λ at epoch 1 to 0 at --epochs).",
        choices=ENTROPY_SCHEDULES,
    )
    tau_start: float | None = setting(
        None,
        "Anneal the attention's τ linearly from T0 (epoch 1) to --tau (epoch --epochs) while training "
        "(laya heads); validation and the checkpoint use --tau.",
        metavar="T0",
        above=0,
    )
    exit_aware: float | None = setting(
        None,
        "Weight W of exit-aware training: each training sample (--task lm: each position) is also predicted by the "
        "head truncated at a random depth k < L (r̄ above k, α masked and renormalised), the prediction laya "
        "depth's early exit reads; 0 = off. Default: per kind of model, from measurements (1 for --task lm and "
        "the built-in mlp trained end to end, docs/depth.md and docs/lm.md; 0 elsewhere, and for a classifier "
        "under torchrun, where it runs in one process only); recorded resolved.",
        metavar="W",
        minimum=0,
        rule="0 (off) or positive",
    )

    LATER = {
        "align_target": "head",  # align and align_target as resolved (training/defaults.py) for no term
        "align_removal": "auto",
        "align_loss": None,  # resolved by the job, with the backbone's pooling (training/defaults.py)
        "align": 0.0,
        "align_scope": "scorer",
        "stop_on": "accuracy",
        "layer_dropout": 0.0,
        "alpha_entropy": 0.0,
        "alpha_entropy_schedule": "constant",
        "tau_start": None,
        "exit_aware": 0.0,  # as resolved (training/defaults.py) for no term
    }  # as DataRequest.LATER

    def validate(self) -> TrainConfig:
        check_fields(self)
        if self.align_target in NETWORK_TARGETS and self.align == 0:
            raise LayaError(
                f"--align-target {self.align_target} says what --align trains α against: not with --align 0"
            )
        if self.align_removal != "auto" and self.align_target == "head":
            raise LayaError(
                "--align-removal says how --align-target network removes a block: add --align-target network"
            )
        return self

    def shapes_alpha(self) -> list[str]:
        """The options set that train α itself (``--align`` aside): they need a head with α."""
        on = [("--layer-dropout", self.layer_dropout), ("--alpha-entropy", self.alpha_entropy),
              ("--exit-aware", self.exit_aware)]  # fmt: skip
        return [name for name, value in on if value] + (["--tau-start"] if self.tau_start is not None else [])


DATASET_HELP = (
    "digits, fashion-mnist, cifar10, artworks, wordnet-supersenses (text), folder:PATH, "
    "wds:PATH/{000..099}.tar, parquet:PATH, hf-disk:PATH, csv:PATH or jsonl:PATH (text)."
)
ENCODING_HELP = (
    "csv:/jsonl: the files' text encoding, e.g. latin-1, cp1252, utf-16 (default: UTF-8, with or without "
    "a byte-order mark); recorded in the checkpoint, so audit and export read the data the same way."
)
DATA_DIR_HELP = "Where the dataset lives (see docs/datasets.md)."


@dataclass
class DataRequest:
    name: str = setting("digits", DATASET_HELP, param="dataset")
    data_dir: str | None = setting(None, DATA_DIR_HELP)
    image_size: int | None = setting(
        None, "Side of file-based images (default: the backbone's input).", minimum=1
    )  # after loading
    label: str = setting("genre", "artworks only: genre or artist.", choices=LABELS)
    seed: int = setting(1337, "The split's seed: the run's --seed.", cli=False, api=False)
    strict: bool = setting(
        False,
        "Fail on an undecodable image (or a tar sample without image or class) instead of skipping it.",
    )
    image_column: str = setting("image", "parquet:/hf-disk: the column holding the encoded images.")
    label_column: str = setting("label", "parquet:/hf-disk:/csv:/jsonl: the column holding the class (index or name).")
    text_column: str | None = setting(
        None,
        "Text data: the column holding the texts (csv:/jsonl: default 'text'; parquet:/hf-disk: set it for text).",
    )
    encoding: str | None = setting(None, ENCODING_HELP)  # None: UTF-8, with or without a BOM

    # Added after run records existed: left out of TrainRequest.options() while at these defaults, so
    # the fingerprints of earlier runs (--resume states, laya bench records) stay valid.
    LATER = {"image_column": "image", "label_column": "label", "text_column": None, "encoding": None}

    def validate(self) -> DataRequest:
        """UTF-8 (with or without a BOM) is what laya reads by default: never recorded, as None."""
        check_fields(self)
        encoding = check_encoding(self.encoding)
        self.encoding = None if encoding == "utf-8" else encoding
        return self


@dataclass
class TrainRequest:
    """One ``laya train`` job. Its field names are part of ``laya bench``'s run records: keep them."""

    backbone: str = setting("mlp", "mlp, cnn, vit_base, timm:NAME or torchvision:NAME.")
    head: str = setting("laya", "laya, last, concat or scalarmix.")
    head_config: HeadConfig = field(default_factory=HeadConfig)
    data: DataRequest = field(default_factory=DataRequest)
    train: TrainConfig = field(default_factory=TrainConfig)
    layers: list[str] = setting(
        help="Comma-separated glob patterns over module names to tap ('*' = one name part, '**' = any).",
        factory=list,
        cli_type=str | None,
        command_default=None,
    )
    pool: str = setting(
        "auto",
        "Token pooling for B×N×D layers: auto, cls (first token), mean (over real tokens) or last (the last "
        "real token; text decoders). auto: the family's choice (hf text: last for decoders, cls for encoders).",
        choices=POOL_CHOICES,
    )
    pretrained: bool | None = setting(
        None,
        "Load the timm/torchvision pretrained weights (default for frozen hub backbones; needs network or "
        "a local hub cache).",
        flag="--pretrained/--no-pretrained",
    )  # None: pretrained for frozen hub backbones (vit_base, timm:, torchvision:)
    weights: str | None = setting(
        None,
        "A state-dict file (.pt/.pth/.bin/.safetensors) for --backbone timm:NAME|torchvision:NAME or --arch.",
        cli_type=Path | None,
    )
    arch: str | None = setting(
        None,
        "Your own architecture: module.path:callable or path/to/file.py:callable (imported: trusted code, "
        "see docs/backbones.md); its weights come from --weights.",
    )
    input_size: int | None = setting(
        None, "Side of the images the backbone sees (default: its own input size; mlp/cnn: the data's).", minimum=1
    )
    max_length: int | None = setting(
        None, "Text models: most tokens per text, longer ones truncated (default: min(128, its positions)).", minimum=1
    )
    finetune: bool | None = setting(
        None,
        "Train the backbone too (default for mlp/cnn) or keep it frozen and cache features.",
        flag="--finetune/--frozen",
    )  # None: end to end for built-ins, frozen otherwise
    trust_pickle: bool = setting(
        False,
        "Allow --weights to be a fully pickled nn.Module. This runs code from the file: only for files you trust.",
    )
    use_cache: bool = setting(True, "Use the on-disk feature cache for frozen backbones.", param="cache")
    out: str = setting("model.pt", "Where to write the checkpoint.", cli_type=Path, api=False)
    resume: bool = setting(
        False, "Continue an interrupted run from the state saved beside --out (same options).", api=False
    )
    feature_dtype: str = setting(
        "float32",
        "Frozen features as stored and trained on: float32, float16 or bfloat16 (halves the feature cache).",
        choices=FEATURE_DTYPES,
    )
    restart: bool = setting(
        False,
        "Discard the state an interrupted run left beside --out and start over (without --resume or "
        "--restart, such a state is an error).",
        api=False,
    )
    # The command line that asked for the run, resolved ({"command", "values"}), recorded in the checkpoint so
    # ``laya info --options-toml`` can write it back as a --config file (None: not from the command line).
    command_line: dict | None = None

    LATER = {"feature_dtype": "float32", "arch": None, "input_size": None, "max_length": None}  # as DataRequest.LATER

    # Not part of what the run computes: where it is written, how, and on which device.
    RUN_ONLY = ("out", "resume", "restart", "use_cache", "command_line")

    @property
    def state_path(self):
        return Path(self.out).with_name(Path(self.out).name + ".state")

    def options(self) -> dict:
        """What must match for a run to be continued (``--resume``) or reused (``laya bench``)."""
        d = asdict(self)
        for k in self.RUN_ONLY:
            d.pop(k)
        d["train"].pop("device")
        d["train"].pop("precision")  # like the device: how the numbers are computed, not which
        d["train"].pop("align_source")  # where the term came from, not what it computes
        parts = ((d, self.LATER), (d["data"], DataRequest.LATER), (d["train"], TrainConfig.LATER))
        for part, later in (*parts, (d["head_config"], HeadConfig.LATER)):
            for k, default in later.items():
                if part.get(k) == default:
                    part.pop(k)
        return d

    def recorded_options(self) -> dict:
        """``options()`` as JSON holds them: what a training state and laya bench's run records store."""
        return json.loads(json.dumps(self.options(), default=str))

    def fingerprint(self) -> str:
        return digest(**self.options())

    def validate(self) -> TrainRequest:
        self.layers = split_csv(self.layers)
        check_fields(self)
        self.data.validate()
        self.train.validate()
        check_classifier_reads(self.head_config.validate())
        check_alpha_options(self.train, self.head)
        return self


def check_classifier_reads(head: HeadConfig) -> None:
    """A classifier's head weighs the layers' states: ``--reads updates`` is a language model's (measured on
    classifiers and not kept: docs/results/network-alignment.md). One line, before any data is loaded."""
    if head.reads == "updates":
        raise LayaError(f"--reads {head.reads} is for --task lm: a classifier's head weighs the layers' states")


def check_alpha_options(train: TrainConfig, head: str) -> None:
    """The training options that act on α, for the head that has it: ``--align``, ``--stop-on combined``,
    ``--alpha-entropy`` and ``--tau-start`` on the input-conditioned attention of a laya head, ``--layer-dropout``
    on laya and scalarmix. One line naming the option, before any data is loaded (``laya train``, ``fit``)."""
    if (train.align or train.align_target in NETWORK_TARGETS) and head.lower() != "laya":
        option = "--align" if train.align else "--align-target"
        raise LayaError(f"{option} needs input-conditioned attention α: --head laya (not {head})")
    if train.stop_on == "combined" and head.lower() != "laya":
        raise LayaError(f"--stop-on combined scores α's faithfulness: --head laya (not {head})")
    head = head.lower()
    if train.layer_dropout and head not in ("laya", "scalarmix"):
        raise LayaError(f"--layer-dropout drops layers from α: --head laya or scalarmix (not {head})")
    if train.exit_aware and head not in ("laya", "scalarmix"):
        raise LayaError(f"--exit-aware trains the head with α masked above a depth: --head laya or scalarmix "
                        f"(not {head})")  # fmt: skip
    for option in train.shapes_alpha():
        if option not in ("--layer-dropout", "--exit-aware") and head != "laya":
            raise LayaError(f"{option} acts on input-conditioned attention α: --head laya (not {head})")


TASKS = ("classify", "lm")
OBJECTIVES = ("kl", "ce")
LM_EVAL_TOKENS = 20_000
LENSES = ("tuned", "logit", "none")  # --lens: the per-layer baseline trained and measured beside LAYA (docs/lm.md)
# --lens-sample: positions per batch the lens is trained and measured on (docs/lm.md, "What it costs": at 16 the
# tuned lens adds about 0.2x the model's forward to training on SmolLM2's 49k vocabulary; 0 = every position)
LENS_SAMPLE = 16
LENS_TOKENS = 256  # --lens-tokens: held-out positions of the lens table (SmolLM2: about 0.2x the forward at 2,000)


@dataclass
class LMSettings:
    """``--task`` and what only ``--task lm`` reads (``laya train``, ``laya bench``; training/lm.py)."""

    task: str = setting(
        "classify",
        "classify: a head predicting the dataset's classes; lm: a causal language model's next token at every "
        "position (hf: decoders, --dataset text:PATH; docs/lm.md).",
        choices=TASKS,
    )
    objective: str = setting(
        "kl",
        "--task lm: train on the model's own next-token distribution (kl, as the tuned lens trains) or on "
        "the next token (ce).",
        choices=OBJECTIVES,
    )
    block_size: int | None = setting(
        None, "--task lm: tokens per training block (default: 128, or the model's positions).", metavar="T", minimum=1
    )
    eval_tokens: int = setting(
        LM_EVAL_TOKENS,
        "--task lm: held-out positions measured after each epoch and at the end.",
        metavar="N",
        minimum=1,
    )
    lens: str = setting(
        "tuned",
        "--task lm: the per-layer baseline beside LAYA: tuned (a translator per layer, trained; the logit lens "
        "measured with it), logit (the logit lens only, nothing trained) or none (no per-layer table).",
        choices=LENSES,
    )
    lens_sample: int = setting(
        LENS_SAMPLE,
        "--task lm: positions per batch (a seeded sample) the tuned lens is trained on, every layer of each; "
        "0 = every position (a full-vocabulary readout per layer and position).",
        metavar="K",
        minimum=0,
        rule="0 (every position) or positive",
    )
    lens_tokens: int = setting(
        LENS_TOKENS,
        "--task lm: held-out positions (a seeded sample of the --eval-tokens) the lens table is measured on, "
        "each figure with its 95 % interval; 0 = every held-out position (exact).",
        metavar="N",
        minimum=0,
        rule="0 (every held-out position) or positive",
    )
    device_map: str | None = setting(
        None,
        "A language model: transformers places the frozen model over the devices (auto, balanced, "
        "balanced_low_0, sequential; needs accelerate), for a model larger than one device; the heads sit with its "
        "readout (docs/lm.md).",
        metavar="MAP",
    )

    @property
    def is_lm(self) -> bool:
        return self.task == "lm"

    def validate(self) -> LMSettings:
        check_fields(self)
        return self


SCOPES = ("head", "network", "both")  # laya audit --scope (docs/metrics.md, "Two scopes")


@dataclass
class ScopeSettings:
    """Where layers are removed: at the head's inputs (``head``, direct effects), inside the
    backbone (``network``, total effects), or ``both`` with their comparison. Kept apart from
    ``AuditSettings`` so head-scope results and settings stay exactly as they were."""

    scope: str = setting(
        "head",
        "Where a layer is removed: head (at the head's inputs: direct effects), network (patched inside "
        "the backbone, later layers see it: total effects) or both (and their comparison).",
        choices=SCOPES,
    )

    def validate(self) -> ScopeSettings:
        check_fields(self)
        return self


@dataclass
class EvalRequest:
    """The samples a command reads from a checkpoint's data (``laya audit``, ``depth``, ``export``, ``diff``)."""

    samples: int | None = setting(None, "Use a seeded random subset of N test samples (default: all).", minimum=1)
    dataset: str | None = setting(None, "Use another dataset (default: the checkpoint's own test split).")
    data_dir: str | None = setting(None, DATA_DIR_HELP)
    encoding: str | None = setting(None, ENCODING_HELP)

    def validate(self) -> EvalRequest:
        check_fields(self)
        check_encoding(self.encoding)
        return self


# The default noise floor of faithfulness (docs/metrics.md, "Ties"; measured by benchmarks/ties.py): float32's
# rounding of effects Δ on p_ŷ between batch sizes and against float64 stays below it with a margin.
TIE_TOL = 1e-5
TIE_TOL_HELP = (
    "Noise floor of faithfulness and Deletion@1: a sample's effects Δ (and scores) within TOL of each "
    "other are ties (float rounding; default 1e-5 of p_ŷ); 0 = exact ties only."
)


def tie_tol_setting():
    """``--tie-tol``: a finite number in [0, 1) (a probability difference; 0 = exact ties only)."""
    return setting(
        TIE_TOL,
        TIE_TOL_HELP,
        flag="--tie-tol",
        minimum=0,
        below=1,
        rule="in [0, 1) (a difference of p_ŷ; 0 = exact ties only)",
    )


@dataclass
class AuditSettings:
    ablation: str = setting(
        "mean",
        "How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads); "
        "at network scope also bypass (a block's output := its input) or mean-update (input + its mean update).",
        choices=ABLATIONS,
    )  # bypass and mean-update at network scope only
    target: str = setting("predicted", "Class explained: predicted (ŷ) or label (the true class).", choices=TARGETS)
    reduce: str = setting(
        "sum", "Per-layer reduction of gradient attributions: sum (signed), abs or l2.", choices=REDUCES
    )
    steps: int = setting(
        32, "Integrated Gradients: the most steps per sample (with --ig-tol 0: exactly these).", minimum=1
    )
    # IG's completeness tolerance: each sample's steps double from 4 (network scope: 16; auditing.ig_steps) until
    # Captum's convergence delta |δ| ≤ ig_tol·|p_ŷ(x) − p_ŷ(baseline)| or ``steps`` is reached; 0 = always ``steps``.
    ig_tol: float = setting(
        0.001,
        "Integrated Gradients: each sample's steps double from 4 (network scope: 16) until "
        "|convergence delta| <= TOL x |effect| (at most --steps); 0 = always --steps.",
        flag="--ig-tol",
        minimum=0,
        below=1,
        rule="in [0, 1) (0 = always --steps)",
    )
    internal_batch_size: int | None = setting(
        None, "Memory bound: at most this many rows per IG head pass (Captum's internal_batch_size).", minimum=1
    )
    batch_size: int = setting(
        256,
        "Samples per audited batch (default: 256, fewer when --max-memory needs it).",
        minimum=1,
        command_default=None,  # the command line's None: planned within --max-memory
    )
    seed: int = setting(0, "Seed of the --samples subset (and of the random method).", minimum=0)
    by_class: bool = setting(
        False, "Add faithfulness and Deletion@1 per class (with intervals, as --ci).", flag="--by-class"
    )
    device: str = device_setting()
    # The model-randomisation check runs on the first N audited samples, in whole batches (0: skipped):
    # a property of the method, not of a sample, that costs every method once more per cascade stage.
    randomisation_samples: int = setting(
        256,
        "The model-randomisation sanity check runs on the first N audited samples (whole batches; 0 skips it).",
        minimum=0,
    )
    # The deeper metric groups computed (auditing.names.METRIC_GROUPS); faithfulness and Deletion@1 always are.
    metrics: tuple[str, ...] = setting(
        (),
        "Deeper metrics to compute and show: aopc, sufficiency, completeness, randomisation (comma list) or "
        "'all'. Faithfulness and Deletion@1 always are; a gate naming a deeper metric computes its group.",
        flag="--metrics",
        cli_type=str,
        command_default="",
    )
    # Bootstrap intervals of every metric (docs/metrics.md, "Intervals"): the level (0: none) and resamples.
    ci: float = setting(
        0.95,
        "Bootstrap confidence level of every metric's interval and of each method's difference from laya "
        "(0 = no intervals).",
        flag="--ci",
        minimum=0,
        below=1,
        rule="a level in [0, 1) (e.g. 0.95; 0 = no intervals)",
    )
    bootstrap: int = setting(
        1000, "Bootstrap resamples of the samples (seeded, paired across methods).", minimum=0
    )  # ≥ 1 when intervals are on: validate()
    # The noise floor of faithfulness and Deletion@1 (docs/metrics.md, "Ties"): effects Δ (and scores) of one
    # sample within tie_tol of each other are ties; 0 = exact ties only.
    tie_tol: float = tie_tol_setting()

    @property
    def removal(self) -> Removal:
        """``ablation`` parsed (``Removal``): what the head scope and the network scope each remove."""
        return Removal.parse(self.ablation)

    def validate(self) -> AuditSettings:
        check_fields(self)
        self.metrics = tuple(self.metrics)
        check_ci(self.ci, self.bootstrap)
        return self


def check_tie_tol(tol: float) -> float:
    """``--tie-tol``: a finite number in [0, 1) (a probability difference; 0 = exact ties only)."""
    from .fields import check_value, declared_setting

    return float(check_value(declared_setting(AuditSettings, "tie_tol"), tol))


def check_ci(level: float, resamples: int) -> None:
    """``--ci``: a level in [0, 1) (0: no intervals); ``--bootstrap``: resamples, ≥ 1 when intervals are on."""
    if not isinstance(level, (int, float)) or not 0 <= level < 1:
        raise LayaError(f"--ci must be a level in [0, 1) (e.g. 0.95; 0 = no intervals), got {level}")
    if level:
        check_at_least("--bootstrap", resamples, 1)


# Default thresholds of the early-exit sweep (docs/depth.md): a sample stops at the first depth k whose
# truncated prediction has p_max > t (or whose layers ≤ k hold α mass > t); t = 1 never stops early.
EXIT_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0)


def check_unit_interval(option: str, values) -> tuple[float, ...]:
    """Thresholds of a probability-like quantity: each in (0, 1] (a comma list is split)."""
    out = []
    for v in split_csv(values) if isinstance(values, str) else values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise LayaError(f"{option}: '{v}' is not a number") from None
        if not 0 < f <= 1:
            raise LayaError(f"{option} values must be in (0, 1], got {v}")
        out.append(f)
    if not out:
        raise LayaError(f"{option} needs at least one threshold")
    return tuple(sorted(set(out)))


DROP_ORDERS = ("alpha", "block-influence", "network", "reverse", "greedy")  # laya depth --drop: which layers go first


@dataclass
class DepthSettings:
    """``laya depth``: truncation curve, early exit, a truncated checkpoint (docs/depth.md)."""

    batch_size: int = setting(
        256,
        "Samples per evaluated batch (default: 256, fewer when --max-memory needs it).",
        minimum=1,
        command_default=None,  # the command line's None: planned within --max-memory
    )  # samples per head pass
    seed: int = setting(0, "Seed of the --samples subset.", minimum=0)
    refit: bool = setting(
        False,
        "Also retrain a head on the taps ≤ k for each k (any head kind; the checkpoint's training "
        "settings, on its training data).",
        flag="--refit",
    )
    refit_epochs: int | None = setting(
        None, "Maximum epochs of each --refit head (default: the checkpoint's own).", minimum=1
    )
    thresholds: tuple[float, ...] = setting(
        EXIT_THRESHOLDS,
        "Early-exit thresholds in (0, 1], comma list (default: 0.5 … 0.999, 1).",
        cli_type=str | None,
        command_default=None,
    )
    time_repeats: int = setting(
        5, "Timed rounds per depth (the fastest is kept); 0 = count FLOPs only.", minimum=0
    )  # timed passes per depth
    time_batch: int = setting(32, "Images per timed backbone pass.", minimum=1)
    truncate: int | None = setting(
        None, "Write a checkpoint whose backbone stops after tap K (1..L) to --out.", metavar="K"
    )  # K: write a checkpoint cut after tap K
    drop: int | None = setting(
        None,
        "Drop up to K interior layers (bypassed: output := input) in each order and score the test accuracy; "
        "with --out, write the model without the first K layers of --drop-order.",
        metavar="K",
        minimum=1,
    )
    drop_order: str = setting(
        "alpha",
        "Which order --drop K --out follows, least important first: alpha, block-influence, network, reverse "
        "(the deepest first) or greedy.",
        choices=DROP_ORDERS,
    )
    drop_draws: int = setting(3, "Seeded random orders in the --drop table.", param="draws", minimum=0)
    device: str = device_setting()

    def validate(self) -> DepthSettings:
        self.thresholds = check_unit_interval(
            "--thresholds", EXIT_THRESHOLDS if self.thresholds is None else self.thresholds
        )
        check_fields(self)
        if self.drop is not None and (self.truncate is not None or self.refit):
            raise LayaError("--drop analyses dropped layers on its own: run it without --truncate and --refit")
        return self
