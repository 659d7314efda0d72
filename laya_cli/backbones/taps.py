"""Taps: run a model up to tap k, read the raw tap outputs, pool them, continue from a tap.

One mechanism (DESIGN §4) that depth analysis, truncated models, patched audits and cheaper
extraction all use:

- ``TappedBackbone.forward(x, upto=k)`` -> ``[r_1 .. r_k]``; the forward stops right after the
  last needed tap (hooks raise a stop signal; torchvision's FX extractor prunes the graph).
- ``activations(x, upto=k)`` -> the raw tap outputs ``[h_1 .. h_k]``; ``pool_tap(i, h)`` -> r_i.
- ``can_continue`` / ``continue_from(i, h_i, upto)`` -> ``[h_{i+1} ..]`` for models that are a chain
  of their tapped modules (found and verified on a probe batch, never assumed from names).
- ``truncated(k)`` -> a backbone that stops at tap k and holds no module above it.

Tap indices ``i`` are 0-based (``layer_names[i]``); ``upto`` counts taps, so
``activations(x)[i + 1:upto] == continue_from(i, activations(x)[i], upto)``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..runtime.errors import LayaError
from .pooling import Layouts, TapFormat
from .spec import InputConfig, TextInput


class _StopForward(BaseException):
    """Raised from a hook once every needed tap has fired: the rest of the forward is skipped.

    A BaseException so that a model's own ``except Exception`` cannot swallow it."""


# --------------------------------------------------------------------------- layer globs


def glob_to_regex(pattern: str) -> re.Pattern:
    """'*' matches one module-name component, '**' any number of components."""
    out = ""
    for part in re.split(r"(\*\*|\*|\?)", pattern):
        out += {"**": r".*", "*": r"[^.]*", "?": r"[^.]"}.get(part, re.escape(part))
    return re.compile(out + r"\Z")


