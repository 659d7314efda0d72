"""timm's declared stages, and how laya reads them.

A timm model declares its stages in ``feature_info``: for each, the module that computes it and its
channels (``num_chs``). Most of the zoo means it: a forward hook on that module reads the stage. Some
families do not — the module is a container that never runs (CoaT's ``serial_blocks1``, Twins' ``block.0``),
is named after a module that does not exist (HRNet's ``stem``), computes several stages at once (CrossViT's
branches), or returns them laid out otherwise than the model declares (SAM-ViT's and VOLO's B×H×W×C blocks,
TNT's pixel tokens, CaiT's blocks without the class token the model counts). For those the stages are read
where timm itself reads them, from ``forward_intermediates`` (``taps.IntermediatesEngine``; taps
``feature_info.<i>``).

Which of the two is decided on the probe batch, never from names: hooks when they give exactly what
``forward_intermediates`` gives there (the same mean over positions, the same class token), else the stages
themselves. Hooks are preferred because they keep what only modules allow (patching in network scope,
continuing from a tap).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .engines import HookEngine, IntermediatesEngine, stage_index, stage_name
from .pooling import Layouts


def feature_info(model: nn.Module) -> list[dict]:
    """The entries of a timm-style ``feature_info`` (a ``FeatureInfo`` or a list of dicts); [] when there is none."""
    info = getattr(model, "feature_info", None)
    info = getattr(info, "info", info)
    return [e for e in info if isinstance(e, dict)] if isinstance(info, (list, tuple)) else []


def reads_stages(model: nn.Module) -> bool:
    """Whether the model's declared stages can be read from its ``forward_intermediates``."""
    return callable(getattr(model, "forward_intermediates", None)) and bool(feature_info(model))


def declared_stages(model: nn.Module) -> list[tuple[str | None, int | None]]:
    """(module, channels) of each stage ``feature_info`` declares. The module is the declared one, else the only
    module whose name ends with it (Gemma 4's ``blocks.3`` is ``encoder.blocks.3``); None when no module is."""
    names = [n for n, _ in model.named_modules() if n]
    known = set(names)
    out: list[tuple[str | None, int | None]] = []
    for entry in feature_info(model):
        module = entry.get("module")
        if isinstance(module, str) and module and module not in known:
            hits = [n for n in names if n.endswith("." + module)]
            module = hits[0] if len(hits) == 1 else None
        out.append((module or None, entry.get("num_chs")))
    return out


def stage_names(model: nn.Module) -> list[str]:
    """``feature_info.<i>`` for each declared stage, where ``forward_intermediates`` can read it."""
    return [stage_name(i) for i in range(len(feature_info(model)))] if reads_stages(model) else []


def stage_indices(model: nn.Module) -> dict[str, int]:
    """Tap name -> declared stage index: every ``feature_info.<i>``, and each module declared for one stage only
    (a module declared for several, like CoaT's ``parallel_blocks``, is no one stage)."""
    stages = declared_stages(model)
    modules = [m for m, _ in stages]
    index = {m: i for i, m in enumerate(modules) if m and modules.count(m) == 1}
    index.update({n: stage_index(n) for n in stage_names(model)})
    return index


def stage_widths(model: nn.Module, taps: Sequence[str]) -> list[int | None]:
    """The declared channels of each tap that is a stage (None for other taps)."""
    stages, index = declared_stages(model), stage_indices(model)
    return [stages[index[t]][1] if t in index else None for t in taps]


def hooks_read_stages(model: nn.Module, modules: Sequence[str], layouts: Layouts, x: Tensor) -> bool:
    """Whether forward hooks on ``modules`` (one per declared stage, in order) read the stages on the probe batch
    ``x``: each module runs, and pooled as ``layouts`` declare gives what ``forward_intermediates`` gives — the
    mean over positions, and the class token where timm returns it. True when ``forward_intermediates`` cannot
    run on ``x`` (nothing to compare with: the declared modules stand)."""
    try:
        timm_engine = IntermediatesEngine(model, [stage_name(i) for i in range(len(modules))])
        want = timm_engine.run(x, len(modules))
    except Exception:
        return True
    try:
        got = HookEngine(model, modules).run(x, len(modules))
        return all(_same_pooled(h, layouts, w, timm_engine.layouts) for h, w in zip(got, want))
    except Exception:  # a module that does not run, an output that cannot be pooled
        return False


def _same_pooled(h: Tensor, layouts: Layouts, ref: Tensor, ref_layouts: Layouts) -> bool:
    fmt, ref_fmt = layouts.resolve(h, "?"), ref_layouts.resolve(ref, "?")
    for how in ("mean", "cls") if ref_fmt.prefix else ("mean",):
        a, b = fmt.pool(h, how), ref_fmt.pool(ref, how)
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
            return False
    return True
