"""Hugging Face transformers (``hf:NAME`` from the hub, ``hf:DIR`` from ``save_pretrained`` output).

The model is ``AutoModel``'s (a task model is reduced to its base model); its taps are its layers, one per
hidden state after the embeddings: the container whose children's outputs are the model's own
``output_hidden_states`` (checked on a probe batch, never assumed from names). A tap is the layer's output —
the residual stream; a decoder's last hidden state in ``output_hidden_states`` has its final norm applied
on top, a tap has not (docs/text.md).

Text models take B×2×L token batches (ids, attention mask: ``TokenAdapter``), tokenised by the model's own
tokenizer, or one trained on the training split when the model has none (``train_tokenizer``); pooling
respects the attention mask (``pooling.py``). Vision models take images as every other family, normalised
by their image processor's mean and std.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
from torch import nn

from ..runtime.errors import LayaError
from .chain import eval_mode
from .engines import TIME_FIRST, call_model, first_tensor, split_call
from .family import Family, _first_line
from .pooling import Layouts
from .spec import IMAGENET_MEAN, IMAGENET_STD, BackboneSpec, InputConfig, TextInput
from .stages import feature_info
from .tokenizers import input_embeddings, set_tokenizer, text_input_from, vocabulary
from .weights import hf_cache_dir, hub_file_cached, hub_session, offline, pretrained_unavailable, require_download

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise LayaError("hf: backbones need transformers: pip install 'laya-audit[hf]'") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights" bars: laya draws its own progress
    return transformers


def local_dir(model_name: str) -> Path | None:
    """``hf:DIR``: a folder of ``save_pretrained`` output (holding config.json); None for a hub id."""
    path = Path(model_name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LayaError(f"hf:{model_name} is a folder without config.json: not save_pretrained output")
        return path
    if model_name.startswith((".", "/", "~")) or model_name.count("/") > 1:
        raise LayaError(f"hf:{model_name}: no such folder")
    return None


def main_input(model: nn.Module) -> str:
    """What the model reads: its ``main_input_name`` where its forward takes it, else the one of ``input_ids`` and
    ``pixel_values`` its forward takes (a vision tower that inherits ``input_ids`` from its base class: SmolVLM's)."""
    name = getattr(model, "main_input_name", "")
    if not isinstance(name, str):  # OneFormer names two: pixel_values, task_inputs
        name = next((n for n in name if n in INPUTS), "") if isinstance(name, (list, tuple)) else ""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return name
    if name in params:
        return name
    takes = [n for n in INPUTS if n in params]
    if len(takes) == 1:
        return takes[0]
    first = next((n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), name)
    return name if takes else first  # neither (a vision tower fed patches: Glm4v's takes hidden_states)


def probe_call(model: nn.Module, inputs):
    """The model's own forward on a probe batch; a model that fails there is refused in one line naming its error
    (a model transformers builds but cannot run on token ids or images alone), never a traceback. A forward that
    returns a tuple unless told (DPR's encoder: ``return_dict=False`` by default) is told."""
    if "return_dict" in _parameters(model):
        inputs = {**inputs, "return_dict": True}
    try:
        return call_model(model, inputs)
    except LayaError:
        raise
    except Exception as e:
        what = "token ids" if "input_ids" in inputs else "images"
        besides = [n for n in OTHER_INPUTS if n in _parameters(model) and n not in inputs]
        also = f" (it also takes {', '.join(besides)})" if besides else ""
        raise LayaError(
            f"{type(model).__name__} cannot run on {what} alone{also} (laya's probe batch): {type(e).__name__}: "
            f"{_first_line(e)[:160]}{_unset_sizes(model, inputs)}"
        ) from None


# inputs a model may need besides its tokens or images, named where its forward fails without them
OTHER_INPUTS = ("pixel_values", "pixel_values_videos", "bbox", "visual_embeds", "input_features", "lang_ids")
SIZE_WORDS = ("size", "grid", "shape", "seqlen")  # optional inputs a packed or variable-size vision model may need


def _unset_sizes(model: nn.Module, inputs) -> str:
    """Where the forward takes optional sizes laya does not give (MiniCPM-V's ``target_sizes``: optional in its
    signature, read by its code), a note naming them, so the refusal says what the model missed."""
    unset = [
        n
        for n, p in _parameters(model).items()
        if p.default is None and n not in inputs and any(w in n for w in SIZE_WORDS)
    ]
    return f" (its forward also takes {', '.join(unset[:3])}, which laya leaves unset)" if unset else ""


def _parameters(model: nn.Module) -> dict:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def is_text(model: nn.Module) -> bool:
    return main_input(model) == "input_ids"


# Every transformers call that reads a model folder or a hub repository passes this: no code from a model folder
# ever runs (docs/security.md), and transformers never asks on stdin whether it may.
NO_REMOTE_CODE = {"trust_remote_code": False}


def _config(transformers, where: str, cached: bool):
    try:
        config = transformers.AutoConfig.from_pretrained(where, local_files_only=cached or offline(), **NO_REMOTE_CODE)
    except Exception as e:
        if "trust_remote_code" in str(e) or "custom code" in str(e):
            raise LayaError(custom_code_refused(where, "its config names a model type transformers lacks")) from None
        raise LayaError(f"hf:{where}: cannot read its config: {type(e).__name__}: {_first_line(e)}") from None
    return refuse_custom_code(config, where)


def custom_code_refused(where: str, why: str) -> str:
    return (
        f"hf:{where} asks to run code of its own ({why}); laya never runs a model folder's code: use a model "
        "transformers ships, or wrap yours with --arch module:callable (code you name)"
    )


def refuse_custom_code(config, where: str):
    """``config`` unless it names code of its own (``auto_map``: classes in the folder's .py files), which
    transformers would run (or ask about on stdin): then one line, before anything is built."""
    auto_map = getattr(config, "auto_map", None)
    if auto_map:
        named = ", ".join(f"{k}: {v}" for k, v in dict(auto_map).items())
        raise LayaError(custom_code_refused(where, f"auto_map {named}"))
    return config


def _encoder(model: nn.Module) -> nn.Module:
    """An encoder–decoder's encoder (T5, BART, Switch, T5Gemma…): what reads the input, its layers laya taps (the
    decoder needs decoder inputs a classifier has none of); any other model as it is."""
    get = getattr(model, "get_encoder", None)
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False) or not callable(get):
        return model
    try:
        encoder = get()
    except Exception:  # noqa: BLE001 - a model whose get_encoder is not its own: keep the whole model
        return model
    usable = isinstance(encoder, nn.Module) and encoder is not model and hasattr(encoder, "config")
    return encoder if usable and main_input(encoder) in INPUTS else model


