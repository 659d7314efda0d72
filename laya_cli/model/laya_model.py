"""A trained LAYA model: tapped backbone + head + what audit/export need to use it.

Also where a model is rebuilt from a checkpoint dict (``model_from_checkpoint``, ``load_model``)
and saved to one (``LayaModel.save``); the file format itself is ``checkpoint.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from .. import backbones as bb
from ..backbones.build import BackboneSpec, TappedBackbone
from ..features.extraction import backbone_forward, to_float_images
from ..runtime.errors import LayaError
from .checkpoint import checkpoint_body, read_checkpoint, save_checkpoint
from .heads import HeadOutput, build_head
from .settings import HeadSettings


class EndToEnd(nn.Module):
    """Images -> backbone taps -> head; what end-to-end training optimises."""

    def __init__(self, backbone: TappedBackbone, head: nn.Module, all_parameters_used: bool = False):
        super().__init__()
        self.backbone, self.head = backbone, head
        # DistributedDataParallel must search for unused parameters unless every one is known to
        # take part in the forward (true of the built-in backbones; timm/torchvision models may
        # carry layers their forward skips).
        self.find_unused_parameters = not all_parameters_used

    def features(self, inputs: list[Tensor]) -> list[Tensor]:
        # bf16 autocast for the backbone on CUDA (features back in float32); the head stays float32.
        return backbone_forward(self.backbone, to_float_images(inputs[0]))

    def forward(self, inputs: list[Tensor]) -> HeadOutput:
        return self.head(self.features(inputs))


@dataclass
class LayaModel:
    """A backbone with its layer taps, a trained head, and what auditing it needs.

    Made by ``laya_cli.fit`` or ``laya_cli.load`` (and by ``laya train``, as a checkpoint).

    Attributes:
        backbone: the tapped backbone, an ``nn.Module``: ``backbone(images) -> [r_1, ..., r_L]``.
        head: the head, an ``nn.Module``: ``head([r_1, ..., r_L]) -> HeadOutput(logits, alpha)``.
        spec: how the checkpoint names and rebuilds the backbone.
        head_kind: ``"laya"``, ``"last"``, ``"concat"`` or ``"scalarmix"``.
        classes: class names in label order.
        reference: r̄_i, the mean training feature of each layer (the reference a removal by mean puts in place).
        checkpoint: the training record (dataset, history, metrics, settings) as in the checkpoint.
        task: ``"classify"`` (a language model's heads, ``LayaLM``, say ``"lm"``): the name ``task_for`` reads.
    """

    task: ClassVar[str] = "classify"
    backbone: TappedBackbone
    head: nn.Module
    spec: BackboneSpec
    head_kind: str
    classes: list[str]
    reference: list[Tensor]  # r̄_i: mean training features per layer (the reference a removal by mean puts in place)
    checkpoint: dict = field(repr=False, default_factory=dict)

    @property
    def layer_names(self) -> list[str]:
        return self.spec.layers

    @property
    def num_layers(self) -> int:
        return len(self.spec.layers)

    def to(self, device: str) -> LayaModel:
        self.backbone.to(device)
        self.head.to(device)
        self.reference = [r.to(device) for r in self.reference]
        return self

    def eval(self) -> LayaModel:
        self.backbone.eval()
        self.head.eval()
        return self

    @torch.no_grad()
    def features(self, images: Tensor) -> list[Tensor]:
        """The pooled layer representations [r_1, ..., r_L] of a batch of images (on the model's device)."""
        params = (*self.backbone.parameters(), *self.head.parameters())
        device = params[0].device if params else images.device
        return backbone_forward(self.backbone, to_float_images(images.to(device)))

    @torch.no_grad()
    def __call__(self, images: Tensor) -> HeadOutput:
        """Predict a batch: ``HeadOutput(logits, alpha)``; ``alpha`` is (B, L), or None for heads without one."""
        return self.head(self.features(images))

    def to_checkpoint(self) -> dict:
        """The checkpoint dict (without the format header) of this model as it is now."""
        meta = self.checkpoint
        if "head" not in meta or "dims" not in meta:
            raise LayaError("this model has no training record to save; make it with laya_cli.fit or laya_cli.load")
        body = checkpoint_body(
            backbone=self.backbone,
            spec=self.spec,
            head=self.head,
            head_config=meta["head"]["config"],
            dims=meta["dims"],
            classes=self.classes,
            dataset=meta.get("dataset", {}),
            reference=self.reference,
            history=meta.get("history", []),
            metrics=meta.get("metrics", {}),
            train_config=meta.get("train_config", {}),
            feature_dtype=meta.get("feature_dtype", "float32"),
            recorded=meta.get("backbone"),
            tap_reference=meta.get("tap_reference"),
            options=meta.get("options"),
        )
        # The question α was trained on (auditing/question.py) stays with the head that learnt it: laya_cli.fit's
        # model and a loaded model save it as laya train wrote it.
        return {**body, "question": meta["question"]} if "question" in meta else body

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint ``laya train`` writes (atomically): ``laya info/audit/export`` read it.

        Args:
            path: the file to write, e.g. ``"model.pt"``.

        Returns:
            The path written.

        Raises:
            LayaError: the file cannot be written (one line naming it and the reason).
        """
        save_checkpoint(self.to_checkpoint(), path)
        return Path(path).expanduser()


# --------------------------------------------------------------------------- rebuilding


def _rebuild_backbone(section: dict, spec: BackboneSpec, module: nn.Module | None) -> TappedBackbone:
    if module is None and spec.name.startswith(bb.USER_BACKBONE):
        cls = spec.name[len(bb.USER_BACKBONE) :]
        raise LayaError(
            f"the backbone is your own model class ({cls}), which laya cannot build from a file: "
            f"load it in Python with laya_cli.load(path, backbone={cls.rpartition('.')[2]}(...))"
        )
    # The zoo rebuilds it (SHA-256 check, pre-format pooling, --arch code) or loads it into ``module``.
    return bb.backbone_from_checkpoint(section, module)


def model_from_checkpoint(ckpt: dict, backbone: nn.Module | None = None) -> LayaModel:
    """Rebuild a LayaModel from a checkpoint dict (``backbone``: the user's module for ``user:`` backbones)."""
    if ckpt.get("task") == "lm":
        raise LayaError(
            "this is a language model's checkpoint (laya train --task lm): laya info and laya depth read it "
            "(docs/lm.md); this command reads classifiers"
        )
    try:
        spec = BackboneSpec.from_dict(ckpt["backbone"]["spec"])
        tapped = _rebuild_backbone(ckpt["backbone"], spec, backbone)
        head = build_head(
            ckpt["head"]["kind"], ckpt["dims"], len(ckpt["classes"]), HeadSettings(**ckpt["head"]["config"])
        )
        head.load_state_dict(ckpt["head"]["weights"])
        tapped.read_positions = getattr(head, "reads_positions", False)  # α reads the taps' positions: packed
    except LayaError:
        raise
    except (KeyError, RuntimeError, TypeError) as e:
        raise LayaError(f"checkpoint is inconsistent: {str(e).splitlines()[0][:160]}") from None
    model = LayaModel(
        tapped, head, spec, ckpt["head"]["kind"], list(ckpt["classes"]), [r.float() for r in ckpt["reference"]], ckpt
    )
    return model.eval()


def load_model(path: str | Path, backbone: nn.Module | None = None) -> LayaModel:
    """Read a checkpoint file (safely, ``weights_only``) and rebuild its model."""
    return model_from_checkpoint(read_checkpoint(path), backbone)
