"""A trained LAYA model: tapped backbone + head + what audit/export need to use it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .backbones import BackboneSpec, TappedBackbone
from .features import backbone_forward, to_float_images
from .heads import HeadOutput


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
    backbone: TappedBackbone
    head: nn.Module
    spec: BackboneSpec
    head_kind: str
    classes: list[str]
    reference: list[Tensor]  # r̄_i: mean training features per layer (the ablation reference)
    checkpoint: dict = field(repr=False, default_factory=dict)

    @property
    def layer_names(self) -> list[str]:
        return self.spec.layers

    @property
    def num_layers(self) -> int:
        return len(self.spec.layers)

    def to(self, device: str) -> "LayaModel":
        self.backbone.to(device)
        self.head.to(device)
        self.reference = [r.to(device) for r in self.reference]
        return self

    def eval(self) -> "LayaModel":
        self.backbone.eval()
        self.head.eval()
        return self

    @torch.no_grad()
    def features(self, images: Tensor) -> list[Tensor]:
        return backbone_forward(self.backbone, to_float_images(images))