INPUTS = ("input_ids", "pixel_values")
VISION_TOWERS = ("vision_model", "vision_encoder")  # where a model of several parts keeps its image tower


def _base_model(model: nn.Module, where: str) -> nn.Module:
    """The transformer under a task model; an encoder–decoder's encoder; CLIP-style dual towers: the vision tower.
    A model whose forward needs more than its tokens or images (a vision tower fed ``grid_thw``) is refused."""
    tapped = _reduced(model, where)
    if type(tapped).forward is nn.Module.forward:  # Bark's three models, GLM-Image's VQ tokenizer
        raise LayaError(
            f"hf:{where} ({type(tapped).__name__}) has no forward of its own (models or codecs another model's "
            "generate calls): laya taps a model's forward"
        )
    extra = _required_besides(tapped, main_input(tapped))
    if extra:
        raise LayaError(
            f"hf:{where} takes {main_input(tapped)} and {', '.join(extra)}: laya feeds a model tokens or images alone"
        )
    return tapped


def tapped_model(model: nn.Module, where: str) -> nn.Module:
    """What laya taps of ``model`` (``_base_model``), a video model set to take images (``_still_clips``)."""
    tapped = _base_model(model, where)
    if not is_text(tapped):
        _still_clips(tapped, where)
    return tapped


def _still_clips(model: nn.Module, where: str) -> None:
    """A video model — its config declares ``num_frames`` and its forward reads B×T×C×H×W ``pixel_values``
    (VideoMAE, TimeSformer, ViViT) — is fed each image as a still clip: the image repeated over its frames, by a
    pre-hook on its forward (``model.laya_still_clip``: the frame count, recorded in the checkpoint). A model that
    runs on images as they are is left alone; one that runs on neither is refused in one line."""
    frames = _image_setting(model.config, "num_frames")
    if not frames or getattr(model, "laya_still_clip", None):
        return
    try:
        with torch.no_grad(), eval_mode(model):
            probe_call(model, _probe_inputs(model))
        return
    except LayaError as e:
        as_images = e
    handle = model.register_forward_pre_hook(_as_clip(frames), with_kwargs=True)
    try:
        with torch.no_grad(), eval_mode(model):
            probe_call(model, _probe_inputs(model))
    except LayaError as e:
        handle.remove()
        why = [_first_line(x).partition("(laya's probe batch): ")[2][:100] for x in (as_images, e)]
        raise LayaError(
            f"{type(model).__name__} declares num_frames={frames} but runs neither on images ({why[0]}) nor on still "
            f"clips of them, B×{frames}×C×H×W ({why[1]}): laya feeds images"
        ) from None
    model.laya_still_clip = frames


def _as_clip(frames: int):
    """A forward pre-hook that turns B×C×H×W ``pixel_values`` into B×frames×C×H×W still clips."""

    def hook(module, args, kwargs):
        if args and isinstance(args[0], torch.Tensor) and args[0].ndim == 4:
            return (_clip(args[0], frames), *args[1:]), kwargs
        x = kwargs.get("pixel_values")
        if isinstance(x, torch.Tensor) and x.ndim == 4:
            return args, {**kwargs, "pixel_values": _clip(x, frames)}
        return args, kwargs

    return hook


def _clip(images: torch.Tensor, frames: int) -> torch.Tensor:
    return images.unsqueeze(1).expand(-1, frames, -1, -1, -1).contiguous()


