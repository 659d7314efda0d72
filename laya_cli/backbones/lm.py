"""Causal language models (``laya train --task lm``): a decoder tapped after every layer, and its own readout.

The readout is how the model itself turns a hidden state into next-token logits: its final norm, then its
unembedding (``lm_head``), both frozen. laya does not guess the final norm from a list of names: it tries every
norm module of the model outside its layers (and none) on a probe batch, and keeps the one with which the last
layer's output gives the model's own logits. A model whose logits are something else (a soft cap, a logit scale)
is refused in one line: a lens read through another readout would be a silent wrong result. A logit scale or a
soft cap the config declares (Cohere, Gemma 2) is part of the readout.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass, replace

import torch
from torch import nn

from ..runtime.errors import LayaError, unknown_choice
from .build import check_sha256, tap_model
from .family import _first_line
from .hf import NO_REMOTE_CODE, HFFamily, _config, local_dir, text_input, transformers_module
from .spec import BackboneSpec
from .taps import TappedBackbone
from .tokenizers import input_embeddings
from .weights import hf_cache_dir, hub_session, offline, weights_sha256


class Readout(nn.Module):
    """logits = unembedding(final_norm(h)): the model's own last step, frozen — times the logit scale its config
    declares (Cohere's ``logit_scale``), soft-capped where it declares a cap (Gemma 2's ``final_logit_softcapping``:
    cap · tanh(logits / cap))."""

    def __init__(self, norm: nn.Module, unembedding: nn.Module, scale: float = 1.0, softcap: float | None = None):
        super().__init__()
        self.norm, self.unembedding = norm, unembedding
        self.scale, self.softcap = float(scale), softcap
        self.requires_grad_(False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.unembedding(self.norm(h))
        if self.scale != 1.0:  # × 1 is exact: skipped, one pass over the (rows, V) logits and its backward fewer
            logits = logits * self.scale
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)

    @property
    def vocabulary(self) -> int:
        return int(self.unembedding.weight.shape[0])


@dataclass
class LanguageModel:
    """The tapped decoder (its taps: the residual stream after each layer), its readout, and what it was built from
    (``sha256``: of the whole language model's weights, so the unembedding is checked with the layers)."""

    backbone: TappedBackbone
    readout: Readout
    sha256: str
    eos_id: int | None
    placed: bool = False  # its modules put on devices by a device_map (accelerate): ``to`` leaves them there

    @property
    def num_layers(self) -> int:
        return len(self.backbone.layer_names)

    @property
    def head_device(self) -> torch.device:
        """Where the heads sit and the layers' states meet: the readout's device (the last one under a map)."""
        return runs_on(self.readout.unembedding)

    @property
    def input_device(self) -> torch.device:
        """Where token ids go: the token table's device (the first one under a map)."""
        table = input_embeddings(self.backbone.model)
        return runs_on(table) if table is not None else self.head_device

    def to(self, device) -> LanguageModel:
        if not self.placed:
            self.backbone.to(device)
            self.readout.to(device)
        return self


def runs_on(module: nn.Module) -> torch.device:
    """Where a module computes: its weight's device, or, for weights a device map offloaded (meta tensors),
    the device accelerate's hook loads them to at each call."""
    device = module.weight.device
    hook = getattr(module, "_hf_hook", None)
    return torch.device(hook.execution_device) if device.type == "meta" and hook is not None else device


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # transformers' named placements


def check_device_map(device_map: str | None, pretrained: bool) -> dict:
    """``from_pretrained``'s placement arguments for ``--device-map`` (none: {}): a name transformers knows, or a
    JSON object of module name → device (a GPU index, "cuda:1", "cpu", "disk"); weights it offloads to disk go to
    a folder removed when laya exits. A map that is neither, a model built without weights, or accelerate
    missing: one line."""
    if device_map is None:
        return {}
    placement = parse_device_map(device_map)
    if not pretrained:
        raise LayaError("--device-map places a pretrained model's weights: not with --no-pretrained")
    try:
        import accelerate  # noqa: F401 - transformers' device_map route runs on it
    except ImportError:
        raise LayaError("--device-map needs accelerate: pip install 'laya-audit[lm]'") from None
    folder = tempfile.mkdtemp(prefix="laya-offload-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return {"device_map": placement, "offload_folder": folder}


def parse_device_map(device_map: str) -> str | dict:
    """``--device-map`` as transformers takes it (a name, or a dict of module → device), its devices checked on this
    machine before any weight is read; the module names are checked on the model itself (``check_map_modules``)."""
    if device_map in DEVICE_MAPS:
        return device_map
    try:
        placement = json.loads(device_map)
    except json.JSONDecodeError:
        placement = None
    if (
        not isinstance(placement, dict)
        or not placement
        or not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in placement.values())
    ):
        raise LayaError(
            f"--device-map {device_map!r}: choose from {', '.join(DEVICE_MAPS)}, or give a JSON object of module "
            'name → device ({"model.layers.0": 0, "lm_head": "cpu"})'
        )
    for module, device in placement.items():
        check_map_device(module, device)
    return placement


def check_map_device(module: str, device: int | str) -> None:
    """One device of a ``--device-map`` object, before any weight is read: a GPU index or ``cuda:N`` this machine
    has, ``cuda``, ``cpu``, ``mps`` where there is one, or ``disk``; anything else is one line naming it."""
    if device in ("cpu", "disk"):
        return
    kind = "cuda" if isinstance(device, int) else None
    index = device if isinstance(device, int) else None
    if isinstance(device, str):
        try:
            parsed = torch.device(device)
        except RuntimeError:
            parsed = None
        if parsed is None or parsed.type not in ("cuda", "mps"):
            raise LayaError(
                f"--device-map: unknown device {device!r} for {module or 'the whole model'}: give a GPU index (0), "
                '"cuda:N", "cpu", "mps" or "disk"'
            )
        kind, index = parsed.type, parsed.index
    if kind == "mps" and not torch.backends.mps.is_available():
        raise LayaError(f"--device-map: {module or 'the whole model'} on {device!r}, but this machine has no MPS")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (index or 0) < 0 or (index or 0) >= count:
            has = f"its GPUs are 0 … {count - 1}" if count else "it has no CUDA GPU"
            raise LayaError(f"--device-map: {module or 'the whole model'} on GPU {device!r}, but {has}")


def check_map_modules(transformers, where: str, placement: str | dict) -> None:
    """A ``--device-map`` object names modules (or weights) of the model: checked on the model built from its
    config without weights (meta tensors), so an unknown name is one line, not silently ignored."""
    if not isinstance(placement, dict):
        return
    config = _config(transformers, where, bool(local_dir(where)))
    with torch.device("meta"):
        empty = transformers.AutoModelForCausalLM.from_config(config, **NO_REMOTE_CODE)
    names = {name for name, _ in empty.named_modules()} | {name for name, _ in empty.named_parameters()}
    names |= {name for name, _ in empty.named_buffers()}
    for module in placement:
        if module not in names:
            raise unknown_choice("module in --device-map", module, sorted(n for n in names if n))


def _load_causal(transformers, where: str, pretrained: bool, device_map: str | None = None) -> nn.Module:
    placement = check_device_map(device_map, pretrained)
    try:
        config = _config(transformers, where, bool(local_dir(where)))  # custom code refused before anything is built
        if not pretrained:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return transformers.AutoModelForCausalLM.from_config(config, **NO_REMOTE_CODE)
        with hub_session(offline_now=bool(local_dir(where)) or offline()):
            if placement:
                check_map_modules(transformers, where, placement["device_map"])
            return transformers.AutoModelForCausalLM.from_pretrained(
                where, cache_dir=str(hf_cache_dir()), **placement, **NO_REMOTE_CODE
            )
    except LayaError:
        raise
    except (RuntimeError, KeyError) as e:
        if placement:  # what transformers or accelerate say of a placement they cannot make
            raise LayaError(f"--device-map: hf:{where} cannot be placed so: {_first_line(e)}") from None
        raise
    except ValueError as e:
        if "Unrecognized configuration" in str(e) or "not recognized" in str(e):
            raise LayaError(
                f"hf:{where} is not a causal language model (AutoModelForCausalLM has no class for it)"
            ) from None
        if placement:
            raise LayaError(f"--device-map: hf:{where} cannot be placed so: {_first_line(e)}") from None
        raise LayaError(f"could not create hf:{where}: {_first_line(e)}") from None
    except OSError as e:
        raise LayaError(f"could not load hf:{where}: {_first_line(e)}") from None


def placed_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights (``state_dict``), those a device map offloaded read where accelerate keeps them: such a
    weight is a meta tensor on the model, loaded by accelerate's hook at every call — so the SHA-256 of a model
    placed with offloading is the SHA-256 of the same model loaded whole."""
    state = model.state_dict()
    if not any(t.is_meta for t in state.values()):
        return state
    kept = {}
    for m in model.modules():
        offloaded = getattr(getattr(m, "_hf_hook", None), "weights_map", None)  # accelerate's AlignDevicesHook
        if offloaded is not None:
            kept.update({k: offloaded.dataset[k] for k in offloaded.keys()})
    lost = [k for k, t in state.items() if t.is_meta and k not in kept]
    if lost:
        raise LayaError(f"{len(lost)} weights of the placed model are nowhere laya can read them (e.g. {lost[0]})")
    return {k: kept[k] if t.is_meta else t for k, t in state.items()}


def _norm_candidates(base: nn.Module, layers: list[str]) -> list[tuple[str, nn.Module]]:
    """The base model's norm modules that lie in none of its tapped layers, last first, then no norm at all."""
    inside = tuple(name + "." for name in layers)
    found = [
        (name, m)
        for name, m in base.named_modules()
        if name and "norm" in type(m).__name__.lower() and not name.startswith(inside) and name not in layers
    ]
    return found[::-1] + [("", nn.Identity())]


@torch.no_grad()
def find_readout(causal: nn.Module, backbone: TappedBackbone, where: str) -> Readout:
    """The readout that turns the last tap's output into the model's own logits on a probe batch."""
    head = causal.get_output_embeddings()
    if not isinstance(head, nn.Module) or not hasattr(head, "weight"):
        raise LayaError(f"hf:{where} has no unembedding (get_output_embeddings): laya --task lm reads through it")
    vocab = int(head.weight.shape[0])
    ids = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(0))
    batch = torch.stack([ids, torch.ones_like(ids)], dim=1).to(head.weight.device)
    was = causal.training
    causal.eval()
    try:
        logits = causal(input_ids=batch[:, 0], attention_mask=batch[:, 1]).logits.float()
        last = backbone.activations(batch)[-1].float()
    finally:
        causal.train(was)
    config = causal.config
    scale, softcap = getattr(config, "logit_scale", None) or 1.0, getattr(config, "final_logit_softcapping", None)
    for _name, norm in _norm_candidates(backbone.model, backbone.layer_names):
        readout = Readout(norm, head, scale, softcap)
        got = readout(last.to(head.weight.dtype)).float()
        if got.shape == logits.shape and torch.allclose(got, logits, atol=1e-4, rtol=1e-3):
            return readout
    raise LayaError(
        f"hf:{where}'s logits are not its unembedding of a final norm of its last layer (soft-capped or scaled "
        "beyond what its config declares?): laya --task lm reads every layer through the model's own readout and "
        "cannot find it"
    )


