"""The paper's built-in backbones: the MLP and our CNN (trained end to end from scratch)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn


class PaperMLP(nn.Module):
    """The paper's MLP: in -> 512 -> 256 -> 128, each Linear + LayerNorm + GELU."""

    fixed_input_size = True  # flattens C×H×W: takes images of the size it was built for, no other

    def __init__(self, in_features: int, widths: Sequence[int] = (512, 256, 128)):
        super().__init__()
        dims = [in_features, *widths]
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b), nn.GELU()) for a, b in zip(dims, dims[1:])
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x.flatten(1)
        for block in self.blocks:
            x = block(x)
        return x


class SmallCNN(nn.Module):
    """A CIFAR-size CNN: 4 stages of (conv-BN-ReLU) x2, max-pool between stages."""

    def __init__(self, in_channels: int = 3, widths: Sequence[int] = (32, 64, 128, 256)):
        super().__init__()
        chans = [in_channels, *widths]
        stages = []
        for i, (a, b) in enumerate(zip(chans, chans[1:])):
            layers = [] if i == 0 else [nn.MaxPool2d(2, ceil_mode=True)]
            layers += [
                nn.Conv2d(a, b, 3, padding=1, bias=False),
                nn.BatchNorm2d(b),
                nn.ReLU(inplace=True),
                nn.Conv2d(b, b, 3, padding=1, bias=False),
                nn.BatchNorm2d(b),
                nn.ReLU(inplace=True),
            ]
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> Tensor:
        for stage in self.stages:
            x = stage(x)
        return x
