"""How a model is run up to tap k (``ENGINES``): forward hooks that stop the forward once the last needed tap
fired (``HookEngine``), the same keeping each tapped layer's call so the later layers can be called again from a
tap (``ReplayEngine``, transformers), torchvision's FX feature extractor (``FxEngine``), and timm's
``forward_intermediates`` (``IntermediatesEngine``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError
from .adapters import stack_copies
from .pooling import Layouts


class StopForward(BaseException):
    """Raised from a hook once every needed tap has fired: the rest of the forward is skipped.

    A BaseException so that a model's own ``except Exception`` cannot swallow it."""


def call_model(model: nn.Module, inputs):
    """``model(inputs)``, or ``model(**inputs)`` for a text model's keyword inputs."""
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def first_tensor(output):
    """A module's tap value: the output, or its first element for tuple/list outputs — the first element's first
    where that is a tuple again (PVTv2's stages return ``((hidden, height, width), …)``)."""
    while isinstance(output, (tuple, list)) and output:
        output = output[0]
    return output


def replace_first(output, fn):
    """A module's output with its tap value (``first_tensor``'s, at any depth) passed through ``fn``."""
    if isinstance(output, (tuple, list)) and output:
        return type(output)([replace_first(output[0], fn), *output[1:]])
    return fn(output)


def own_memory(value):
    """A replacement output handed on as a copy: later layers may write into it in place (FlauBERT's
    ``tensor *= mask``), which must change neither what laya holds (a reference, maybe broadcast to the batch with
    ``expand``: many elements on one location) nor a leaf that requires grad (Captum's inputs: the gradient still
    reaches it through the copy)."""
    plain = isinstance(value, Tensor) or type(value) in (tuple, list)  # a ModelOutput is handed on as it is
    if not plain or not isinstance(first_tensor(value), Tensor):
        return value
    return replace_first(value, lambda t: t.clone(memory_format=torch.contiguous_format))


def split_call(name: str) -> tuple[str, int]:
    """A tap's module and which of its calls in one forward it is: ``layer#2`` is the third call of ``layer`` (a
    module that runs at several depths, as ALBERT's shared layer); a plain name is its module's first call."""
    module, sep, call = name.rpartition("#")
    return (module, int(call)) if sep and call.isdigit() else (name, 0)


def block_input(args: tuple, kwargs: dict) -> Tensor | None:
    """What a tapped call was given to transform: its first tensor argument (a residual block's hidden state,
    positional or ``hidden_states=``), None when it has none."""
    value = args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))
    value = first_tensor(value)
    return value if isinstance(value, Tensor) else None


TIME_FIRST = "laya_time_first"  # a model's attribute: the modules whose hidden states run time first (L×B×D)


def time_first(model: nn.Module) -> frozenset[str]:
    """The modules of ``model`` whose input and output hidden states run time first (sequence × batch × width: FSMT's
    and XLNet's layers), as the model's family found them on a probe batch (``hf.layer_taps``)."""
    return frozenset(getattr(model, TIME_FIRST, ()))


def swap_first(value, flip: bool):
    """``value`` (a tensor, or a tuple/list whose first item is one) with that tensor's first two dimensions swapped
    where ``flip``: a time-first layer's L×B×D hidden state laid out B×L×D, as laya holds every tap, and back."""
    if not flip:
        return value
    first = first_tensor(value)
    plain = isinstance(value, Tensor) or type(value) in (tuple, list)  # a ModelOutput is handed on as it is
    if not plain or not isinstance(first, Tensor) or first.ndim < 2:
        return value
    return replace_first(value, lambda t: t.transpose(0, 1))


def _swap_input(args: tuple, kwargs: dict, flip: bool) -> tuple[tuple, dict]:
    """A call's arguments with its hidden state (``block_input``) laid out batch first where ``flip``."""
    if not flip:
        return args, kwargs
    if args:
        return (swap_first(args[0], True), *args[1:]), kwargs
    key = "hidden_states" if "hidden_states" in kwargs else "x"
    return args, {**kwargs, key: swap_first(kwargs[key], True)} if key in kwargs else kwargs


