"""Every setting of a job, with its default and its validation, declared once.

Plain dataclasses, no torch: the command line reads its option defaults from here
(``options.py``), the library takes these objects, and ``laya bench`` composes them. The
defaults are the paper's (docs/metrics.md, docs/usage.md): d* = 96, τ = 1.5, ψ = identity,
score_hidden = 192; Adam lr 3e-4, batch 128, ≤ 50 epochs, patience 5, seed 1337.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field

from .errors import LayaError, match_choice

PSI_CHOICES = ("identity", "mlp")
POOL_CHOICES = ("auto", "cls", "mean", "last")  # last: the last real token (decoders; text only)
# How a layer is removed (docs/metrics.md, "Removing a layer"): at head scope r_i := its training mean, zero, or
# α_i := 0 (mask); at network scope tap i's output := its training mean, zero, its input (bypass: the block's update
# skipped, as layer-pruning does), or its input + the training mean of its update (mean-update).
HEAD_ABLATIONS = ("mean", "zero", "mask")
NETWORK_ABLATIONS = ("mean", "zero", "bypass", "mean-update")
ABLATIONS = ("mean", "zero", "mask", "bypass", "mean-update")
TARGETS = ("predicted", "label")
REDUCES = ("sum", "abs", "l2")
LABELS = ("genre", "artist")
FEATURE_DTYPES = ("float32", "float16", "bfloat16")  # how frozen features are stored (--feature-dtype)

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
    from pathlib import Path

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


@dataclass
class HeadConfig:
    d_star: int = 96
    tau: float = 1.5
    psi: str = "identity"
    score_hidden: int = 192
    layer_norm: bool = False  # --layer-norm: every r_i normalised (LayerNorm without affine) before the adapters

    LATER = {"layer_norm": False}  # as DataRequest.LATER

    def validate(self) -> HeadConfig:
        if self.d_star <= 0:
            raise LayaError(f"--d-star must be positive, got {self.d_star}")
        if not self.tau > 0:
            raise LayaError(f"--tau must be positive, got {self.tau}")
        if self.score_hidden <= 0:
            raise LayaError(f"--score-hidden must be positive, got {self.score_hidden}")
        self.psi = check_choice("--psi", self.psi, PSI_CHOICES)
        return self

    def to_dict(self) -> dict:
        """As the checkpoint records it: the options added later only when set (a default run's config is what it
        was before them; ``HeadConfig(**d)`` gives their defaults back)."""
        return {k: v for k, v in asdict(self).items() if not (k in self.LATER and v == self.LATER[k])}


ALIGN_SCOPES = ("scorer", "head")  # --align-scope (training/alignment.py)
STOP_ON = ("accuracy", "combined")  # --stop-on (training/loop.py)
ENTROPY_SCHEDULES = ("constant", "linear")  # --alpha-entropy-schedule (training/shaping.py)


@dataclass
class TrainConfig:
    epochs: int = 50
    batch_size: int = 128
    lr: float = 3e-4
    patience: int = 5
    seed: int = 1337
    device: str = "cpu"
    align: float = 0.0  # λ of the faithfulness-alignment term (laya heads; 0 = plain training)
    align_scope: str = "scorer"  # what the alignment term trains: the scorer (and ψ) only, or the whole head's α path
    stop_on: str = "accuracy"  # early stopping on validation accuracy, or accuracy + α's faithfulness (combined)
    precision: str = "auto"  # backbone passes: auto, bf16 (CUDA) or fp32 (runtime/device.py); recorded resolved
    # Training that keeps α informative (training/shaping.py, docs/results/collapse.md): each sample's α over a
    # random subset of the layers (P each dropped, never all), a KL-to-uniform penalty on α with its schedule,
    # and τ annealed linearly from tau_start (epoch 1) to the head's τ (the last epoch). 0 / None: off.
    layer_dropout: float = 0.0
    alpha_entropy: float = 0.0
    alpha_entropy_schedule: str = "constant"
    tau_start: float | None = None

    LATER = {
        "align": 0.0,
        "align_scope": "scorer",
        "stop_on": "accuracy",
        "layer_dropout": 0.0,
        "alpha_entropy": 0.0,
        "alpha_entropy_schedule": "constant",
        "tau_start": None,
    }  # as DataRequest.LATER

    def validate(self) -> TrainConfig:
        check_at_least("--epochs", self.epochs)
        check_at_least("--batch-size", self.batch_size)
        if not self.lr > 0:
            raise LayaError(f"--lr must be positive, got {self.lr}")
        check_at_least("--patience", self.patience)
        if not self.align >= 0:
            raise LayaError(f"--align must be 0 (off) or positive, got {self.align}")
        self.align_scope = check_choice("--align-scope", self.align_scope, ALIGN_SCOPES)
        self.stop_on = check_choice("--stop-on", self.stop_on, STOP_ON)
        if not 0 <= self.layer_dropout < 1:
            raise LayaError(
                f"--layer-dropout must be in [0, 1) (the chance each layer is dropped), got {self.layer_dropout}"
            )
        if not self.alpha_entropy >= 0:
            raise LayaError(f"--alpha-entropy must be 0 (off) or positive, got {self.alpha_entropy}")
        self.alpha_entropy_schedule = check_choice(
            "--alpha-entropy-schedule", self.alpha_entropy_schedule, ENTROPY_SCHEDULES
        )
        if self.tau_start is not None and not self.tau_start > 0:
            raise LayaError(f"--tau-start must be positive, got {self.tau_start}")
        return self

    def shapes_alpha(self) -> list[str]:
        """The options set that train α itself (``--align`` aside): they need a head with α."""
        on = [("--layer-dropout", self.layer_dropout), ("--alpha-entropy", self.alpha_entropy)]
        return [name for name, value in on if value] + (["--tau-start"] if self.tau_start is not None else [])


@dataclass
class DataRequest:
    name: str = "digits"
    data_dir: str | None = None
    image_size: int | None = None  # side of file-based images after loading
    label: str = "genre"  # artworks: genre | artist
    seed: int = 1337
    strict: bool = False  # folder data: fail on an undecodable image instead of skipping it
    image_column: str = "image"  # parquet:/hf-disk: the column holding the encoded images
    label_column: str = "label"  # parquet:/hf-disk: the column holding the class (int or name)
    text_column: str | None = None  # csv:/jsonl:/parquet:/hf-disk: the column holding texts (csv/jsonl: "text")
    encoding: str | None = None  # csv:/jsonl: the files' text encoding (None: UTF-8, with or without a BOM)

    # Added after run records existed: left out of TrainRequest.options() while at these defaults, so
    # the fingerprints of earlier runs (--resume states, laya bench records) stay valid.
    LATER = {"image_column": "image", "label_column": "label", "text_column": None, "encoding": None}

    def validate(self) -> DataRequest:
        """UTF-8 (with or without a BOM) is what laya reads by default: never recorded, as None."""
        encoding = check_encoding(self.encoding)
        self.encoding = None if encoding == "utf-8" else encoding
        return self


@dataclass
class TrainRequest:
    """One ``laya train`` job. Its field names are part of ``laya bench``'s run records: keep them."""

    backbone: str = "mlp"
    head: str = "laya"
    head_config: HeadConfig = field(default_factory=HeadConfig)
    data: DataRequest = field(default_factory=DataRequest)
    train: TrainConfig = field(default_factory=TrainConfig)
    layers: list[str] = field(default_factory=list)
    pool: str = "auto"
    pretrained: bool | None = None  # None: pretrained for frozen hub backbones (vit_base, timm:, torchvision:)
    weights: str | None = None  # a user's weights file (state dict), with backbone = its arch
    arch: str | None = None  # the user's own architecture: module.path:callable or file.py:callable
    input_size: int | None = None  # side of the images the backbone sees (None: its own)
    max_length: int | None = None  # text: tokens per text (None: the backbone's default, docs/text.md)
    finetune: bool | None = None  # None: end to end for built-ins, frozen otherwise
    trust_pickle: bool = False
    use_cache: bool = True
    out: str = "model.pt"
    resume: bool = False  # continue from the state an interrupted run left beside --out
    feature_dtype: str = "float32"  # frozen features as stored and trained on: float32, float16, bfloat16
    restart: bool = False  # discard that state and start over (without either, a state there is an error)
    # The command line that asked for the run, resolved ({"command", "values"}), recorded in the checkpoint so
    # ``laya info --options-toml`` can write it back as a --config file (None: not from the command line).
    command_line: dict | None = None

    LATER = {"feature_dtype": "float32", "arch": None, "input_size": None, "max_length": None}  # as DataRequest.LATER

    # Not part of what the run computes: where it is written, how, and on which device.
    RUN_ONLY = ("out", "resume", "restart", "use_cache", "command_line")

    @property
    def state_path(self):
        from pathlib import Path

        return Path(self.out).with_name(Path(self.out).name + ".state")

    def options(self) -> dict:
        """What must match for a run to be continued (``--resume``) or reused (``laya bench``)."""
        d = asdict(self)
        for k in self.RUN_ONLY:
            d.pop(k)
        d["train"].pop("device")
        d["train"].pop("precision")  # like the device: how the numbers are computed, not which
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
        self.data.validate()
        self.train.validate()
        self.head_config.validate()
        self.pool = check_choice("--pool", self.pool, POOL_CHOICES)
        self.feature_dtype = check_choice("--feature-dtype", self.feature_dtype, FEATURE_DTYPES)
        if self.train.align and self.head.lower() != "laya":  # before any data is loaded
            raise LayaError(f"--align needs input-conditioned attention α: --head laya (not {self.head})")
        if self.train.stop_on == "combined" and self.head.lower() != "laya":
            raise LayaError(f"--stop-on combined scores α's faithfulness: --head laya (not {self.head})")
        check_alpha_options(self.train, self.head)
        return self