def _required_besides(model: nn.Module, main: str) -> list[str]:
    """The arguments the model's forward requires other than ``main`` (no default value)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [n for n, p in params.items() if p.kind in kinds and p.default is p.empty and n != main]


def _reduced(model: nn.Module, where: str) -> nn.Module:
    initialised = getattr(model, "laya_initialised_weights", None)
    model = _encoder(getattr(model, "base_model", model))
    if initialised is not None:
        model.laya_initialised_weights = initialised
    vision = next((t for t in map(lambda a: getattr(model, a, None), VISION_TOWERS) if isinstance(t, nn.Module)), None)
    tower = vision is not None and vision is not model and main_input(vision) == "pixel_values"
    if tower and (isinstance(getattr(model, "text_model", None), nn.Module) or main_input(model) == "pixel_values"):
        return vision  # a dual-tower model (CLIP, SigLIP, ALIGN…), or an image model of several parts (SAM): its tower
    text = getattr(model, "text_model", None)
    needs_more = input_embeddings(model) is None or _required_besides(model, "input_ids")
    if is_text(model) and needs_more and isinstance(text, nn.Module) and is_text(text):
        return text  # a text tower beside another (CLAP's, PE Audio's audio): the tower that embeds the tokens
    text_tower = _text_tower(model)
    if text_tower is not None:
        return text_tower
    if not is_text(model) and main_input(model) != "pixel_values":
        if tower:
            return vision
        raise LayaError(f"hf:{where} takes {main_input(model) or '?'}: laya taps text and image models")
    return model


TEXT_TOWERS = ("language_model", "text_model", "text_encoder_model")  # where a model of several parts keeps the one
# that reads its tokens (CLVP: its text encoder, beside its speech encoder and decoder)


def _text_tower(model: nn.Module) -> nn.Module | None:
    """A multimodal model's language model or text tower where the whole model cannot run on token ids alone but
    that part can (BridgeTower's cross-modal layers need an image; Llama 4's forward fails without one): the
    layers that read the tokens. None where the whole model runs on them, or no such part does."""
    towers = [getattr(model, a, None) for a in TEXT_TOWERS]
    towers = [t for t in towers if isinstance(t, nn.Module) and t is not model and is_text(t)]
    if not towers or not is_text(model) or _runs_on_tokens(model):
        return None
    return next((getattr(t, "base_model", t) for t in towers if _runs_on_tokens(getattr(t, "base_model", t))), None)


def _runs_on_tokens(model: nn.Module) -> bool:
    for config in _configs(model.config):  # no key/value cache, as laya runs it (``HFFamily.prepare``)
        if getattr(config, "use_cache", False):
            config.use_cache = False
    try:
        with torch.no_grad(), eval_mode(model):
            probe_call(model, _probe_inputs(model))
    except Exception:  # noqa: BLE001 - a model whose own forward fails on tokens (laya's one line): not this one
        return False
    return True


def _load(transformers, where: str, spec: BackboneSpec, cached: bool) -> nn.Module:
    config = _config(transformers, where, cached)
    try:
        if spec.pretrained:
            # Weights AutoModel creates that the folder lacks (a BertModel saved without its pooler) are initialised
            # at random: seeded, so every load builds the same model (and the same SHA-256).
            with hub_session(offline_now=cached or offline()), torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model, info = transformers.AutoModel.from_pretrained(
                    where, cache_dir=str(hf_cache_dir()), output_loading_info=True, **NO_REMOTE_CODE
                )
            model.laya_initialised_weights = sorted(info.get("missing_keys") or [])
        else:
            model = transformers.AutoModel.from_config(config, **NO_REMOTE_CODE)
    except ValueError as e:
        if "Unrecognized configuration" in str(e) or "not recognized" in str(e):
            raise LayaError(f"hf:{where} ({config.model_type}) is not a model transformers' AutoModel knows") from None
        raise LayaError(f"could not create hf:{where}: {_first_line(e)}") from None
    except Exception as e:
        if spec.pretrained:
            raise pretrained_unavailable(f"hf:{where}", f"{type(e).__name__}: {_first_line(e)[:80]}") from None
        raise LayaError(f"could not create hf:{where}: {type(e).__name__}: {_first_line(e)}") from None
    return tapped_model(model, where)


def text_input(model: nn.Module, where: str, max_length: int | None, cached: bool) -> TextInput:
    """The model's token input: its own tokenizer when it has one (a hub or local tokenizer), else none yet
    (``train_tokenizer`` makes one on the training split); ``max_length`` checked against its positions."""
    text = text_input_from(model, max_length, where)
    folder = local_dir(where)
    saved = any((folder / f).is_file() for f in TOKENIZER_FILES) if folder else hub_file_cached(where, TOKENIZER_FILES)
    if not saved and (folder or offline()):
        return text  # no tokenizer beside the model: trained on the training split
    transformers = transformers_module()
    try:
        tok = transformers.AutoTokenizer.from_pretrained(where, local_files_only=cached or offline(), **NO_REMOTE_CODE)
    except Exception as e:
        if not saved:
            return text  # no tokenizer beside the model (none on the hub either): trained on the training split
        # A tokenizer that is there but cannot be read is an error: a vocabulary learnt instead would feed the
        # pretrained weights ids they never saw, silently.
        files = [f for f in TOKENIZER_FILES if (folder / f).is_file()] if folder else ["its tokenizer files"]
        raise LayaError(
            f"hf:{where}'s tokenizer ({', '.join(files)}) cannot be read: {type(e).__name__}: {_first_line(e)}"
        ) from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise LayaError(f"hf:{where}'s tokenizer is not a fast tokenizer; save one with tokenizer.json")
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    return set_tokenizer(text, backend.to_str(), int(pad), f"the tokenizer of hf:{where}")


def _embedding_grads(model: nn.Module) -> None:
    """A frozen model fed integer ids has no tensor in autograd until its embeddings' output: make that
    output require grad (when grad is on) so Captum's layer gradients reach the taps."""
    if getattr(model, "_laya_embedding_grads", False) or not is_text(model):
        return

    def hook(module, args, output):
        first = first_tensor(output)  # I-BERT's table returns (embeddings, scaling factor)
        if torch.is_grad_enabled() and isinstance(first, torch.Tensor) and not first.requires_grad:
            grad = first.detach().requires_grad_(True)
            return grad if output is first else type(output)([grad, *output[1:]])
        return output

    table = input_embeddings(model)
    if table is not None:  # none: refused where its vocabulary is read (text_input)
        table.register_forward_hook(hook)
    model._laya_embedding_grads = True