class TapHooks:
    """Forward hooks that find each tap's call in a forward of ``model``: calls are counted per module from the
    model's own call, so ``layer#k`` is told from the other calls of ``layer``. A time-first layer's (``time_first``)
    hidden states reach ``pre`` and ``post`` batch first, and what ``post`` returns goes back time first."""

    def __init__(self, model: nn.Module, names: Sequence[str]):
        self.model, modules = model, dict(model.named_modules())
        self.time_first = time_first(model)
        self.taps: dict[str, dict[int, int]] = {}  # module name -> {its call -> tap index}
        for i, name in enumerate(names):
            module, call = split_call(name)
            if module not in modules:
                raise LayaError(f"layer {name} is not a module of this model")
            self.taps.setdefault(module, {})[call] = i
        self.modules = {name: modules[name] for name in self.taps}

    @contextlib.contextmanager
    def installed(self, post=None, pre=None):
        """Meanwhile ``pre(i, args, kwargs)`` runs before tap i's call and ``post(i, output)`` after it (what it
        returns, if not None, replaces the output)."""
        counts: dict[str, int] = {}
        handles = [self.model.register_forward_pre_hook(lambda *_: counts.clear())]
        for name, calls in self.taps.items():
            flip = name in self.time_first

            def before(module, args, kwargs, name=name, calls=calls, flip=flip):
                if pre is not None and counts.get(name, 0) in calls:
                    pre(calls[counts.get(name, 0)], *_swap_input(args, kwargs, flip))

            def after(module, args, output, name=name, calls=calls, flip=flip):
                call = counts.get(name, 0)
                counts[name] = call + 1
                if post is not None and call in calls:
                    new = post(calls[call], swap_first(output, flip))
                    return None if new is None else swap_first(new, flip)
                return None

            handles.append(self.modules[name].register_forward_pre_hook(before, with_kwargs=True))
            handles.append(self.modules[name].register_forward_hook(after))
        try:
            yield
        finally:
            for h in handles:
                h.remove()


class HookEngine:
    """Forward hooks on the tapped modules' calls (``TapHooks``); the last needed one stops the forward."""

    kind = "hooks"

    def __init__(self, model: nn.Module, names: Sequence[str]):
        self.model, self.names = model, list(names)
        self.hooks = TapHooks(model, self.names)

    def reset(self) -> None:
        pass

    def select_rows(self, rows: Tensor) -> Callable[[], None]:
        """Keep only ``rows`` of what the engine holds of the last batch; returns how to undo it (hooks hold
        nothing)."""
        return lambda: None

    def run(self, x: Tensor, k: int, pre=None, replace=None) -> list:
        """The raw outputs of the first ``k`` taps; ``pre(i, args, kwargs)`` sees each tap's call before it runs,
        ``replace(i, output)`` may replace a tap's output (the later layers then see the replacement)."""
        out: list = [None] * k
        seen = [0]

        def post(i, output):
            new = own_memory(replace(i, output)) if replace is not None else None
            if i < k and out[i] is None:
                out[i] = first_tensor(output if new is None else new)
                seen[0] += 1
                if seen[0] == k:
                    raise StopForward
            return new

        with self.hooks.installed(post=post, pre=pre):
            try:
                call_model(self.model, x)
            except StopForward:
                pass
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
        self.batch = 0  # rows of the batch the calls were recorded on
        # per call, the ids of its tensors laid out by the batch's rows, decided when it was recorded: a batch of
        # as many rows as a sequence has positions later (IG refining 9 samples of 9 tokens) cannot tell a
        # positions × positions table (Inkling's relative distances) from a per-sample tensor by its shape
        self.laid: list[set[int]] = [set() for _ in self.names]

    def run(self, x, k: int, pre=None, replace=None) -> list:
        def keep(i, args, kwargs):
            self.calls[i] = (tuple(args[1:]), dict(kwargs))
            self.batch = len(args[0])
            self.laid[i] = _laid(self.calls[i], args[0])
            if pre is not None:
                pre(i, args, kwargs)

        return super().run(x, k, pre=keep, replace=replace)

    def select_rows(self, rows: Tensor) -> Callable[[], None]:
        """The recorded calls of only ``rows`` of the last batch (IG refining some of its samples): every tensor
        laid out by the batch's rows is indexed; broadcast shapes (a 1×… mask, rotary tables) stay as they are."""
        saved, batch, laid = list(self.calls), self.batch, list(self.laid)
        self.calls = [None if c is None else _select(c, rows, ids) for c, ids in zip(saved, laid)]
        self.laid = [
            set() if c is None else {id(t) for t in _tensors(c) if id(t) not in _ids(old)}  # those it indexed
            for c, old in zip(self.calls, saved)
        ]
        self.batch = len(rows)

        def undo():
            self.calls, self.batch, self.laid = saved, batch, laid

        return undo

    def replay(self, i: int, h: Tensor, k: int) -> list[Tensor]:
        """Outputs of taps i+1 .. k-1 from ``h`` at tap i, the later layers called as the last batch called them."""
        out = []
        for j in range(i + 1, k):
            if self.calls[j] is None:
                raise LayaError(f"layer {self.names[j]} has not run on this batch yet")
            args, kwargs = self.calls[j]
            rows, laid = len(h), self.laid[j]
            name = split_call(self.names[j])[0]
            module, flip = self.hooks.modules[name], name in self.hooks.time_first
            try:
                given = swap_first(h, flip).contiguous()
                h = swap_first(first_tensor(module(given, *_rows(args, rows, laid), **_rows(kwargs, rows, laid))), flip)
            except Exception as e:  # a layer whose recorded call does not fit this batch: one line, not a traceback
                detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
                raise LayaError(
                    f"layer {self.names[j]} cannot be called again from tap {self.names[i]} on a batch of {rows} "
                    f"(prefix caching): {type(e).__name__}: {detail}"
                ) from None
            out.append(h)
        return out