def check_alpha_options(train: TrainConfig, head: str) -> None:
    """``--layer-dropout`` masks α (laya, scalarmix); ``--alpha-entropy`` and ``--tau-start`` act on the
    input-conditioned attention of a laya head. One line naming the option, before any data is loaded."""
    head = head.lower()
    if train.layer_dropout and head not in ("laya", "scalarmix"):
        raise LayaError(f"--layer-dropout drops layers from α: --head laya or scalarmix (not {head})")
    for option in train.shapes_alpha():
        if option != "--layer-dropout" and head != "laya":
            raise LayaError(f"{option} acts on input-conditioned attention α: --head laya (not {head})")


SCOPES = ("head", "network", "both")  # laya audit --scope (docs/metrics.md, "Two scopes")


@dataclass
class ScopeSettings:
    """Where layers are removed: at the head's inputs (``head``, direct effects), inside the
    backbone (``network``, total effects), or ``both`` with their comparison. Kept apart from
    ``AuditSettings`` so head-scope results and settings stay exactly as they were."""

    scope: str = "head"

    def validate(self) -> ScopeSettings:
        self.scope = check_choice("--scope", self.scope, SCOPES)
        return self


# The default noise floor of faithfulness (docs/metrics.md, "Ties"; measured by benchmarks/ties.py): float32's
# rounding of effects Δ on p_ŷ between batch sizes and against float64 stays below it with a margin.
TIE_TOL = 1e-5


