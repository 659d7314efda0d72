"""Backbone compute up to each tap: FLOPs (``torch.utils.flop_counter.FlopCounterMode``) and wall time.

Both run the backbone only up to tap k (``TappedBackbone.forward(x, upto=k)``: the forward stops
right after the last needed tap), so the cost of depth k is what a model cut there pays.

FLOPs are those FlopCounterMode counts: matrix products, convolutions and attention (a multiply-add
is 2 FLOPs). Normalisations, activations and pooling are not counted. PyTorch's CPU attention kernel
(``_scaled_dot_product_flash_attention_for_cpu``) is missing from its table; it is counted here with
PyTorch's own attention formula, so a ViT's FLOPs are the same on CPU and GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count


def _sdpa_cpu(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _custom_mapping() -> dict:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {op: _sdpa_cpu} if op is not None else {}


def count_flops(fn: Callable[[], object], module: torch.nn.Module | None = None) -> int:
    """FLOPs of one call of ``fn`` under FlopCounterMode (no gradient). ``module``: the model ``fn`` runs, whose
    parameters stop requiring gradients meanwhile — FlopCounterMode's module tracker hooks the backward of every
    output that requires one, and fails on an output that is a parameter itself (RF-DETR returns its queries)."""
    params = [p for p in module.parameters() if p.requires_grad] if module is not None else []
    try:
        for p in params:
            p.requires_grad_(False)
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=_custom_mapping()) as counter:
            fn()
    finally:
        for p in params:
            p.requires_grad_(True)
    return int(counter.get_total_flops())


def _eval(backbone):
    was = backbone.training
    backbone.eval()
    return was


def tap_flops(backbone, x: Tensor) -> list[int]:
    """FLOPs per image of the backbone run up to tap k, for k = 1..L (cumulative); ``x`` is one image batch."""
    was = _eval(backbone)
    try:
        n = x.shape[0]
        return [
            count_flops(lambda k=k: backbone(x, upto=k), backbone) // n for k in range(1, len(backbone.layer_names) + 1)
        ]
    finally:
        backbone.train(was)


def model_flops(backbone, x: Tensor) -> int:
    """FLOPs per image of the whole plain model (everything its forward runs, past the last tap too)."""
    was = _eval(backbone)
    try:
        return count_flops(lambda: backbone.whole_model(x), backbone) // x.shape[0]
    finally:
        backbone.train(was)


@torch.no_grad()
def tap_seconds(backbone, x: Tensor, repeats: int = 5) -> tuple[list[list[float]], list[float]]:
    """Wall seconds of the backbone run up to tap k (k = 1..L), one list of rounds per depth, and of the whole plain
    model's rounds: one warm-up pass each, then ``repeats`` rounds, each timing every depth and the full model in
    turn (side by side, so a change of machine load hits all alike). What they measure — medians, intervals, time
    fractions paired round by round — is ``timing``'s to say."""
    was = _eval(backbone)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    L = len(backbone.layer_names)
    runs = [(lambda k=k: backbone(x, upto=k)) for k in range(1, L + 1)]
    runs.append(lambda: backbone.whole_model(x))
    try:
        for run in runs:
            run()
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(repeats):
            for i, run in enumerate(runs):
                sync()
                t0 = time.perf_counter()
                run()
                sync()
                times[i].append(time.perf_counter() - t0)
    finally:
        backbone.train(was)
    return times[:-1], times[-1]
