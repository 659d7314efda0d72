"""What a backbone is (``BackboneSpec``, stored in the checkpoint) and what it expects as input."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

POOL_CHOICES = ("auto", "cls", "mean", "last")  # --pool of B×N×D taps; last: the last real token (decoders; text only)
# --taps without --layers: a CNN's residual blocks (blocks.py; the grain at which it can lose depth), or its stage
# ends (each family's declared stages, as before 2026-12-06). Isotropic models tap their blocks either way.
TAP_CHOICES = ("blocks", "stages")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# The spec name of a backbone that is the user's own nn.Module class (``laya_cli.attach``):
# ``user:<module>.<qualname>``. Nothing can build it from the name; it loads into a module the
# user passes (``laya_cli.load(path, backbone=...)``).
USER_BACKBONE = "user:"


@dataclass
class InputConfig:
    """What the backbone expects: (C, H, W) and the normalisation of [0, 1] pixels."""

    channels: int
    size: tuple[int, int] | None  # None: keep the data's own size
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass
class TextInput:
    """What a token-sequence backbone expects: its tokenizer (``tokenizers`` JSON, stored in the checkpoint so
    audits need no hub), every text padded and truncated to ``max_length`` tokens (one fixed length: the
    network scope's reference activations are per position), padded with ``pad_id`` on the right.

    Token batches travel through laya as B×2×L integer tensors: row 0 the token ids, row 1 the attention mask.
    """

    max_length: int
    tokenizer: str = ""  # tokenizers.Tokenizer JSON; "" until one is chosen or trained
    pad_id: int = 0
    vocab_size: int = 0  # the model's embedding rows: a tokenizer with more ids does not fit
    source: str = ""  # where the tokenizer came from: the hub's, a local dir's, trained on a split

    @property
    def channels(self) -> int:  # the two rows of a token batch (ids, mask): what check_input_fits compares
        return 2


@dataclass
class BackboneSpec:
    """Everything needed to rebuild a backbone (stored in the checkpoint).

    ``name``: ``mlp``, ``cnn``, ``vit_base``, ``timm:NAME``, ``torchvision:NAME``,
    ``arch:MODULE:CALLABLE`` (your own ``nn.Module``) or ``pt2:PATH`` (a ``torch.export`` program).
    """

    name: str
    layers: list[str] = field(default_factory=list)  # tap globs (before resolving) or names
    pool: str = "auto"  # auto | cls | mean
    pretrained: bool = False
    finetune: bool = False
    in_channels: int = 1
    image_size: tuple[int, int] = (8, 8)
    input_size: int | None = None  # side of the images the backbone sees; None: the model's own
    formats: list[str] = field(default_factory=list)  # per tap: NC, NCHW, NHWC, NLC or NLC+P (P prefix tokens)
    max_length: int | None = None  # token sequences: tokens per text (None: images)
    cut: bool = (
        False  # the model ends at its last tap: modules above it are neither built nor stored (laya depth --truncate)
    )
    dropped: list[int] = field(default_factory=list)  # taps whose blocks are skipped, not stored (laya depth --drop)
    task: str = "classify"  # lm: a causal language model read through its own readout at every position (--task lm)
    taps: str = "blocks"  # without layers: blocks (a CNN's residual blocks) or stages (TAP_CHOICES)

    @property
    def reshaped(self) -> bool:
        """Cut or with layers dropped: the checkpoint stores the weights of what is left, loaded after reshaping."""
        return self.cut or bool(self.dropped)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["image_size"] = list(self.image_size)
        if not self.cut:  # only truncated checkpoints carry it: ordinary ones keep their old layout
            d.pop("cut")
        if not self.dropped:  # only checkpoints with dropped layers carry it
            d.pop("dropped")
        if self.task == "classify":  # only language models carry it
            d.pop("task")
        if self.taps == "blocks":  # the layers are stored by name; only a run that asked for stages says so
            d.pop("taps")
        if self.max_length is None:  # image backbones keep the layout they had before token sequences
            d.pop("max_length")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BackboneSpec:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["image_size"] = tuple(d["image_size"])
        return cls(**d)