def _probe_inputs(model: nn.Module, length: int = 12):
    g = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    if is_text(model):
        ids = torch.randint(0, vocabulary(model), (2, length), generator=g)
        return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
    channels, (height, width) = image_geometry(model.config)
    return {"pixel_values": torch.rand(2, channels, height, width, generator=g).to(device)}


def _image_setting(config, key: str):
    """``key`` of an image model's config, or of its vision sub-config where the top level has none (SAM's)."""
    read = (lambda c, k: c.get(k)) if isinstance(config, dict) else (lambda c, k: getattr(c, k, None))
    for cfg in (config, read(config, "vision_config"), read(config, "backbone_config")):
        value = read(cfg, key) if cfg is not None else None
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def image_geometry(config) -> tuple[int, tuple[int, int]]:
    """(channels, (height, width)) of an image model's input, from its config (3 and 224 × 224 where it names
    none); an ``image_size`` of two values is height × width (MGP-STR's 32 × 128), one value a square side."""
    return _image_setting(config, "num_channels") or 3, image_hw(config) or (224, 224)


def image_hw(config) -> tuple[int, int] | None:
    """The config's ``image_size`` as (height, width) (of its vision sub-config where the top level has none)."""
    read = (lambda c, k: c.get(k)) if isinstance(config, dict) else (lambda c, k: getattr(c, k, None))
    for cfg in (config, read(config, "vision_config"), read(config, "backbone_config")):
        value = read(cfg, "image_size") if cfg is not None else None
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
            return int(value[0]), int(value[1])
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return value, value
    return None


def _layer_outputs(model: nn.Module, inputs, kinds=(nn.ModuleList,)) -> tuple[list, dict[str, list], list]:
    """The model's ``hidden_states``; per ModuleList (per container of ``kinds``), the taps its children's calls
    would be, in call order: (tap name, first output); and every ModuleList's taps as their calls ended. A child
    called more than once (a layer shared across depth: ALBERT) is tapped per call, ``<list>.<child>#<call>``."""
    lists = {n: m for n, m in model.named_modules() if isinstance(m, kinds) and len(m)}
    calls: dict[str, list] = {n: [] for n in lists}
    order: list[tuple[str, int]] = []  # (list, its call's index) as the calls end, across every list

    def record(name: str, c: int, output) -> None:
        if isinstance(lists[name], nn.ModuleList):
            order.append((name, len(calls[name])))
        calls[name].append((c, first_tensor(output)))

    handles = []
    for name, ml in lists.items():
        for c, child in enumerate(ml):
            handles.append(child.register_forward_hook(lambda m, a, o, name=name, c=c: record(name, c, o)))
    try:
        with torch.no_grad(), eval_mode(model):
            result = probe_call(model, {**inputs, "output_hidden_states": True})
    finally:
        for h in handles:
            h.remove()
    states = [s for s in map(lambda k: _states(result, k), STATE_KEYS) if s]
    if not states:
        raise LayaError(f"{type(model).__name__} returns no hidden_states: not a transformer laya can tap")
    _check_repeats(model, inputs, states[0][-1])
    batch = len(next(iter(inputs.values())))
    rows = {int(h.shape[0]) for h in states[0] if isinstance(h, torch.Tensor) and h.ndim}
    if rows != {batch}:  # Pixtral's vision tower packs a batch of images into one sequence
        raise LayaError(
            f"{type(model).__name__} gives hidden states of {sorted(rows)} rows for a batch of {batch} (packed into "
            "one sequence, or time first): laya needs one row per sample"
        )
    outs = {}
    for name, got in calls.items():
        times = {c: sum(1 for d, _ in got if d == c) for c, _ in got}
        seen: dict[int, int] = {}
        outs[name] = []
        for c, out in got:
            call = seen[c] = seen.get(c, -1) + 1
            outs[name].append((f"{name}.{c}" + (f"#{call}" if times[c] > 1 else ""), out))
    return states, outs, [outs[name][i] for name, i in order]