@dataclass
class AuditSettings:
    ablation: str = "mean"  # ABLATIONS: bypass and mean-update at network scope only
    target: str = "predicted"  # predicted | label
    reduce: str = "sum"  # sum | abs | l2
    steps: int = 32  # IG's most steps per sample (``ig_tol`` 0: exactly these)
    # IG's completeness tolerance: each sample's steps double from 4 (network scope: 16; auditing.ig_steps) until
    # Captum's convergence delta |δ| ≤ ig_tol·|p_ŷ(x) − p_ŷ(baseline)| or ``steps`` is reached; 0 = always ``steps``.
    ig_tol: float = 0.001
    internal_batch_size: int | None = None  # IG rows per head pass (memory bound)
    batch_size: int = 256
    seed: int = 0  # the random method and the --samples subset
    by_class: bool = False
    device: str = "cpu"
    # The model-randomisation check runs on the first N audited samples, in whole batches (0: skipped):
    # a property of the method, not of a sample, that costs every method once more per cascade stage.
    randomisation_samples: int = 256
    # The deeper metric groups computed (auditing.names.METRIC_GROUPS); faithfulness and Deletion@1 always are.
    metrics: tuple[str, ...] = ()
    # Bootstrap intervals of every metric (docs/metrics.md, "Intervals"): the level (0: none) and resamples.
    ci: float = 0.95
    bootstrap: int = 1000
    # The noise floor of faithfulness and Deletion@1 (docs/metrics.md, "Ties"): effects Δ (and scores) of one
    # sample within tie_tol of each other are ties; 0 = exact ties only.
    tie_tol: float = TIE_TOL

    def validate(self) -> AuditSettings:
        self.ablation = check_choice("--ablation", self.ablation, ABLATIONS)
        self.target = check_choice("--target", self.target, TARGETS)
        self.reduce = check_choice("--reduce", self.reduce, REDUCES)
        for option, value in (
            ("--steps", self.steps),
            ("--batch-size", self.batch_size),
            ("--internal-batch-size", self.internal_batch_size),
        ):
            check_at_least(option, value)
        check_at_least("--randomisation-samples", self.randomisation_samples, 0)
        if not 0 <= self.ig_tol < 1:
            raise LayaError(f"--ig-tol must be in [0, 1) (0 = always --steps), got {self.ig_tol}")
        self.metrics = tuple(self.metrics)
        check_ci(self.ci, self.bootstrap)
        check_tie_tol(self.tie_tol)
        return self