def _rows(value, rows: int, laid: set[int]):
    """``value`` (a call's tensors, nested in tuples/dicts) for a batch of ``rows``: tensors laid out by the
    recorded batch's rows (``laid``: their ids) repeated as Captum stacks copies of it; anything else (broadcast
    shapes, position tables, None, flags) as it is."""
    if isinstance(value, dict):
        return {k: _rows(v, rows, laid) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_rows(v, rows, laid) for v in value)
    if isinstance(value, Tensor) and id(value) in laid and 1 < value.shape[0] < rows and rows % value.shape[0] == 0:
        return stack_copies(value, rows // value.shape[0])
    return value


def _tensors(value) -> list[Tensor]:
    """The tensors of a recorded call (nested in tuples/dicts)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return [value] if isinstance(value, Tensor) else []


def _ids(value) -> set[int]:
    return {id(t) for t in _tensors(value)}


def _laid(call, hidden) -> set[int]:
    """The ids of a recorded call's tensors laid out by the batch's rows: one row per sample of ``hidden``'s batch.
    A 1-D tensor of that length is one value per sample (X-MOD's language ids) unless the batch is as long as the
    sequence: then it may be a position index (``cache_position``), and is taken for one."""
    batch = len(hidden)
    length = hidden.shape[1] if isinstance(hidden, Tensor) and hidden.ndim > 1 else None
    return {id(t) for t in _tensors(call) if t.ndim and t.shape[0] == batch and (t.ndim > 1 or batch != length)}


def _select(value, rows: Tensor, laid: set[int]):
    """``rows`` of a recorded call's tensors (nested in tuples/dicts) laid out by the batch's rows (``laid``: their
    ids, ``_laid``)."""
    if isinstance(value, dict):
        return {k: _select(v, rows, laid) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_select(v, rows, laid) for v in value)
    if isinstance(value, Tensor) and id(value) in laid:
        return value[rows.to(value.device)]
    return value


class FxEngine:
    """torchvision's ``create_feature_extractor``: a traced graph that returns the taps and
    holds nothing past the last one (dead code is eliminated), cached per ``upto``."""

    kind = "fx"
    select_rows = HookEngine.select_rows  # a traced graph holds nothing of the last batch

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
        return [first_tensor(out[str(i)]) for i in range(k)]


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

    select_rows = HookEngine.select_rows  # holds nothing of the last batch

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
