"""The order of a model's calls: ``trace_calls`` records which module ran when (and on what), ``find_chain``
finds whether the taps form a chain that can be continued from a tap, the generic default taps (the longest run of
blocks) and ``prune_after``, the generic cut of a model after its last tap."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError
from .engines import StopForward, call_model, first_tensor
from .pooling import Layouts, TapFormat


@dataclass
class Call:
    start: int
    args: tuple
    kwargs: dict
    end: int = -1
    out: object = None

    @property
    def single_input(self) -> bool:
        return len(self.args) == 1 and not self.kwargs and isinstance(self.args[0], Tensor)


def trace_calls(
    model: nn.Module, x: Tensor, stop_when: Sequence[str] = (), only: Sequence[str] | None = None
) -> dict[str, list[Call]]:
    """Every module call of one forward, in order: start/end ticks, inputs, output.

    With ``stop_when``, the forward stops once all those modules have finished (what a tap run
    would compute). ``only`` limits the hooks to these module names.
    """
    calls: dict[str, list[Call]] = {}
    tick = itertools.count()
    pending = set(stop_when)
    handles = []
    for name, module in model.named_modules():
        if not name or (only is not None and name not in only):
            continue

        def pre(mod, args, kwargs, name=name):
            calls.setdefault(name, []).append(Call(next(tick), args, kwargs))

        def post(mod, args, kwargs, output, name=name):
            c = calls[name][-1]
            c.end, c.out = next(tick), output
            pending.discard(name)
            if stop_when and not pending:
                raise StopForward

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        call_model(model, x)
    except StopForward:
        pass
    finally:
        for h in handles:
            h.remove()
    return calls


def _is_ancestor(a: str, b: str) -> bool:
    return a == "" or b.startswith(a + ".")


def find_chain(calls: dict[str, list[Call]], taps: Sequence[str]) -> list[list[str]] | None:
    """For each pair of consecutive taps, the modules that take tap i's output to tap i+1's.

    A step is the outermost module called next on exactly the previous step's output tensor
    (the same object, as its only input); a step that contains the next tap is descended into.
    None when some tap is not reached this way (skip connections, extra inputs, repeated calls).
    """
    segments = []
    for a, b in zip(taps, taps[1:]):
        if len(calls.get(a, [])) != 1:
            return None
        cur, after, scope, path = calls[a][0].out, calls[a][0].end, "", []
        while True:
            best = None
            for name, cl in calls.items():
                c = cl[0]
                if (
                    c.start > after
                    and c.single_input
                    and c.args[0] is cur
                    and _is_ancestor(scope, name)
                    and name != scope
                    and (best is None or c.start < best[0])
                ):
                    best = (c.start, name)
            if best is None:
                return None
            name = best[1]
            if len(calls[name]) != 1:
                return None
            if name == b:
                path.append(name)
                break
            if _is_ancestor(name, b):  # descend: run its children one by one
                scope, after = name, calls[name][0].start
                continue
            c = calls[name][0]
            if not isinstance(c.out, Tensor):
                return None
            path.append(name)
            cur, after = c.out, c.end
        segments.append(path)
    return segments


@contextlib.contextmanager
def eval_mode(*modules: nn.Module):
    states = [[(m, m.training) for m in mod.modules()] for mod in modules]
    for mod in modules:
        mod.eval()
    try:
        yield
    finally:
        for s in states:
            for m, t in s:
                m.training = t


# --------------------------------------------------------------------------- default taps by rule


def stage_ends(names: Sequence[str], outputs: Sequence, layouts: Layouts) -> list[str]:
    """The last module at each spatial resolution along a chain (what timm calls a stage end).

    Modules whose outputs are not 4-D feature maps are skipped; token sequences have one
    "resolution", so a chain of token blocks keeps only its last block — callers use every
    block for those (isotropic models)."""
    ends: list[str] = []
    last_size = None
    for name, out in zip(names, outputs):
        out = first_tensor(out)
        if not isinstance(out, Tensor) or out.ndim != 4:
            continue
        size = TapFormat(layouts.spatial).spatial(out.shape)
        if ends and size == last_size:
            ends[-1] = name
        else:
            ends.append(name)
        last_size = size
    return ends


def chain_children(model: nn.Module, container: str, x: Tensor) -> tuple[list[str], list]:
    """The children of ``container`` that run in the forward, in call order, with their outputs."""
    parent = model.get_submodule(container) if container else model
    prefix = f"{container}." if container else ""
    names = [prefix + n for n, _ in parent.named_children()]
    calls = trace_calls(model, x, stop_when=[container] if container else (), only=set(names) | {container})
    ran = sorted((cl[0].start, n) for n, cl in calls.items() if n in names and cl and cl[0].end >= 0)
    return [n for _, n in ran], [calls[n][0].out for _, n in ran]


def is_block_container(name: str, module: nn.Module) -> bool:
    return isinstance(module, (nn.Sequential, nn.ModuleList))


def generic_default_taps(model: nn.Module, layouts: Layouts, x: Tensor, is_container=is_block_container) -> list[str]:
    """Default taps of a model that declares none: the longest run of blocks.

    The container (``nn.Sequential``/``nn.ModuleList``, at any depth, else the model itself)
    whose children run most in the forward; one tap per stage when its children are feature
    maps that change resolution, else one per block. Never tapped (``_new_representations``): the model's
    classifier (a Linear whose output the model returns: the logits are what α explains, not a layer),
    and a child without parameters after one with them (a pooling, a dropout, a flatten: it only re-expresses
    what ran before it, and two taps of one representation would split α between them); an activation right
    after a tapped child is tapped in its place.
    """
    calls, model_out = _trace_with_output(model, x)
    best = None
    for name, module in model.named_modules():
        if name and not is_container(name, module):
            continue
        children = [f"{name}.{c}" if name else c for c, _ in module.named_children()]
        ran = sorted((calls[c][0].start, c) for c in children if calls.get(c) and calls[c][0].end >= 0)
        outs = [first_tensor(calls[c][0].out) for _, c in ran]
        ran = [c for (_, c), o in zip(ran, outs) if isinstance(o, Tensor) and o.ndim >= 2]
        ran = _new_representations(model, ran, calls, model_out)
        key = (len(ran), -name.count(".") if name else -99)
        if len(ran) >= 3 and (best is None or key > best[0]):
            best = (key, ran)
    if best is None:
        raise LayaError(
            "this model declares no feature layers and has no run of 3 or more blocks; "
            "choose the layers to tap with --layers 'glob,glob'"
        )
    names = best[1]
    ends = stage_ends(names, [calls[n][0].out for n in names], layouts)
    return ends if len(ends) >= 3 else names


def _trace_with_output(model: nn.Module, x: Tensor) -> tuple[dict[str, list[Call]], Tensor | None]:
    """``trace_calls`` of one forward, and the model's own output (its first tensor) from that forward."""
    seen: list = []
    handle = model.register_forward_hook(lambda module, args, output: seen.append(first_tensor(output)))
    try:
        calls = trace_calls(model, x)
    finally:
        handle.remove()
    return calls, (seen[-1] if seen and isinstance(seen[-1], Tensor) else None)