def _check_repeats(model: nn.Module, inputs, last) -> None:
    """Refuse a model whose forward in eval mode gives another last hidden state on the same batch (it samples:
    ViT-MAE shuffles and masks patches at random on every call): its taps, and every figure read from them, would
    change from call to call. Checked once per model."""
    if getattr(model, "_laya_repeats", False):
        return
    with torch.no_grad(), eval_mode(model):
        again = hidden_states(probe_call(model, {**inputs, "output_hidden_states": True}))
    if not _matches(last, again[-1] if again else None):
        raise LayaError(
            f"{type(model).__name__} gives other hidden states on each call of the same batch in eval mode (it draws "
            "at random in its forward, as ViT-MAE's patch masking does): laya's taps must repeat"
        )
    model._laya_repeats = True


STATE_KEYS = ("hidden_states", "encoder_hidden_states")  # a forward's per-layer states, in the order laya tries them


def _states(result, key: str) -> list | None:
    hidden = getattr(result, key, None)
    if isinstance(hidden, (tuple, list)) and hidden:
        return [first_tensor(h) for h in hidden]  # MaskFormer's Swin: (state, its spatial size) per layer
    return None


def hidden_states(result):
    """A forward's per-layer states: ``hidden_states``, or an encoder's where the model reads its input with an
    encoder and returns those apart (DETR's ``encoder_hidden_states``: the layers laya taps); None if neither."""
    return next((s for s in map(lambda k: _states(result, k), STATE_KEYS) if s), None)


def _matches(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    )


def _same_data(a, b) -> bool:
    """Whether ``a`` holds ``b``'s values per sample, maybe in another layout (a stage's B×N×D tokens that the model
    returns as B×C×H×W): equal, or equal once each row's values are sorted."""
    if _matches(a, b):
        return True
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape[0] != b.shape[0]:
        return False
    if a[0].numel() != b[0].numel() or not a.is_floating_point():
        return False
    return torch.allclose(a.flatten(1).sort().values, b.flatten(1).sort().values.to(a.dtype), rtol=1e-4, atol=1e-5)


def _per_sample(got, rows: int) -> bool:
    return all(isinstance(o, torch.Tensor) and o.ndim and len(o) == rows for _, o in got)


def _after_embeddings(outs: dict[str, list], hidden: list, strict: bool = True) -> list[str] | None:
    """The list whose calls give ``hidden[1:]`` (the first state is the embeddings'; the last may differ: a
    decoder's final norm); unless ``strict``, one whose count is theirs: the one with most outputs equal to them."""
    best = None
    for got in outs.values():
        if len(got) != len(hidden) - 1 or not _per_sample(got, len(hidden[0])):
            continue  # a list whose outputs are not one row per sample (MobileViT's blocks run on unfolded patches)
        same = sum(_matches(out, h) for (_, out), h in zip(got, hidden[1:]))
        if (best is None or same > best[0]) and (not strict or same >= len(got) - 1):
            best = (same, [tap for tap, _ in got])
    return best[1] if best else None


def _stage_outputs(outs: dict[str, list], hidden: list) -> list[str] | None:
    """The list whose calls give every state, the first included (a hierarchical vision model that returns its
    stages' outputs and no embeddings: CvT, MobileNet, SegFormer), each holding its state's values."""
    for got in outs.values():
        if len(got) == len(hidden) and all(_same_data(out, h) for (_, out), h in zip(got, hidden)):
            return [tap for tap, _ in got]
    return None


def layer_taps(model: nn.Module) -> list[str]:
    """One tap per hidden state after the embeddings: the calls of the children of the ModuleList whose outputs
    are ``hidden_states[1:]``, or every state where the model returns its stages alone; a model that returns the
    states of several parts (MaskFormer) is tapped where its encoder's states are."""
    try:
        states, found, order = _layer_outputs(model, _probe_inputs(model), (nn.ModuleList, nn.Sequential))
    except LayaError:
        stages = _stages_without_states(model)
        if stages:
            return stages
        raise
    outs = {n: got for n, got in found.items() if isinstance(model.get_submodule(n), nn.ModuleList)}
    for hidden in states:
        taps = _after_embeddings(outs, hidden) or _stage_outputs(outs, hidden)
        if taps:
            return taps
    flipped = _time_first_outputs(outs, len(states[0][0]))
    taps = next(filter(None, (_after_embeddings(flipped, hidden) for hidden in states)), None)
    if taps:  # its layers run time first: their hidden states are read (and written back) transposed
        setattr(model, TIME_FIRST, frozenset(split_call(t)[0] for t in taps))
        return taps
    taps = _after_embeddings(outs, states[0], strict=False) or _across_lists(order, states[0])
    if taps is None:  # layers an nn.Sequential holds and the model calls one by one (MGP-STR's blocks)
        taps = _after_embeddings({n: got for n, got in found.items() if n not in outs}, states[0])
    if taps is None:
        raise _untappable(model, states[0], outs)
    return taps