def match_layers(candidates: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Candidates matching any glob, in the candidates' order; a one-line error when none does."""
    regexes = [glob_to_regex(p) for p in patterns]
    chosen = [n for n in candidates if any(r.match(n) for r in regexes)]
    if not chosen:
        sample = ", ".join(list(candidates)[:6])
        raise LayaError(f"--layers {','.join(patterns)} matched no module (module names look like: {sample})")
    return chosen


# --------------------------------------------------------------------------- input adapter


class InputAdapter(nn.Module):
    """Turns [0, 1] image batches into what the backbone expects (channels, size, norm)."""

    def __init__(self, cfg: InputConfig):
        super().__init__()
        self.channels, self.size = cfg.channels, cfg.size
        self.register_buffer("mean", torch.tensor(cfg.mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 3 and not x.is_floating_point():
            raise LayaError(
                "this is an image model: it takes B×C×H×W images, not B×2×L token batches "
                "(text given to an image model?)"
            )
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1) if x.shape[1] == 1 else x.mean(1, keepdim=True)
        if self.size is not None and tuple(x.shape[-2:]) != tuple(self.size):
            x = F.interpolate(x, size=self.size, mode="bilinear", antialias=True, align_corners=False)
        return (x - self.mean) / self.std

    def record(self) -> dict:
        """What the checkpoint stores as the backbone's ``input``."""
        return {
            "channels": self.channels,
            "size": list(self.size or []),
            "mean": self.mean.flatten().tolist(),
            "std": self.std.flatten().tolist(),
        }

    def batch_mask(self, h: Tensor) -> None:
        return None


class TokenAdapter(nn.Module):
    """Turns B×2×L token batches (ids, attention mask) into a text model's keyword inputs, and keeps the
    mask of the batch it last saw: pooling a tap of that batch (or of Captum's copies of it, stacked
    along the batch) reads it, so padding never enters r_i."""

    def __init__(self, cfg: TextInput):
        super().__init__()
        self.text = cfg
        self.channels, self.size = 2, None
        self.mask: Tensor | None = None

    def forward(self, x: Tensor) -> dict:
        if x.ndim != 3 or x.shape[1] != 2 or x.is_floating_point():
            shape = "×".join(str(s) for s in x.shape)
            raise LayaError(
                f"this is a text model: it takes B×2×L token batches (ids, attention mask), not a {shape} "
                f"{x.dtype} tensor (images given to a text model?)"
            )
        ids, mask = x[:, 0].long(), x[:, 1].long()
        self.mask = mask
        return {"input_ids": ids, "attention_mask": mask}

    def record(self) -> dict:
        return {"kind": "tokens", **asdict(self.text)}

    def batch_mask(self, h: Tensor) -> Tensor | None:
        """The mask of ``h``'s rows: the last batch's, repeated when Captum stacked copies of it (or its first
        rows when the last batch was such copies and ``h`` is one of them)."""
        if self.mask is None or h.ndim != 3 or h.shape[1] != self.mask.shape[1]:
            return None
        mask, rows = self.mask, len(h)
        if (
            len(mask) > rows
            and len(mask) % rows == 0
            and torch.equal(mask, stack_copies(mask[:rows], len(mask) // rows))
        ):
            mask = mask[:rows]
        copies, rest = divmod(rows, len(mask))
        if rest or not copies:
            raise LayaError(f"a batch of {rows} rows cannot be pooled with the mask of {len(mask)} texts")
        return stack_copies(mask, copies).to(h.device)


def stack_copies(t: Tensor, copies: int) -> Tensor:
    """``copies`` copies of a batch stacked along the batch dimension, as Captum expands a batch for its steps."""
    return t.repeat(copies, *[1] * (t.ndim - 1))


def reproduces(got: Sequence[Tensor], want: Sequence[Tensor], rtol: float, atol: float) -> bool:
    """Whether outputs computed another way are the taps ``want``: same shapes, close values."""
    return all(a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(got, want))


def make_adapter(cfg: InputConfig | TextInput) -> InputAdapter | TokenAdapter:
    return TokenAdapter(cfg) if isinstance(cfg, TextInput) else InputAdapter(cfg)


def random_tokens(cfg: TextInput, batch: int, length: int = 16) -> Tensor:
    """A seeded batch of random token ids (a probe input); the last text is padded after half its tokens, so
    that what is checked on a probe sees an attention mask at work."""
    g = torch.Generator().manual_seed(0)
    length = min(length, cfg.max_length)
    ids = torch.randint(0, max(cfg.vocab_size, 2), (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1 and length > 1:
        mask[-1, (length + 1) // 2 :] = 0
        ids[-1, (length + 1) // 2 :] = cfg.pad_id
    return torch.stack([ids, mask], dim=1)


def call_model(model: nn.Module, inputs):
    """``model(inputs)``, or ``model(**inputs)`` for a text model's keyword inputs."""
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


# --------------------------------------------------------------------------- engines


def _first_tensor(output):
    """A module's tap value: the output, or its first element for tuple/list outputs."""
    return output[0] if isinstance(output, (tuple, list)) and output else output


class HookEngine:
    """Forward hooks on the tapped modules; the last needed one stops the forward."""

    kind = "hooks"

    def __init__(self, model: nn.Module, names: Sequence[str]):
        self.model, self.names = model, list(names)
        modules = dict(model.named_modules())
        missing = [n for n in self.names if n not in modules]
        if missing:
            raise LayaError(f"layer {missing[0]} is not a module of this model")

    def reset(self) -> None:
        pass

    def run(self, x: Tensor, k: int) -> list:
        modules = dict(self.model.named_modules())
        out: list = [None] * k
        seen = [0]

        def make(i):
            def hook(module, args, output):
                if out[i] is None:
                    out[i] = _first_tensor(output)
                    seen[0] += 1
                    if seen[0] == k:
                        raise _StopForward

            return hook

        handles = [modules[n].register_forward_hook(make(i)) for i, n in enumerate(self.names[:k])]
        try:
            call_model(self.model, x)
        except _StopForward:
            pass
        finally:
            for h in handles:
                h.remove()
        for name, h in zip(self.names, out):
            if h is None:
                raise LayaError(f"layer {name} did not run in the model's forward; choose other layers with --layers")
        return out


class ReplayEngine(HookEngine):
    """Hooks that also keep each tapped layer's call (its inputs after the hidden state, its keyword
    arguments): a transformer's layers take an attention mask, position embeddings… besides the hidden
    state, so continuing from tap i re-calls layers i+1.. with the arguments the last batch gave them
    (``replay``). Captum's copies of that batch, stacked along the batch, get them repeated."""

    kind = "replay"

    def __init__(self, model: nn.Module, names: Sequence[str]):
        super().__init__(model, names)
        self.calls: list[tuple[tuple, dict] | None] = [None] * len(self.names)

    def run(self, x, k: int) -> list:
        modules = dict(self.model.named_modules())

        def keep(i):
            def pre(module, args, kwargs):
                self.calls[i] = (tuple(args[1:]), dict(kwargs))

            return pre

        handles = [modules[n].register_forward_pre_hook(keep(i), with_kwargs=True) for i, n in enumerate(self.names)]
        try:
            return super().run(x, k)
        finally:
            for h in handles:
                h.remove()

    def replay(self, i: int, h: Tensor, k: int) -> list[Tensor]:
        """Outputs of taps i+1 .. k-1 from ``h`` at tap i, the later layers called as the last batch called them."""
        modules = dict(self.model.named_modules())
        out = []
        for j in range(i + 1, k):
            if self.calls[j] is None:
                raise LayaError(f"layer {self.names[j]} has not run on this batch yet")
            args, kwargs = self.calls[j]
            rows = len(h)
            h = _first_tensor(modules[self.names[j]](h, *_rows(args, rows), **_rows(kwargs, rows)))
            out.append(h)
        return out


def _rows(value, rows: int):
    """``value`` (a call's tensors, nested in tuples/dicts) for a batch of ``rows``: tensors of the recorded
    batch repeated as Captum stacks copies of it; anything else (broadcast shapes, None, flags) as it is."""
    if isinstance(value, dict):
        return {k: _rows(v, rows) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_rows(v, rows) for v in value)
    if isinstance(value, Tensor) and value.ndim and 1 < value.shape[0] < rows and rows % value.shape[0] == 0:
        return stack_copies(value, rows // value.shape[0])
    return value


class FxEngine:
    """torchvision's ``create_feature_extractor``: a traced graph that returns the taps and
    holds nothing past the last one (dead code is eliminated), cached per ``upto``."""

    kind = "fx"

    def __init__(self, model: nn.Module, names: Sequence[str]):
        self.model, self.names = model, list(names)
        self._extractors: dict[int, nn.Module] = {}

    def reset(self) -> None:
        self._extractors.clear()

    def _extractor(self, k: int) -> nn.Module:
        if k not in self._extractors:
            import warnings

            from torchvision.models.feature_extraction import create_feature_extractor

            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ex = create_feature_extractor(self.model, {n: str(i) for i, n in enumerate(self.names[:k])})
            except Exception as e:
                detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
                raise LayaError(f"torchvision could not extract layers {', '.join(self.names[:k])}: {detail}") from None
            self._extractors[k] = _without_asserts(ex)
        ex = self._extractors[k]
        if ex.training != self.model.training:
            ex.train(self.model.training)
        return ex

    def run(self, x: Tensor, k: int) -> list:
        out = self._extractor(k)(x)
        return [_first_tensor(out[str(i)]) for i in range(k)]


def _without_asserts(graph_module: nn.Module) -> nn.Module:
    """The traced graph without its ``torch._assert`` calls, then without its dead code. torchvision's blocks
    assert their input's rank (ViT's EncoderBlock); an assert is impure, so dead-code elimination kept every block
    after the last tap alive to feed it, and ``upto=k`` ran the whole encoder. What they check holds by
    construction: the input adapter hands every model a B×C×H×W batch, and the blocks' inputs follow from it."""
    graph = graph_module.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch._assert:
            graph.erase_node(node)
    graph.eliminate_dead_code()
    graph_module.recompile()
    return graph_module


STAGE_PREFIX = "feature_info."  # a tap read from forward_intermediates: ``feature_info.<index>``


def stage_name(index: int) -> str:
    return f"{STAGE_PREFIX}{index}"


def stage_index(name: str) -> int | None:
    """The ``feature_info`` index a ``feature_info.<index>`` tap names; None for any other name."""
    rest = name[len(STAGE_PREFIX) :] if name.startswith(STAGE_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


class IntermediatesEngine:
    """timm's own ``forward_intermediates``: the stages ``feature_info`` declares, taken where the model computes
    them, for models whose declared modules are not what runs or not laid out as declared (CoaT, CrossViT, HRNet,
    SAM-ViT, VOLO…). Tap ``feature_info.<i>`` is stage i; the forward stops after the last needed stage where
    timm allows (``stop_early``). Stages come back as B×C×H×W maps, or — from models that return their prefix
    tokens (class, registers) — as B×(P+H·W)×C token sequences, so class-token pooling works as on a ViT's blocks.
    ``layouts`` says which (the engine lays its outputs out itself, whatever the model declares for its modules).
    """

    kind = "intermediates"

    def __init__(self, model: nn.Module, names: Sequence[str]):
        import inspect

        self.model, self.names = model, list(names)
        self.indices = [stage_index(n) for n in self.names]
        bad = next((n for n, i in zip(self.names, self.indices) if i is None), None)
        if bad is not None:
            raise LayaError(f"layer {bad} is not a stage of the model (feature_info.<index>)")
        run = getattr(model, "forward_intermediates", None)
        stages = len(getattr(model, "feature_info", None) or ())
        if not callable(run) or not stages:
            raise LayaError(f"layer {self.names[0]} names a timm stage, but this model has no forward_intermediates")
        if max(self.indices, default=0) >= stages:
            raise LayaError(f"layer {stage_name(max(self.indices))} is past the model's {stages} stages")
        params = inspect.signature(run).parameters
        prefix = getattr(model, "num_prefix_tokens", 0)
        self.prefix = int(prefix) if isinstance(prefix, int) and "return_prefix_tokens" in params else 0
        self.options = {"intermediates_only": True, "stop_early": True}
        if "output_fmt" in params:
            self.options["output_fmt"] = "NCHW"
        if self.prefix:
            self.options["return_prefix_tokens"] = True
        self.layouts = Layouts("NCHW", self.prefix)

    def reset(self) -> None:
        pass

    def run(self, x: Tensor, k: int) -> list:
        want = self.indices[:k]
        take = sorted(set(want))
        out = dict(zip(take, self.model.forward_intermediates(x, indices=take, **self.options)))
        return [self._tokens(*out[i]) if self.prefix else out[i] for i in want]

    @staticmethod
    def _tokens(spatial: Tensor, prefix: Tensor) -> Tensor:
        """B×(P+H·W)×C: the prefix tokens, then the map's positions in row-major order (a ViT block's layout)."""
        return torch.cat([prefix, spatial.flatten(2).transpose(1, 2)], dim=1)


ENGINES = {"hooks": HookEngine, "fx": FxEngine, "replay": ReplayEngine, "intermediates": IntermediatesEngine}


# --------------------------------------------------------------------------- call traces


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
                raise _StopForward

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        call_model(model, x)
    except _StopForward:
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
        out = _first_tensor(out)
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
    maps that change resolution, else one per block.
    """
    calls = trace_calls(model, x)
    best = None
    for name, module in model.named_modules():
        if name and not is_container(name, module):
            continue
        children = [f"{name}.{c}" if name else c for c, _ in module.named_children()]
        ran = sorted((calls[c][0].start, c) for c in children if calls.get(c) and calls[c][0].end >= 0)
        outs = [_first_tensor(calls[c][0].out) for _, c in ran]
        ran = [c for (_, c), o in zip(ran, outs) if isinstance(o, Tensor) and o.ndim >= 2]
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


# --------------------------------------------------------------------------- the tapped model

_UNSET = object()
REPLAY = "replay"  # continue_from re-calls the later layers with their recorded arguments (ReplayEngine)


class TappedBackbone(nn.Module):
    """``forward(images, upto=None) -> [r_1, ..., r_k]``, the pooled outputs of the tapped layers.

    ``model`` is the plain backbone, ``layer_names`` its taps in depth order, ``formats`` the
    declared layout of each tap (resolved from the family's declaration on first use when not
    given), ``engine`` ``"hooks"`` or ``"fx"``.
    """

    def __init__(
        self,
        model: nn.Module,
        input_cfg: InputConfig,
        layer_names: Sequence[str],
        pool: str,
        formats: Sequence[str] | None = None,
        *,
        family=None,
        engine: str = "hooks",
        layouts: Layouts | None = None,
        expected_widths: Sequence[int | None] | None = None,
        example_shape: tuple[int, int, int] | None = None,
        spec=None,
    ):
        super().__init__()
        self.model = model
        self.adapter = make_adapter(input_cfg)
        self.input_cfg = input_cfg
        self.layer_names = list(layer_names)
        self.pool = pool
        n = len(self.layer_names)
        self.formats: list[TapFormat | None] = [TapFormat.parse(f) for f in formats] if formats else [None] * n
        if len(self.formats) != n:
            raise LayaError(f"{len(self.formats)} tap formats for {n} layers")
        self.family = family
        self.layouts = layouts or Layouts()
        self.expected_widths = list(expected_widths) if expected_widths else [None] * n
        self._checked = [False] * n
        self.engine_kind = engine
        self._engine = ENGINES[engine](model, self.layer_names)
        self.layouts = getattr(self._engine, "layouts", None) or self.layouts  # an engine that lays out its outputs
        self.example_shape = example_shape
        self.spec = spec  # a BackboneSpec whose ``formats`` are filled in once resolved
        self.weights_source = ""
        self._chain = _UNSET

    # ------------------------------------------------------------------ running

    def _k(self, upto: int | None) -> int:
        n = len(self.layer_names)
        if upto is None:
            return n
        if not isinstance(upto, int) or not 1 <= upto <= n:
            raise LayaError(f"upto must be a number of taps between 1 and {n}, got {upto}")
        return upto

    def activations(self, x: Tensor, upto: int | None = None) -> list[Tensor]:
        """Raw outputs h_1..h_k of the first ``upto`` taps (all by default); stops after tap k."""
        return self._engine.run(self.adapter(x), self._k(upto))

    def forward(self, x: Tensor, upto: int | None = None) -> list[Tensor]:
        return [self.pool_tap(i, h) for i, h in enumerate(self.activations(x, upto))]

    def whole_model(self, x: Tensor):
        """The plain model's own forward on a batch (everything it runs, past the last tap too)."""
        return call_model(self.model, self.adapter(x))

    def tap_format(self, i: int, h=None) -> TapFormat:
        fmt = self.formats[i]
        if fmt is None:
            if h is None:
                raise LayaError(f"the format of layer {self.layer_names[i]} is known after its first forward")
            fmt = self.formats[i] = self.layouts.resolve(h, self.layer_names[i])
            if self.spec is not None and all(f is not None for f in self.formats):
                self.spec.formats = [str(f) for f in self.formats]
        return fmt

    def pool_tap(self, i: int, h: Tensor) -> Tensor:
        """r_i from a raw activation of tap ``i``, following the tap's declared format."""
        name = self.layer_names[i]
        r = self.tap_format(i, h).pool(h, self.pool, name, self.adapter.batch_mask(h))
        if not self._checked[i]:
            want = self.expected_widths[i]
            if want is not None and r.shape[-1] != want:
                raise LayaError(
                    f"layer {name} pooled to width {r.shape[-1]} but the model declares {want} channels "
                    f"there; its output {tuple(h.shape)} is not laid out as {self.formats[i]}"
                )
            self._checked[i] = True
        return r

    @property
    def tap_formats(self) -> list[str]:
        return [str(f) if f is not None else "?" for f in self.formats]

    @torch.no_grad()
    def dims(self, example: Tensor) -> list[int]:
        with eval_mode(self):
            try:
                return [r.shape[-1] for r in self(example[:1])]
            except (LayaError, KeyboardInterrupt):
                raise
            except Exception as e:  # a model that cannot run on this input (size, channels)
                detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                shape = "×".join(str(s) for s in example.shape[1:])
                raise LayaError(f"the backbone fails on a {shape} input: {type(e).__name__}: {detail}") from None

    def _apply(self, fn, *args, **kwargs):
        self._engine.reset()  # traced graphs may hold tensors of the old device
        return super()._apply(fn, *args, **kwargs)

    # ------------------------------------------------------------------ probe batch

    def probe_input(self, batch: int = 2) -> Tensor:
        """A seeded random [0, 1] batch of the backbone's example shape (on its device)."""
        if isinstance(self.input_cfg, TextInput):
            return random_tokens(self.input_cfg, batch).to(self.adapter_device)
        shape = self.example_shape
        if shape is None:
            if self.adapter.size is None:
                raise LayaError("this backbone needs an example input shape")
            shape = (self.adapter.channels, *self.adapter.size)
        g = torch.Generator().manual_seed(0)
        return torch.rand(batch, *shape, generator=g).to(self.adapter_device)

    @property
    def adapter_device(self) -> torch.device:
        """Where the model's inputs go: its parameters' device."""
        extra = [self.adapter.mean] if isinstance(self.adapter, InputAdapter) else [torch.zeros(())]
        return next(itertools.chain(self.model.parameters(), self.model.buffers(), extra)).device

    # ------------------------------------------------------------------ continuing from a tap

    def _find_chain(self) -> list[list[str]] | str | None:
        if len(self.layer_names) < 2:
            return []
        if isinstance(self._engine, ReplayEngine):
            return self._verify_replay()
        modules = dict(self.model.named_modules())
        if not all(n in modules for n in self.layer_names):  # graph nodes, timm stages: no modules to chain
            return None
        with torch.no_grad(), eval_mode(self):
            x = self.adapter(self.probe_input())
            calls = trace_calls(self.model, x, stop_when=self.layer_names)
            chain = find_chain(calls, self.layer_names)
            if chain is None:
                return None
            self._chain = chain
            hs = [_first_tensor(calls[n][0].out) for n in self.layer_names]
            try:  # verify: from tap 0 the chain (every step of it) reproduces every later tap
                if not reproduces(self.continue_from(0, hs[0]), hs[1:], rtol=1e-5, atol=1e-6):
                    return None
            except Exception:
                return None
            finally:
                self._chain = _UNSET
        return chain

    def _verify_replay(self) -> str | None:
        """REPLAY when re-calling the later layers from tap 0 (with their recorded arguments) reproduces every
        later tap on a probe batch, and on its rows stacked twice (Captum's copies); else None."""
        with torch.no_grad(), eval_mode(self):
            self._chain = REPLAY
            try:
                hs = self.activations(self.probe_input())
                for copies in (1, 2):
                    got = self.continue_from(0, stack_copies(hs[0], copies))
                    if not reproduces(got, [stack_copies(h, copies) for h in hs[1:]], rtol=1e-4, atol=1e-5):
                        return None
            except Exception:
                return None
            finally:
                self._chain = _UNSET
        return REPLAY

    @property
    def can_continue(self) -> bool:
        """Whether ``continue_from`` works: each tap feeds the next through plain module calls."""
        if self._chain is _UNSET:
            self._chain = self._find_chain()
        return self._chain is not None

    def continue_from(self, i: int, h: Tensor, upto: int | None = None) -> list[Tensor]:
        """Raw outputs of taps i+1 .. upto-1, running only the modules after tap ``i`` on ``h``
        (tap i's activation, patched or not). Raises when ``can_continue`` is False."""
        k = self._k(upto)
        if not 0 <= i < k:
            raise LayaError(f"tap index {i} is outside 0..{k - 1}")
        if self._chain is _UNSET and not self.can_continue or self._chain is None:
            raise LayaError(
                "this backbone cannot continue from a tap: its taps are not a chain of modules (see docs/backbones.md)"
            )
        if self._chain is REPLAY:
            return self._engine.replay(i, h, k)
        modules = dict(self.model.named_modules())
        out, x = [], h.clone()  # a step may work in place (ReLU(inplace=True)): never on the caller's tensor
        for j in range(i, k - 1):
            for name in self._chain[j]:
                x = modules[name](x)
            out.append(x)
        return out

    def tap_modules(self) -> list[nn.Module]:
        """The module of each tap (what a hook, or Captum's layer methods, attach to). A tap that is
        not a module (a torchvision graph node such as ``layer1.0.add``, a timm stage ``feature_info.<i>``
        read from ``forward_intermediates``) is a one-line error."""
        modules = dict(self.model.named_modules())
        for name in self.layer_names:
            if name not in modules:
                what = "a timm stage read from forward_intermediates" if stage_index(name) is not None else None
                raise LayaError(
                    f"layer {name} is {what or 'a traced graph node'}, not a module of the model: its output cannot "
                    f"be patched by a hook; choose module layers with --layers"
                )
        return [modules[n] for n in self.layer_names]

    def patched_activations(
        self, x: Tensor, i: int | None = None, h: Tensor | None = None, upto: int | None = None, patch=None
    ) -> list[Tensor]:
        """Raw h_1..h_k from a full forward of the plain model with forward hooks (whatever the
        engine), tap ``i``'s output replaced by ``h`` — or by ``patch(output)`` — so every later
        layer sees the replacement. What ``continue_from`` is checked against, and the fallback of
        patched passes for models that cannot continue. Stops after tap k."""
        k = self._k(upto)
        modules = self.tap_modules()
        handle = None
        if i is not None:
            if not 0 <= i < k:
                raise LayaError(f"tap index {i} is outside 0..{k - 1}")
            new = (lambda out: h) if patch is None else patch

            def replace(module, args, output):
                if isinstance(output, (tuple, list)) and output:
                    return type(output)([new(output[0]), *output[1:]])
                return new(output)

            handle = modules[i].register_forward_hook(replace)
        try:
            return HookEngine(self.model, self.layer_names).run(self.adapter(x), k)
        finally:
            if handle is not None:
                handle.remove()

    # ------------------------------------------------------------------ truncation

    def truncated(self, k: int) -> TappedBackbone:
        """A copy that stops after tap ``k`` (a count) and holds no module above it."""
        k = self._k(k)
        names = self.layer_names[:k]
        formats = [str(f) for f in self.formats[:k]] if all(f is not None for f in self.formats[:k]) else None
        x = self.probe_input()
        with torch.no_grad(), eval_mode(self):
            want = self.activations(x, k)
        cuts = [
            lambda m: self.family.truncate(m, self.layer_names, k) if self.family is not None else None,
            lambda m: prune_after(m, names, self.adapter(x)),
        ]  # the family's own cut, else the generic one
        for cut in cuts:
            try:
                pruned = cut(copy.deepcopy(self.model))
                if pruned is None:
                    continue
                out = TappedBackbone(
                    pruned,
                    self.input_cfg,
                    names,
                    self.pool,
                    formats,
                    family=self.family,
                    engine=self.engine_kind,
                    layouts=self.layouts,
                    expected_widths=self.expected_widths[:k],
                    example_shape=self.example_shape,
                )
                out.to(self.adapter_device)
                with torch.no_grad(), eval_mode(out):
                    got = out.activations(x)
            except Exception:  # a cut that breaks the forward: try the next one
                continue
            if reproduces(got, want, rtol=1e-5, atol=1e-6):
                out.weights_source = self.weights_source
                return out
        raise LayaError(f"this model cannot be truncated at layer {names[-1]}: the cut model's taps differ")


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
