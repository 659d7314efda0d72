"""Residual blocks: the grain at which a CNN can lose depth (``--taps blocks``).

A CNN's stages change shape, so a stage cannot be bypassed: removing one leaves the next without an input it can
read, and its "effect" is that of breaking the network. Inside a stage most blocks add their update to a skip that
carries their input unchanged (ResNet's basic and bottleneck blocks without a downsampling shortcut, MobileNetV2's
and EfficientNet's inverted residuals whose input and output shapes match): the network runs without such a block
as it runs with its update set to zero, which is what ``bypass`` removes (the block's output := its input). Those
blocks are the taps ``--taps blocks`` reads, one per block, as a transformer's blocks are.

Which blocks have a skip is read from the block itself, never from its name: each block class the families use
declares it in an attribute (``RESIDUAL_BLOCKS``: class -> the test on an instance). A post-activation block
(ResNet: relu(x + F(x))) bypassed gives x, which is relu(x + 0) whenever its input is already non-negative — the
output of the block before it, which ends with the same ReLU; ``tests/test_cnn_blocks.py`` checks the bypassed
network against a forward written by hand without the block's residual branch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from .chain import eval_mode, find_chain, trace_calls

# "module.ClassName" -> whether an instance adds its update to an unchanged copy of its input
RESIDUAL_BLOCKS: dict[str, Callable[[nn.Module], bool]] = {
    "torchvision.models.resnet.BasicBlock": lambda m: m.downsample is None,
    "torchvision.models.resnet.Bottleneck": lambda m: m.downsample is None,
    "torchvision.models.mobilenetv2.InvertedResidual": lambda m: bool(m.use_res_connect),
    "torchvision.models.mobilenetv3.InvertedResidual": lambda m: bool(m.use_res_connect),
    "torchvision.models.efficientnet.MBConv": lambda m: bool(m.use_res_connect),
    "torchvision.models.efficientnet.FusedMBConv": lambda m: bool(m.use_res_connect),
    "timm.models.resnet.BasicBlock": lambda m: m.downsample is None,
    "timm.models.resnet.Bottleneck": lambda m: m.downsample is None,
    "timm.models._efficientnet_blocks.DepthwiseSeparableConv": lambda m: bool(m.has_skip),
    "timm.models._efficientnet_blocks.InvertedResidual": lambda m: bool(m.has_skip),
    "timm.models._efficientnet_blocks.EdgeResidual": lambda m: bool(m.has_skip),
    "timm.models._efficientnet_blocks.CondConvResidual": lambda m: bool(m.has_skip),
}
MIN_BLOCKS = 3  # fewer residual blocks than this: the model's stages are its taps, as without --taps blocks


def class_key(module: nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def is_residual_block(module: nn.Module) -> bool:
    """Whether ``module`` is a block of a known kind whose skip carries its input unchanged."""
    test = RESIDUAL_BLOCKS.get(class_key(module))
    try:
        return bool(test and test(module))
    except AttributeError:  # a newer library version renamed the attribute: not a block laya knows
        return False


def residual_blocks(model: nn.Module) -> list[str]:
    """The residual blocks of ``model`` with an identity skip, in module order (the forward's order for the CNN
    families above); a block inside another one is not a block of its own."""
    found: list[str] = []
    for name, module in model.named_modules():
        if name and is_residual_block(module) and not any(name.startswith(f + ".") for f in found):
            found.append(name)
    return found


def block_taps(model: nn.Module, probe: Callable[[], Tensor] | None = None) -> list[str] | None:
    """The taps of ``--taps blocks`` for a CNN: its residual blocks, or None — fewer than ``MIN_BLOCKS`` (the
    family's own default taps stand: a ViT's blocks, a VGG's stages), or, with a ``probe`` batch, blocks that are not
    one chain in the forward (HRNet's parallel branches: depth is not a sequence of them)."""
    blocks = residual_blocks(model)
    if len(blocks) < MIN_BLOCKS or (probe is not None and not chained(model, blocks, probe())):
        return None
    return blocks


def chained(model: nn.Module, blocks: Sequence[str], x: Tensor) -> bool:
    """Whether each block runs once and feeds the next through plain module calls on the probe batch ``x``."""
    with torch.no_grad(), eval_mode(model):
        calls = trace_calls(model, x, stop_when=blocks)
    return find_chain(calls, blocks) is not None