def _time_first_outputs(outs: dict[str, list], rows: int) -> dict[str, list]:
    """The lists whose outputs run time first (L×B×D for a batch of ``rows``: FSMT's, XLNet's layers), each output
    laid out batch first."""
    return {
        name: [(tap, o.transpose(0, 1)) for tap, o in got]
        for name, got in outs.items()
        if got and all(isinstance(o, torch.Tensor) and o.ndim == 3 and o.shape[1] == rows != len(o) for _, o in got)
    }


def _across_lists(order: list, hidden: list) -> list[str] | None:
    """Taps from several lists, in the order their calls end, whose outputs are the hidden states: a model whose
    states come from lists called in turn (Funnel's blocks, then its decoder; PoolFormer's stages, each a list of
    blocks; HRM's two levels). Every state is matched but the first (the embeddings': no layer returns it) and one
    more (Funnel's upsampled stream, which no layer returns); of consecutive calls giving one state (a stage and
    its last block), the later, outer one is tapped."""
    rows = len(hidden[0])
    calls = [(tap, out) for tap, out in order if isinstance(out, torch.Tensor) and out.ndim and len(out) == rows]
    taps, start, missed = [], 0, []
    for i, h in enumerate(hidden):
        j = next((k for k in range(start, len(calls)) if _same_data(calls[k][1], h)), None)
        if j is None:
            missed.append(i)
            continue
        while j + 1 < len(calls) and _same_data(calls[j + 1][1], h):
            j += 1
        taps.append(calls[j][0])
        start = j + 1
    extra = [i for i in missed if i != 0]
    return taps if len(taps) >= 2 and len(extra) <= 1 and len(set(taps)) == len(taps) else None


def _stages_without_states(model: nn.Module) -> list[str] | None:
    """Where the model's forward cannot return hidden states but runs without them, and one timm backbone in it
    declares its stages (``feature_info``: EdgeTAM's features-only RepViT, whose wrapper refuses
    ``output_hidden_states``): those stages, the modules the model's own neck reads; None otherwise."""
    cached = getattr(model, "_laya_declared_stages", None)
    if cached is not None:
        return cached or None
    declared = [(n, m) for n, m in model.named_modules() if n and feature_info(m)]
    stages: list[str] = []
    if len(declared) == 1:
        name, backbone = declared[0]
        inside = {n for n, _ in backbone.named_modules()}
        for entry in feature_info(backbone):  # features_only nets name "stages.0" as their child "stages_0"
            module = str(entry.get("module", ""))
            found = next((m for m in (module, module.replace(".", "_")) if m and m in inside), None)
            stages = stages + [f"{name}.{found}"] if found else []
            if not found:
                break
    if stages:
        try:
            with torch.no_grad(), eval_mode(model):
                probe_call(model, _probe_inputs(model))
        except LayaError:
            stages = []
    model._laya_declared_stages = stages
    return stages or None


def _untappable(model: nn.Module, hidden: list, outs: dict[str, list]) -> LayaError:
    """Why no list of layers gives the hidden states, in one line."""
    name, want, rows = type(model).__name__, len(hidden) - 1, len(hidden[0])
    if not any(outs.values()):
        return LayaError(
            f"{name}: no layer of it runs as a module call (its layers are called as layer.forward(), which "
            "PyTorch's hooks never see): laya cannot tap it"
        )
    sized = [got for got in outs.values() if len(got) == want]
    if sized and all(
        isinstance(o, torch.Tensor) and o.ndim > 2 and len(o) != rows == o.shape[1] for g in sized for _, o in g
    ):
        return LayaError(
            f"{name}'s layers run time first (sequence × batch × width, its hidden states transposed after them): "
            "laya taps layers whose outputs have one row per sample"
        )
    stages = [n for n in outs if n.rpartition(".")[2].isdigit() and n.rpartition(".")[0] in outs]
    if len(stages) == len(hidden) and not outs[stages[0].rpartition(".")[0]]:
        return LayaError(
            f"{name}: its stages are lists of blocks, no one module gives a stage's output (its {want + 1} hidden "
            "states): laya taps one list of layers"
        )
    found = [{n for n, g in outs.items() for _, o in g if _matches(o, h)} for h in hidden[1:-1]]  # the last: a norm
    lists = sorted(set().union(*found)) if found and all(found) else []
    if len(lists) > 1:  # BLT's local decoder: cross-attention and self-attention layers in turn, each giving a state
        return LayaError(
            f"{name}: its {want} hidden states come from {len(lists)} lists of layers called in turn "
            f"({', '.join(lists)}), no one list gives them: laya taps one list of layers"
        )
    like = [
        g for g in outs.values() if g and all(isinstance(o, torch.Tensor) and o.shape == hidden[1].shape for _, o in g)
    ]
    if len(like) > 1 and sum(map(len, like)) == want:  # HRM: a low- and a high-level list of layers, called in turn
        return LayaError(
            f"{name}: its {want} hidden states come from {len(like)} lists of layers called in turn, no one list "
            "gives them: laya taps one list of layers"
        )
    return LayaError(
        f"{name}: no list of layers matches its {want} hidden states; choose the layers with --layers 'glob,glob'"
    )


