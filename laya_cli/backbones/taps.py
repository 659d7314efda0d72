"""Taps: run a model up to tap k, read the raw tap outputs, pool them, continue from a tap.

One mechanism (DESIGN §4) that depth analysis, truncated models, patched audits and cheaper
extraction all use:

- ``TappedBackbone.forward(x, upto=k)`` -> ``[r_1 .. r_k]``; the forward stops right after the
  last needed tap (hooks raise a stop signal; torchvision's FX extractor prunes the graph).
- ``activations(x, upto=k)`` -> the raw tap outputs ``[h_1 .. h_k]``; ``pool_tap(i, h)`` -> r_i.
- ``can_continue`` / ``continue_from(i, h_i, upto)`` -> ``[h_{i+1} ..]`` for models that are a chain
  of their tapped modules (found and verified on a probe batch, never assumed from names).
- ``truncated(k)`` -> a backbone that stops at tap k and holds no module above it.
- ``dropped(indices)`` -> a backbone whose blocks at those taps are skipped (``bypass.Bypass``).

Tap indices ``i`` are 0-based (``layer_names[i]``); ``upto`` counts taps, so
``activations(x)[i + 1:upto] == continue_from(i, activations(x)[i], upto)``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError
from .adapters import InputAdapter, make_adapter, random_tokens, stack_copies
from .bypass import bypass_modules, output_arity
from .chain import eval_mode, find_chain, prune_after, trace_calls
from .engines import (
    ENGINES,
    HookEngine,
    ReplayEngine,
    TapHooks,
    block_input,
    call_model,
    first_tensor,
    replace_first,
    split_call,
    stage_index,
)
from .pooling import POSITION_GRID, Layouts, TapFormat, pack_positions, tap_positions
from .spec import InputConfig, TextInput

BYPASS_NEEDS = (
    "removing it by its input (--ablation bypass or mean-update) needs a block whose output has its input's shape; "
    "use --ablation mean"
)
DROP_NEEDS = (
    "dropping layers (--drop) needs blocks whose output has their input's shape, as the layers of a residual "
    "network (a transformer, a ViT) have"
)

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


def reproduces(got: Sequence[Tensor], want: Sequence[Tensor], rtol: float, atol: float) -> bool:
    """Whether outputs computed another way are the taps ``want``: same shapes, close values."""
    return all(a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(got, want))


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
        # --alpha-reader positions: each r_i leaves packed with the tap's positions (pooling.pack_positions), for α
        self.read_positions = False
        self._widths: list[int | None] = [None] * n  # d_i, the pooled width, whatever leaves

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

    def activations_and_inputs(
        self, x: Tensor, upto: int | None = None, needs: str = BYPASS_NEEDS
    ) -> tuple[list[Tensor], list[Tensor]]:
        """``activations`` and what each tapped call was given (``engines.block_input``: a residual block's input,
        what "bypass" removal puts in place of its output). Taps must be modules; a call without a tensor input,
        or one whose output has another shape than its input, is refused in one line."""
        k = self._k(upto)
        self.tap_modules()
        engine = self._engine if isinstance(self._engine, HookEngine) else HookEngine(self.model, self.layer_names)
        inputs: list[Tensor | None] = [None] * k

        def keep(i, args, kwargs):
            if i < k and inputs[i] is None:
                value = block_input(args, kwargs)
                inputs[i] = None if value is None else value.detach().clone()  # a block may work in place

        outputs = engine.run(self.adapter(x), k, pre=keep)
        for name, h, given in zip(self.layer_names, outputs, inputs):
            if given is None or given.shape != h.shape:
                got = "no tensor input" if given is None else f"input {tuple(given.shape)}"
                raise LayaError(f"layer {name} has {got} and output {tuple(h.shape)}: {needs}")
        return outputs, inputs

    def whole_model(self, x: Tensor):
        """The plain model's own forward on a batch (everything it runs, past the last tap too); a model whose layers
        after the last tap cannot run on this input (PP-OCRv5's head pools a height the small input lacks) is a
        one-line error."""
        try:
            return call_model(self.model, self.adapter(x))
        except (LayaError, KeyboardInterrupt):
            raise
        except Exception as e:
            detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            shape = "×".join(str(s) for s in x.shape[1:])
            raise LayaError(
                f"the whole model fails on a {shape} input past its taps: {type(e).__name__}: {detail}"
            ) from None

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
        r = self.tap_format(i, h).pool(h, self.pool, name, self.adapter.pool_mask(h))
        if not self._checked[i]:
            want = self.expected_widths[i]
            if want is not None and r.shape[-1] != want:
                raise LayaError(
                    f"layer {name} pooled to width {r.shape[-1]} but the model declares {want} channels "
                    f"there; its output {tuple(h.shape)} is not laid out as {self.formats[i]}"
                )
            self._checked[i] = True
        self._widths[i] = int(r.shape[-1])
        if self.read_positions:
            cap = getattr(self.input_cfg, "max_length", None) or POSITION_GRID**2
            r = pack_positions(r, *tap_positions(self.tap_format(i), h, self.adapter.batch_mask(h), cap, name))
        return r

    @property
    def tap_formats(self) -> list[str]:
        return [str(f) if f is not None else "?" for f in self.formats]

    @torch.no_grad()
    def dims(self, example: Tensor, packed: bool = False) -> list[int]:
        """The pooled widths d_i (what a head is built from), or ``packed``: the widths of what leaves each tap (d_i,
        or r_i packed with its positions under ``read_positions``)."""
        with eval_mode(self):
            try:
                out = [r.shape[-1] for r in self(example[:1])]
                return out if packed else [int(w) for w in self._widths]
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

    @contextlib.contextmanager
    def batch_rows(self, rows: Tensor):
        """Work on ``rows`` of the last batch: what the backbone keeps of that batch — a text model's attention
        mask, which pooling reads, and the recorded arguments the later layers are replayed with — holds only those
        rows meanwhile (network-scope IG refining the samples that need more steps)."""
        undo = [self.adapter.select_rows(rows), self._engine.select_rows(rows)]
        try:
            yield
        finally:
            for restore in undo:
                restore()

    @contextlib.contextmanager
    def full_length(self):
        """Token batches at their stored length (``max_length``) meanwhile, not cut after their last real token:
        for what is kept per position (the network scope's mean activation of every position)."""
        trim = getattr(self.adapter, "trim", None)
        if trim is not None:
            self.adapter.trim = False
        try:
            yield
        finally:
            if trim is not None:
                self.adapter.trim = trim

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
            hs = [first_tensor(calls[n][0].out) for n in self.layer_names]
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
        """The module of each tap (a tap ``layer#k`` is a call of ``layer``). A tap that is not a module (a
        torchvision graph node such as ``layer1.0.add``, a timm stage ``feature_info.<i>`` read from
        ``forward_intermediates``) cannot be patched by a hook: a one-line error."""
        modules = dict(self.model.named_modules())
        for name in self.layer_names:
            if split_call(name)[0] not in modules:
                what = "a timm stage read from forward_intermediates" if stage_index(name) is not None else None
                raise LayaError(
                    f"layer {name} is {what or 'a traced graph node'}, not a module of the model: its output cannot "
                    f"be patched by a hook; choose module layers with --layers"
                )
        return [modules[split_call(n)[0]] for n in self.layer_names]

    @contextlib.contextmanager
    def tap_points(self):
        """One ``nn.Identity`` per tap that the tap's output passes through in every forward run meanwhile: what
        Captum's layer methods attach to — a module called once per forward, even where the tapped module runs at
        several depths (ALBERT's shared layer, a ``layer#k`` tap)."""
        self.tap_modules()  # taps that are no modules: one line
        points = [nn.Identity() for _ in self.layer_names]
        with TapHooks(self.model, self.layer_names).installed(post=lambda i, out: replace_first(out, points[i])):
            yield points

    def patched_activations(
        self, x: Tensor, i: int | None = None, h: Tensor | None = None, upto: int | None = None, patch=None
    ) -> list[Tensor]:
        """Raw h_1..h_k from a full forward of the plain model with forward hooks (whatever the
        engine), tap ``i``'s output replaced by ``h`` — or by ``patch(output)`` — so every later
        layer sees the replacement. What ``continue_from`` is checked against, and the fallback of
        patched passes for models that cannot continue. Stops after tap k."""
        k = self._k(upto)
        self.tap_modules()
        replace = None
        if i is not None:
            if not 0 <= i < k:
                raise LayaError(f"tap index {i} is outside 0..{k - 1}")
            new = (lambda out: h) if patch is None else patch
            replace = lambda j, output: replace_first(output, new) if j == i else None
        return HookEngine(self.model, self.layer_names).run(self.adapter(x), k, replace=replace)

    def bypassed_activations(self, x: Tensor, drop) -> list[Tensor]:
        """Raw h_1..h_L from a full forward in which every tap in ``drop`` (indices) is bypassed: its output := its
        input, so each later layer runs on the stream without those blocks (layer dropping, ``depthing.drop_table``)."""
        n = len(self.layer_names)
        self.tap_modules()
        drop, given = set(drop), {}

        def keep(i, args, kwargs):
            if i in drop:
                given[i] = block_input(args, kwargs)

        def replace(i, output):
            if i not in drop:
                return None
            if given.get(i) is None or given[i].shape != first_tensor(output).shape:
                raise LayaError(
                    f"layer {self.layer_names[i]} cannot be dropped: its output has another shape than its input"
                )
            return replace_first(output, lambda _: given[i])

        return HookEngine(self.model, self.layer_names).run(self.adapter(x), n, pre=keep, replace=replace)

    # ------------------------------------------------------------------ truncation

    def truncated(self, k: int) -> TappedBackbone:
        """A copy that stops after tap ``k`` (a count) and holds no module above it."""
        k = self._k(k)
        names = self.layer_names[:k]
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
                out = self._with_model(pruned, k)
                with torch.no_grad(), eval_mode(out):
                    got = out.activations(x)
            except Exception:  # a cut that breaks the forward: try the next one
                continue
            if reproduces(got, want, rtol=1e-5, atol=1e-6):
                return out
        raise LayaError(f"this model cannot be truncated at layer {names[-1]}: the cut model's taps differ")

    def _with_model(self, model: nn.Module, k: int | None = None, engine: str | None = None) -> TappedBackbone:
        """A backbone over ``model`` (a cut or dropped copy of this one's) tapping this one's first k taps alike
        (read by ``engine``, default this one's)."""
        k = len(self.layer_names) if k is None else k
        formats = [str(f) for f in self.formats[:k]] if all(f is not None for f in self.formats[:k]) else None
        out = TappedBackbone(
            model,
            self.input_cfg,
            self.layer_names[:k],
            self.pool,
            formats,
            family=self.family,
            engine=engine or self.engine_kind,
            layouts=self.layouts,
            expected_widths=self.expected_widths[:k],
            example_shape=self.example_shape,
        )
        out.weights_source = self.weights_source
        out.read_positions = self.read_positions
        return out.to(self.adapter_device)

    # ------------------------------------------------------------------ dropping

    def dropped(self, drop: Sequence[int]) -> TappedBackbone:
        """A copy without the blocks of the taps in ``drop`` (indices): each module replaced by a ``Bypass`` that
        hands its input on uncomputed, every tap kept (a dropped tap reads its block's input). Checked on a probe
        batch against ``bypassed_activations``; one line where a tap is no module of its own (a call of a shared
        layer, a graph node) or the dropped model's taps differ."""
        drop = sorted({int(i) for i in drop})
        n = len(self.layer_names)
        if not drop:
            return self
        if drop[0] < 0 or drop[-1] >= n:
            raise LayaError(f"layers to drop must be tap indices 0..{n - 1}, got {drop}")
        shared = [self.layer_names[i] for i in drop if split_call(self.layer_names[i]) != (self.layer_names[i], 0)]
        if shared:
            raise LayaError(f"layer {shared[0]} is one call of a layer shared across depth: it cannot be dropped alone")
        self.tap_modules()
        x, arities = self.probe_input(), {}

        def record(i, output):
            arities.setdefault(i, output_arity(output))

        with torch.no_grad(), eval_mode(self):
            HookEngine(self.model, self.layer_names).run(self.adapter(x), drop[-1] + 1, replace=record)
            want = self.bypassed_activations(x, drop)
        names = [self.layer_names[i] for i in drop]
        # hooks: a traced graph (torchvision's FX) has no node for a Bypass, which hands its input on uncomputed
        engine = "hooks" if self.engine_kind == "fx" else None
        bypassed = bypass_modules(copy.deepcopy(self.model), names, [arities[i] for i in drop])
        out = self._with_model(bypassed, None, engine)
        why = "later layers need more from a dropped block than its hidden state"
        try:
            with torch.no_grad(), eval_mode(out):
                got = out.activations(x)
        except LayaError:
            raise
        except Exception as e:  # the forward breaks without the block: say how, in one line
            got, why = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if got is None or not reproduces(got, want, rtol=1e-5, atol=1e-6):
            raise LayaError(f"this model cannot run without {', '.join(names)}: {why}")
        return out