def _classifier(model: nn.Module, name: str, calls: dict[str, list[Call]], model_out: Tensor | None) -> bool:
    """Whether child ``name`` is the model's classifier: its last computation is an ``nn.Linear`` (itself or one
    inside it) whose output is the model's own output (the same tensor, or the same values: a squeeze or view of
    it). The last block of a backbone without a classifier (a Linear then an activation) is not."""
    if model_out is None:
        return False
    for inner, module in model.get_submodule(name).named_modules():
        full = f"{name}.{inner}" if inner else name
        out = first_tensor(calls[full][0].out) if calls.get(full) else None
        if isinstance(module, nn.Linear) and isinstance(out, Tensor) and _same(out, model_out):
            return True
    return False


def _same(out: Tensor, model_out: Tensor) -> bool:
    if out is model_out:
        return True
    return out.numel() == model_out.numel() and torch.equal(out.detach().reshape(-1), model_out.detach().reshape(-1))


def _new_representations(model: nn.Module, names: list[str], calls: dict, model_out: Tensor | None) -> list[str]:
    """Of a run of children, those that are a representation of their own (docs/backbones.md): never the model's
    classifier (``_classifier``); a parameter-free child once a child with parameters ran is a copy of the tap
    before it (a pooling, a dropout, a flatten: skipped), except an activation right after a tapped child, which
    takes its place (the representation after the nonlinearity, where the paper's MLP is tapped)."""
    kept, learned, previous = [], False, None
    for name in names:
        module = model.get_submodule(name)
        has_parameters = any(True for _ in module.parameters())
        if _classifier(model, name, calls, model_out):
            previous = None
            continue
        if learned and not has_parameters:
            if _is_activation(module) and kept and kept[-1] == previous:
                kept[-1] = previous = name
            continue
        kept.append(name)
        learned, previous = learned or has_parameters, name
    return kept


def _is_activation(module: nn.Module) -> bool:
    """An elementwise nonlinearity of torch's (``nn.ReLU``, ``nn.GELU``, ``nn.SiLU``, …): a new representation of
    what ran before it, not a copy."""
    return type(module).__module__ == "torch.nn.modules.activation"


def prune_after(model: nn.Module, names: Sequence[str], x: Tensor) -> nn.Module:
    """Replace with ``nn.Identity`` every module that does not run before the taps ``names``
    have all fired (it is never reached: the tap run stops there). Modules inside one that ran
    to completion are kept even when not called themselves: their parent may use their
    parameters directly (``nn.MultiheadAttention.out_proj``)."""
    with torch.no_grad(), eval_mode(model):
        calls = trace_calls(model, x, stop_when=names)
    finished = [n for n, cl in calls.items() if cl[0].end >= 0]
    replaced: list[str] = []
    for name, _ in list(model.named_modules()):
        if not name or name in calls or any(_is_ancestor(r, name) for r in replaced + finished):
            continue
        if any(_is_ancestor(name, c) for c in calls):  # a ModuleList its parent iterates: never called itself
            continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, nn.Identity())
        replaced.append(name)
    return model