def build_language_model(
    spec: BackboneSpec, expect_sha256: str | None = None, device_map: str | None = None
) -> LanguageModel:
    """``hf:NAME``/``hf:DIR`` as a language model: its base model tapped after every layer (``--layers`` globs choose
    others), its tokenizer, its readout. ``expect_sha256``: the weights a checkpoint was trained with.
    ``device_map``: transformers' placement of a model larger than one device (``--device-map``, docs/lm.md)."""
    if not spec.name.startswith("hf:"):
        raise LayaError(f"--task lm takes a causal language model of transformers (hf:NAME or hf:DIR), not {spec.name}")
    transformers = transformers_module()
    model_name = spec.name[3:]
    folder = local_dir(model_name)
    where = str(folder) if folder else model_name
    causal = _load_causal(transformers, where, spec.pretrained or bool(folder), device_map)
    state = placed_weights(causal)
    sha = weights_sha256(state)
    check_sha256(state, expect_sha256, f"hf:{where}")
    causal.requires_grad_(False).eval()
    base = getattr(causal, "base_model", causal)
    family = HFFamily()
    family.prepare(base)
    text = text_input(base, where, spec.max_length, cached=bool(folder) or offline())
    spec = replace(spec, pool="last" if spec.pool == "auto" else spec.pool)
    backbone = tap_model(base, text, spec, family=family)
    backbone.weights_source = f"hf:{where}"
    eos = getattr(causal.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
    readout = find_readout(causal, backbone, where)
    return LanguageModel(backbone, readout, sha, eos if isinstance(eos, int) else None, device_map is not None)
