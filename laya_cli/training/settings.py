"""Training's settings: one ``laya train`` job (``TrainJobSettings``) with its head, data and training settings, and
the settings only a language model's training reads (``LMSettings``). The task is a field of the request: a
setting that applies to one task says so in its declaration (``task=``) and is refused for the other
(``runtime.declare.refuse_other_task``). Declared once (``runtime.declare.setting``); no torch.

The defaults are the paper's (docs/metrics.md, docs/usage.md): Adam lr 3e-4, batch 128, ≤ 50 epochs, patience 5,
seed 1337.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from ..auditing.settings import NETWORK_REMOVALS, NETWORK_SCOPES, SCOPES
from ..backbones.defaults import default_text
from ..backbones.spec import POOL_CHOICES, TAP_CHOICES
from ..data.settings import DataSettings
from ..model.settings import HeadSettings, check_alpha_reader, device_map_setting
from ..runtime.declare import (
    COUNT_MAX,
    SEED_MAX,
    STEPS_MAX,
    WIDTH_MAX,
    Settings,
    check_fields,
    normalise,
    refuse_other_task,
    setting,
    split_csv,
)
from ..runtime.environment import CACHE_HELP, device_setting, precision_setting
from ..runtime.errors import LayaError
from ..runtime.fileio import digest

TASKS = ("classify", "lm")
FEATURE_DTYPES = ("float32", "float16", "bfloat16")  # how frozen features are stored (--feature-dtype)
ALIGN_TARGETS = SCOPES  # --align-target: the audit scope α is aligned with (training/network_target.py)
NETWORK_TARGETS = NETWORK_SCOPES  # the targets that remove blocks inside the network (both: the head's too)
ALIGN_SCOPES = ("scorer", "head")  # --align-scope (training/alignment.py)
ALIGN_LOSSES = ("rank", "distill", "both")  # --align-loss (training/alignment.py)
# Each kind of model's defaults in --help's words, written from the table the training job resolves them from
# (backbones/defaults.py): what --help says a kind gets is what it trains with.
KIND_ALIGN = default_text(lambda t: f"{t.align:g} with --align-target {t.target}" if t.align else None, "0")
KIND_TARGET = default_text(lambda t: t.target if t.align else None, "head")
KIND_LOSS = default_text(lambda t: ", ".join(f"{loss} with --pool {pool}" for pool, loss in t.losses) or None, "rank")
KIND_SHARPNESS = default_text(lambda t: f"{t.sharpness:g}" if t.align and t.sharpness != 1 else None, "1")
KIND_REMOVAL = default_text(lambda t: t.removal if t.align and t.removal != "auto" else None, "auto")
KIND_EXIT_AWARE = default_text(lambda t: f"{t.exit_aware:g}" if t.exit_aware else None, "0")
ALIGN_SOURCES = ("given", "default")  # TrainingSettings.align_source (training/defaults.py)
STOP_ON = ("accuracy", "combined")  # --stop-on (training/loop.py)
ENTROPY_SCHEDULES = ("constant", "linear")  # --alpha-entropy-schedule (training/shaping.py)


@dataclass(frozen=True)
class TrainingSettings(Settings):
    PANEL: ClassVar[str] = "Training"

    epochs: int = setting(50, "Maximum epochs.", minimum=1, panel="Main", maximum=STEPS_MAX)
    batch_size: int = setting(128, "Batch size.", minimum=1, maximum=COUNT_MAX)
    lr: float = setting(
        3e-4,
        "Adam learning rate (with --finetune: the head's; the backbone's is --backbone-lr).",
        above=0,
        below=1e30,
        rule="positive and below 1e30 (a float32)",
    )
    backbone_lr: float | None = setting(
        None,
        "--finetune: the backbone's Adam learning rate (the new head learns at --lr). Default: --lr / 10 for a "
        "backbone that starts from trained weights (pretrained, --weights), --lr for one that starts from random "
        "initialisation (mlp/cnn, --no-pretrained) or a module given to the Python API. From trained weights, or "
        "given below --lr, it warms up linearly over the first epoch. Recorded resolved (docs/usage.md#fine-tuning).",
        above=0,
        below=1e30,
        rule="positive and below 1e30 (a float32)",
        task="classify",
    )
    backbone_warmup: bool = setting(
        False,
        "Whether the backbone's rate warms up linearly over the first epoch (resolved with --backbone-lr: a backbone "
        "fine-tuned from trained weights does).",
        cli=False,
    )
    patience: int = setting(5, "Early-stopping patience on validation accuracy.", minimum=1, maximum=STEPS_MAX)
    seed: int = setting(
        1337, "Seed for initialisation, shuffling and the validation split.", minimum=0, maximum=SEED_MAX
    )
    device: str = device_setting()
    align: float | None = setting(
        None,
        "λ of the faithfulness-alignment loss: teaches α to rank layers as removing them moves p_ŷ (laya "
        "heads; 0 = off). Default: per kind of model, from the measurements in docs/results/network-alignment.md "
        f"({KIND_ALIGN}); recorded resolved.",
        minimum=0,
        rule="0 (off) or positive",
        panel="α shaping",
    )
    align_scope: str = setting(
        "scorer",
        "What the alignment loss trains: scorer (the scorer and ψ only, the default) or head (the adapters "
        "too: the whole α path; docs/metrics.md#aligned-training).",
        choices=ALIGN_SCOPES,
        panel="α shaping",
    )
    align_target: str | None = setting(
        None,
        "What --align ranks α against: head (the head's own leave-one-layer-out effects: direct), network (the "
        "network-scope effects `laya audit --scope network` scores α against: each block removed inside the backbone; "
        "a frozen backbone's removals are computed once per run, for a share of its rows; end to end on 32 rows of "
        "every batch; --task lm: each layer bypassed, at 16 positions of one block a batch) or both (the two terms "
        "summed, λ each; --task lm: the head's at the same positions, with the running r̄). Default: the kind of "
        f"model's ({KIND_TARGET}); given alone, --align is 1.",
        choices=ALIGN_TARGETS,
        panel="α shaping",
    )
    align_loss: str | None = setting(
        None,
        "How --align fits α to the effects: rank (RankNet's pairwise loss: their order), distill (cross-entropy to "
        "softmax(Δ / 0.1): their sizes too) or both (the two summed). Default: the kind of model's "
        f"({KIND_LOSS}; docs/results/network-alignment.md); recorded resolved.",
        choices=ALIGN_LOSSES,
        panel="α shaping",
    )
    align_sharpness: float | None = setting(
        None,
        "κ of --align's ranking loss (rank, both): each pair of layers is scored on κ·(log α_i − log α_j), so a pair "
        "counts as ordered once α's log-gap passes about 1/κ and α can keep its order without turning steep. "
        f"Default: per kind of model ({KIND_SHARPNESS}; docs/results/alpha-ceiling.md); recorded resolved.",
        metavar="κ",
        above=0,
        below=1e30,
        rule="positive and below 1e30 (a float32)",
        panel="α shaping",
    )
    align_removal: str = setting(
        "auto",
        "--align-target network: how a block is removed — auto (bypass where every tapped block keeps its input's "
        "shape, as residual blocks do; else mean), mean, zero, bypass or mean-update; recorded resolved. The kind of "
        f"model's own term, when neither --align nor --align-target is given: {KIND_REMOVAL} (and no term where the "
        "blocks cannot be bypassed).",
        choices=("auto", *NETWORK_REMOVALS),
        panel="α shaping",
    )
    align_source: str = setting(
        "given",
        "Where the term came from: given (by the caller) or default (the kind of model's, backbones/defaults.py). "
        "A default term that cannot run on this data (a frozen backbone's network target on loaders of features "
        "only: no inputs to cache its removals from) is dropped with a note; a given one is refused.",
        choices=ALIGN_SOURCES,
        cli=False,
    )
    stop_on: str = setting(
        "accuracy",
        "Early stopping keeps the epoch with the best validation accuracy, or (combined, laya heads) the best "
        "validation accuracy + faithfulness of α.",
        choices=STOP_ON,
        task="classify",
    )
    precision: str = precision_setting(task="classify")
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
        panel="α shaping",
    )
    alpha_entropy: float = setting(
        0.0,
        "λ of a KL-to-uniform penalty on α, λ·(1 − H(α)/log L), that keeps the attention spread over "
        "layers (laya heads; 0 = off; docs/results/collapse.md).",
        metavar="λ",
        minimum=0,
        rule="0 (off) or positive",
        task="classify",
        panel="α shaping",
    )
    alpha_entropy_schedule: str = setting(
        "constant",
        "--alpha-entropy's λ over the epochs: constant, or linear (from λ at epoch 1 to 0 at --epochs).",
        choices=ENTROPY_SCHEDULES,
        task="classify",
        panel="α shaping",
    )
    tau_start: float | None = setting(
        None,
        "Anneal the attention's τ linearly from T0 (epoch 1) to --tau (epoch --epochs) while training "
        "(laya heads); validation and the checkpoint use --tau.",
        metavar="T0",
        above=0,
        task="classify",
        panel="α shaping",
    )
    exit_aware: float | None = setting(
        None,
        "Weight W of exit-aware training: each training sample (--task lm: each position) is also predicted by the "
        "head truncated at a random depth k < L (r̄ above k, α masked and renormalised), the prediction laya "
        "depth's early exit reads; 0 = off. Default: per kind of model, from measurements (docs/depth.md, "
        f"docs/lm.md: {KIND_EXIT_AWARE}, and for a classifier under torchrun, where it runs in one process only); "
        "recorded resolved.",
        metavar="W",
        minimum=0,
        rule="0 (off) or positive",
        panel="α shaping",
    )

    LATER = {
        "align_target": "head",  # align and align_target as resolved (training/defaults.py) for no term
        "align_removal": "auto",
        "align_loss": None,  # resolved by the job, with the backbone's pooling (training/defaults.py)
        "align_sharpness": 1.0,  # as resolved (training/defaults.py) before it existed
        "align": 0.0,
        "align_scope": "scorer",
        "stop_on": "accuracy",
        "layer_dropout": 0.0,
        "alpha_entropy": 0.0,
        "alpha_entropy_schedule": "constant",
        "tau_start": None,
        "exit_aware": 0.0,  # as resolved (training/defaults.py) for no term
    }  # as DataSettings.LATER

    def validate(self) -> TrainingSettings:
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


OBJECTIVES = ("kl", "ce")
LM_EVAL_TOKENS = 20_000
LENSES = ("tuned", "logit", "none")  # --lens: the per-layer baseline trained and measured beside LAYA (docs/lm.md)
# --lens-sample: positions per batch the lens is trained and measured on (docs/lm.md, "What it costs": at 16 the
# tuned lens adds about 0.2x the model's forward to training on SmolLM2's 49k vocabulary; 0 = every position)
LENS_SAMPLE = 16
LENS_TOKENS = 256  # --lens-tokens: held-out positions of the lens table (SmolLM2: about 0.2x the forward at 2,000)


@dataclass(frozen=True)
class LMSettings(Settings):
    """What only ``--task lm`` reads (``laya train``, ``laya bench``; training/lm.py)."""

    PANEL: ClassVar[str] = "Language models (--task lm)"

    objective: str = setting(
        "kl",
        "train on the model's own next-token distribution (kl, as the tuned lens trains) or on the next token (ce).",
        choices=OBJECTIVES,
        task="lm",
    )
    block_size: int | None = setting(
        None,
        "tokens per training block (default: 128, or the model's positions).",
        metavar="T",
        minimum=1,
        task="lm",
        maximum=WIDTH_MAX,
    )
    eval_tokens: int = setting(
        LM_EVAL_TOKENS,
        "held-out positions measured after each epoch and at the end.",
        metavar="N",
        minimum=1,
        task="lm",
        maximum=COUNT_MAX,
    )
    lens: str = setting(
        "tuned",
        "the per-layer baseline beside LAYA: tuned (a translator per layer, trained; the logit lens "
        "measured with it), logit (the logit lens only, nothing trained) or none (no per-layer table).",
        choices=LENSES,
        task="lm",
    )
    lens_sample: int = setting(
        LENS_SAMPLE,
        "positions per batch (a seeded sample) the tuned lens is trained on, every layer of each; "
        "0 = every position (a full-vocabulary readout per layer and position).",
        metavar="K",
        minimum=0,
        rule="0 (every position) or positive",
        task="lm",
        maximum=COUNT_MAX,
    )
    lens_tokens: int = setting(
        LENS_TOKENS,
        "held-out positions (a seeded sample of the --eval-tokens) the lens table is measured on, "
        "each figure with its 95 % interval; 0 = every held-out position (exact).",
        metavar="N",
        minimum=0,
        rule="0 (every held-out position) or positive",
        task="lm",
        maximum=COUNT_MAX,
    )
    device_map: str | None = device_map_setting()


@dataclass(frozen=True)
class TrainJobSettings(Settings):
    """One ``laya train`` job. Its field names are part of ``laya bench``'s run records: keep them. Checked when
    built; a caller that marks the options given explicitly (``mark_given``) checks it again (``validate``): a
    setting of the other task spelled at its default is then refused too."""

    PANEL: ClassVar[str] = "Backbone"

    backbone: str = setting(
        "mlp",
        "mlp, cnn, vit_base, timm:NAME, torchvision:NAME, hf:NAME or hf:FOLDER (Hugging Face transformers), a "
        "torch.export program FILE.pt2, or your own architecture with --arch (docs/backbones.md).",
        panel="Main",
    )
    head: str = setting("laya", "laya, last, concat or scalarmix.", task="classify", panel="Main")
    task: str = setting(
        "classify",
        "classify: a head predicting the dataset's classes; lm: a causal language model's next token at every "
        "position (hf: decoders, --dataset text:PATH; docs/lm.md).",
        choices=TASKS,
        panel="Main",
    )
    head_config: HeadSettings = field(default_factory=HeadSettings)
    data: DataSettings = field(default_factory=DataSettings)
    train: TrainingSettings = field(default_factory=TrainingSettings)
    lm: LMSettings = field(default_factory=LMSettings)
    layers: list[str] = setting(
        help="Comma-separated glob patterns over module names to tap ('*' = one name part, '**' = any).",
        factory=list,
        cli_type=str | None,
        command_default=None,
    )
    taps: str = setting(
        "blocks",
        "Without --layers, what a CNN taps: blocks (its residual blocks whose skip carries their input: the layers "
        "it can lose, bypassable at network scope) or stages (the last block at each resolution). Models without "
        "3 such blocks (ViTs, VGG, the built-ins) tap as before either way.",
        choices=TAP_CHOICES,
        task="classify",
    )
    pool: str = setting(
        "auto",
        "Token pooling for B×N×D layers: auto, cls (first token), mean (over real tokens) or last (the last "
        "real token; text decoders). auto: the family's choice (hf text: last for decoders, cls for encoders).",
        choices=POOL_CHOICES,
        task="classify",
    )
    pretrained: bool | None = setting(
        None,
        "Start from the model's pretrained weights — timm's, torchvision's, a Hugging Face hub model's or folder's — "
        "frozen or fine-tuned (the default for those, unless --weights names a file); --no-pretrained: random "
        "initialisation (frozen, that gives random features: warned). Offline, the weights must be in the local "
        "hub cache (docs/backbones.md).",
        flag="--pretrained/--no-pretrained",
    )  # None: pretrained for hub backbones (vit_base, timm:, torchvision:, hf:) without a --weights file
    weights: str | None = setting(
        None,
        "A state-dict file (.pt/.pth/.bin/.safetensors) for --backbone timm:NAME|torchvision:NAME or --arch.",
        cli_type=Path | None,
        task="classify",
    )
    arch: str | None = setting(
        None,
        "Your own architecture: module.path:callable or path/to/file.py:callable (imported: trusted code, "
        "see docs/backbones.md); its weights come from --weights.",
        task="classify",
    )
    input_size: int | None = setting(
        None,
        "Side of the images the backbone sees (default: its own input size; mlp/cnn: the data's).",
        minimum=1,
        task="classify",
        maximum=WIDTH_MAX,
    )
    max_length: int | None = setting(
        None,
        "Text models: most tokens per text, longer ones truncated (default: min(128, its positions)).",
        minimum=1,
        task="classify",
        maximum=WIDTH_MAX,
    )
    finetune: bool | None = setting(
        None,
        "Train the backbone too, from the weights it starts with (the default for mlp/cnn), or keep it frozen and "
        "cache its features (the default for the others).",
        flag="--finetune/--frozen",
        task="classify",
    )  # None: end to end for built-ins, frozen otherwise
    trust_pickle: bool = setting(
        False,
        "Allow --weights to be a fully pickled nn.Module. This runs code from the file: only for files you trust.",
        task="classify",
    )
    use_cache: bool = setting(True, CACHE_HELP, param="cache", task="classify")
    out: str = setting("model.pt", "Where to write the checkpoint.", cli_type=Path, panel="Main")
    resume: bool = setting(
        False,
        "Continue an interrupted run from the state saved beside --out (same options).",
        task="classify",
        panel="Training",
    )
    feature_dtype: str = setting(
        "float32",
        "Frozen features as stored and trained on: float32, float16 or bfloat16 (halves the feature cache).",
        choices=FEATURE_DTYPES,
        task="classify",
    )
    restart: bool = setting(
        False,
        "Discard the state an interrupted run left beside --out and start over (without --resume or "
        "--restart, such a state is an error).",
        task="classify",
        panel="Training",
    )
    # The command line that asked for the run, resolved ({"command", "values"}), recorded in the checkpoint so
    # ``laya info --options-toml`` can write it back as a --config file (None: not from the command line).
    command_line: dict | None = None

    LATER = {"feature_dtype": "float32", "arch": None, "input_size": None, "max_length": None}  # as DataSettings.LATER
    # taps is not LATER: a run recorded before it tapped a CNN's stages, so it is not the default's run

    # Not part of what the run computes: where it is written, how, and on which device.
    RUN_ONLY = ("out", "resume", "restart", "use_cache", "command_line")

    @property
    def state_path(self):
        return Path(self.out).with_name(Path(self.out).name + ".state")

    def options(self) -> dict:
        """What must match for a run to be continued (``--resume``) or reused (``laya bench``)."""
        d = asdict(self)
        for k in (*self.RUN_ONLY, "task", "lm"):  # a classifier's (a language model's records: training/lm.py)
            d.pop(k)
        d["train"].pop("device")
        d["train"].pop("precision")  # like the device: how the numbers are computed, not which
        d["train"].pop("align_source")  # where the term came from, not what it computes
        parts = ((d, self.LATER), (d["data"], DataSettings.LATER), (d["train"], TrainingSettings.LATER))
        for part, later in (*parts, (d["head_config"], HeadSettings.LATER)):
            for k, default in later.items():
                if part.get(k) == default:
                    part.pop(k)
        return d

    def recorded_options(self) -> dict:
        """``options()`` as JSON holds them: what a training state and laya bench's run records store."""
        return json.loads(json.dumps(self.options(), default=str))

    def fingerprint(self) -> str:
        return digest(**self.options())

    @property
    def is_lm(self) -> bool:
        return self.task == "lm"

    def validate(self) -> TrainJobSettings:
        """The declared checks of every field, then a setting of the other task refused (it would be ignored),
        then the checks that involve several fields."""
        normalise(self, layers=split_csv(self.layers))
        check_fields(self)
        refuse_other_task(self, self.task)
        self.data.validate()
        self.train.validate()
        self.head_config.validate()
        self.lm.validate()
        check_alpha_options(self.train, self.head, self.head_config.alpha_reader)
        return self


def check_alpha_options(train: TrainingSettings, head: str, reader: str = "pooled") -> None:
    """The training options that act on α, for the head that has it: ``--align``, ``--stop-on combined``,
    ``--alpha-entropy`` and ``--tau-start`` on the input-conditioned attention of a laya head, ``--layer-dropout``
    on laya and scalarmix. One line naming the option, before any data is loaded (``laya train``, ``fit``)."""
    if (train.align or train.align_target in NETWORK_TARGETS) and head.lower() != "laya":
        option = "--align" if train.align else "--align-target"
        raise LayaError(f"{option} needs input-conditioned attention α: --head laya (not {head})")
    check_alpha_reader(reader, head)
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