def causal(model: nn.Module) -> bool:
    """Whether the first position's output ignores later tokens: a decoder (GPT-2, Llama…), checked on a
    probe, so the default pool is the last real token; an encoder's is its first ([CLS])."""
    inputs = _probe_inputs(model, 6)
    changed = {**inputs, "input_ids": inputs["input_ids"].clone()}
    changed["input_ids"][:, -1] = (changed["input_ids"][:, -1] + 1) % vocabulary(model)
    with torch.no_grad(), eval_mode(model):
        a, b = _last_state(probe_call(model, inputs)), _last_state(probe_call(model, changed))
    return a is not None and b is not None and bool(torch.allclose(a[:, 0], b[:, 0], atol=1e-5))


def _last_state(result) -> torch.Tensor | None:
    """A forward's last hidden state: ``last_hidden_state``, or an encoder's (FastSpeech 2's
    ``encoder_last_hidden_state``)."""
    for key in ("last_hidden_state", "encoder_last_hidden_state"):
        state = first_tensor(getattr(result, key, None))
        if isinstance(state, torch.Tensor) and state.ndim == 3:
            return state
    return None


def _prefix_tokens(model: nn.Module) -> int:
    """Tokens before the patches in a vision transformer's sequences (class, distillation, registers): the
    probe's sequence length less its patch count (a CNN's NCHW stages: 0); a still clip's sequence is its frames'
    (or tubelets') patches after the prefix."""
    patch = _patch_side(model.config)
    if is_text(model) or patch is None:
        return 0
    cached = getattr(model, "_laya_prefix_tokens", None)
    if cached is None:
        inputs = _probe_inputs(model)
        height, width = inputs["pixel_values"].shape[-2:]
        try:
            with torch.no_grad(), eval_mode(model):
                first = hidden_states(probe_call(model, {**inputs, "output_hidden_states": True}))[0]
        except LayaError:
            if not _stages_without_states(model):
                raise
            first = torch.zeros(())  # a timm backbone's NCHW stages: no prefix tokens
        patches = (height // patch) * (width // patch)
        tokens = int(first.shape[1]) if first.ndim == 3 else 0
        clip = getattr(model, "laya_still_clip", None)
        cached = (tokens % patches if clip else tokens - patches) if tokens >= patches else 0
        model._laya_prefix_tokens = cached
    return cached


def _patch_side(config) -> int | None:
    """A vision transformer's patch side: ``patch_size``, or a video tubelet's (``tubelet_size`` [t, h, w]: ViViT)."""
    patch, tubelet = getattr(config, "patch_size", None), getattr(config, "tubelet_size", None)
    if isinstance(patch, int) and not isinstance(patch, bool):
        return patch
    if isinstance(tubelet, (list, tuple)) and len(tubelet) == 3 and tubelet[1] == tubelet[2]:
        return int(tubelet[2])
    return None


# sentence-transformers' Pooling modes (1_Pooling/config.json) and the pool laya uses for each.
SENTENCE_POOLS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last"}


def declared_pool(folder: Path | None) -> tuple[str, str] | None:
    """(pool, where it was declared) when a sentence-transformers folder says how its embedding pools its tokens
    (``modules.json`` names a Pooling module whose config turns on one mode laya has); None otherwise."""
    if folder is None or not (folder / "modules.json").is_file():
        return None
    try:
        modules = json.loads((folder / "modules.json").read_text())
        path = next(m["path"] for m in modules if str(m.get("type", "")).endswith("models.Pooling"))
        config = json.loads((folder / path / "config.json").read_text())
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        return None
    on = [pool for key, pool in SENTENCE_POOLS.items() if config.get(key)]
    return (on[0], f"{path}/config.json (sentence-transformers)") if len(on) == 1 else None


def parse_index_ranges(patterns: list[str], n: int) -> list[int] | None:
    """``--layers 6-11`` / ``0,3,5-7``: layer indices into the default taps; None when the patterns are globs."""
    if not patterns or not all(p.replace("-", "").isdigit() and not p.startswith("-") for p in patterns):
        return None
    chosen: list[int] = []
    for p in patterns:
        lo, _, hi = p.partition("-")
        a, b = int(lo), int(hi or lo)
        if a > b or b >= n:
            raise LayaError(f"--layers {p}: this model has layers 0-{n - 1}")
        chosen += [i for i in range(a, b + 1) if i not in chosen]
    return sorted(chosen)


class HFFamily(Family):
    """``hf:NAME`` / ``hf:DIR``: transformers' ``AutoModel``, tapped after every layer."""

    name = "hf"
    engine = "replay"  # layers take masks and position embeddings besides the hidden state (engines.ReplayEngine)
    hub = True

    def build(self, model_name, spec, **_):
        transformers = transformers_module()
        folder = local_dir(model_name)
        where = str(folder) if folder else model_name
        cached = bool(folder) or (spec.pretrained and self.check_pretrained(model_name))
        model = _load(transformers, where, spec, cached)
        model.laya_declared_pool = declared_pool(folder)  # --pool auto honours it (default_pool)
        self.prepare(model)
        if is_text(model):
            return model, text_input(model, where, spec.max_length, cached)
        if spec.max_length is not None:
            raise LayaError(f"hf:{model_name} is an image model: --max-length applies to text models")
        return model, self._image_input(transformers, model, where, spec, cached)

    def _image_input(self, transformers, model, where, spec, cached) -> InputConfig:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
        try:
            proc = transformers.AutoImageProcessor.from_pretrained(
                where, local_files_only=cached or offline(), **NO_REMOTE_CODE
            )
            mean, std = tuple(proc.image_mean), tuple(proc.image_std)
        except Exception:
            pass  # no image processor saved beside the model: ImageNet's statistics
        channels, (height, width) = image_geometry(model.config)
        if spec.input_size and height != width:
            raise LayaError(
                f"hf:{where} takes {height}×{width} images (its config's image_size): --input-size sets a square "
                "side; leave it out"
            )
        return InputConfig(channels, (spec.input_size,) * 2 if spec.input_size else (height, width), mean, std)

    def owns(self, model):
        return type(model).__module__.startswith("transformers.")

    def prepare(self, model):
        _embedding_grads(model)
        for config in _configs(model.config):  # no key/value cache: a replayed layer must not extend it
            if getattr(config, "use_cache", False):
                config.use_cache = False

    def check_pretrained(self, model_name: str) -> bool:
        if local_dir(model_name):
            return True
        transformers_module()
        if hub_file_cached(model_name, ("config.json",)) and hub_file_cached(model_name, WEIGHT_FILES):
            return True
        return require_download(f"hf:{model_name}", "huggingface.co", f"{model_name} is not in the local hub cache")

    def input_side(self, model_name, spec):
        if spec.input_size:
            return spec.input_size
        folder = local_dir(model_name)
        config = folder / "config.json" if folder else None
        if config is not None:
            hw = image_hw(json.loads(config.read_text()))
            return max(hw) if hw else None  # images decoded at the longer side, resized to H×W by the adapter
        return None

    def layouts(self, model):
        return Layouts("NCHW", _prefix_tokens(model))

    def default_taps(self, model, probe):
        return layer_taps(model)

    def select_layers(self, model, patterns, probe):
        taps = layer_taps(model)
        index = parse_index_ranges(list(patterns), len(taps))
        if index is not None:
            return [taps[i] for i in index]
        if all(p in taps for p in patterns):  # default taps as a checkpoint records them (``layer#k``: a call)
            return [t for t in taps if t in patterns]
        # names as the task model spells them (model.layers.*, bert.encoder.layer.*) name the base model's too
        prefix = f"{getattr(model, 'base_model_prefix', '')}."
        return super().select_layers(model, [p.removeprefix(prefix) if prefix != "." else p for p in patterns], probe)

    def truncate(self, model, taps, k):
        """Keep the layers up to tap k: a transformer of fewer layers (what ``laya depth --truncate`` stores). A
        layer shared across depth (taps ``layer#0`` … ``layer#k-1``) stays, run k times (its config's layer count)."""
        if "#" in taps[k - 1]:
            return _fewer_calls(model, taps, k)
        container, _, last = taps[k - 1].rpartition(".")
        if not last.isdigit() or not all(t.rpartition(".")[0] == container for t in taps[:k]):
            return None
        layers = model.get_submodule(container)
        if not isinstance(layers, (nn.ModuleList, nn.Sequential)):
            return None
        kept = list(layers)[: int(last) + 1]
        parent, _, attr = container.rpartition(".")
        cut = nn.ModuleList(kept) if isinstance(layers, nn.ModuleList) else nn.Sequential(*kept)
        setattr(model.get_submodule(parent) if parent else model, attr, cut)
        for key in LAYER_COUNTS:
            if isinstance(getattr(model.config, key, None), int):
                setattr(model.config, key, int(last) + 1)
        return model

    def default_pool(self, model):
        declared = getattr(model, "laya_declared_pool", None)
        if declared is not None and is_text(model):
            return declared[0]
        if is_text(model):
            return "last" if causal(model) else "cls"
        return "cls" if _prefix_tokens(model) else "mean"

    def weights_source(self, model_name, spec, model):
        if not spec.pretrained:
            return "random initialisation"
        folder = local_dir(model_name)
        return f"hf pretrained {folder.resolve() if folder else model_name}"


def _configs(config) -> list:
    """A config and its sub-configs (a multimodal model's text config holds ``use_cache``: Qwen3.5's)."""
    subs = [getattr(config, k, None) for k in (getattr(config, "sub_configs", None) or {})]
    return [config, *(c for sub in subs if sub is not None and sub is not config for c in _configs(sub))]


LAYER_COUNTS = (
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "encoder_layers",
)  # how configs name their number of layers


def _fewer_calls(model: nn.Module, taps, k: int) -> nn.Module | None:
    """A model whose shared layer runs k times: its config's layer count set to k, where the taps up to k are the
    first k calls of one module (``TappedBackbone.truncated`` then checks the taps are unchanged)."""
    calls = [split_call(t) for t in taps[:k]]
    if len({m for m, _ in calls}) != 1 or [c for _, c in calls] != list(range(k)):
        return None
    for key in LAYER_COUNTS:
        if isinstance(getattr(model.config, key, None), int):
            setattr(model.config, key, k)
            return model
    return None