def check_tie_tol(tol: float) -> float:
    """``--tie-tol``: a finite number in [0, 1) (a probability difference; 0 = exact ties only)."""
    if not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise LayaError(f"--tie-tol must be in [0, 1) (a difference of p_ŷ; 0 = exact ties only), got {tol}")
    return float(tol)


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
    """Thresholds of a probability-like quantity: each in (0, 1]."""
    out = []
    for v in values:
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


DROP_ORDERS = ("alpha", "block-influence", "network", "greedy")  # laya depth --drop: which layers go first


@dataclass
class DepthSettings:
    """``laya depth``: truncation curve, early exit, a truncated checkpoint (docs/depth.md)."""

    batch_size: int = 256  # samples per head pass
    seed: int = 0  # the --samples subset
    refit: bool = False  # also retrain a head on the taps ≤ k for every k (or for --truncate K)
    refit_epochs: int | None = None  # None: the checkpoint's own --epochs
    thresholds: tuple[float, ...] = EXIT_THRESHOLDS  # the early-exit sweep
    time_repeats: int = 5  # timed passes per depth (the fastest is kept); 0 = no timing
    time_batch: int = 32  # images per timed pass
    truncate: int | None = None  # K: write a checkpoint cut after tap K
    drop: int | None = None  # K: the drop table up to K interior layers dropped (and with --out, a checkpoint)
    drop_order: str = "alpha"  # which order --drop K --out writes: one of DROP_ORDERS
    drop_draws: int = 3  # random orders in the drop table
    device: str = "cpu"

    def validate(self) -> DepthSettings:
        check_at_least("--drop", self.drop)
        check_at_least("--draws", self.drop_draws, 0)
        self.drop_order = check_choice("--drop-order", self.drop_order, DROP_ORDERS)
        if self.drop is not None and (self.truncate is not None or self.refit):
            raise LayaError("--drop analyses dropped layers on its own: run it without --truncate and --refit")
        check_at_least("--batch-size", self.batch_size)
        check_at_least("--refit-epochs", self.refit_epochs)
        check_at_least("--time-repeats", self.time_repeats, 0)
        check_at_least("--time-batch", self.time_batch)
        self.thresholds = check_unit_interval("--thresholds", self.thresholds)
        return self
