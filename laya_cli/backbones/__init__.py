"""Backbones: a model plus the layers we tap and how each tap is pooled to a vector.

Every backbone family answers the same small interface (``family.Family``). Modules: ``spec`` (what is
stored), ``builtin`` (mlp, cnn), ``registry`` (the families), ``taps`` (running up to and continuing from a
tap), ``engines`` and ``chain`` (how), ``bypass`` (a dropped block), ``pooling`` (tap formats), ``weights``
(files, hashes, hub caches), ``usercode`` (``--arch``), ``program`` (``.pt2``), ``hf`` (Hugging Face
transformers), ``tokenizers`` (their text input), ``lm`` (a causal language model and its readout, ``--task lm``),
``build`` (building, tapping and restoring a backbone). This file only re-exports, lazily (as the package root
does): the settings that name backbone choices (``spec``) import without torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "InputAdapter": "adapters",
    "TokenAdapter": "adapters",
    "BUILTIN_FINETUNE": "build",
    "frozen_random_warning": "build",
    "frozen_random": "build",
    "RANDOM_START": "build",
    "upscale_warning": "build",
    "fitting_side": "build",
    "start_line": "build",
    "backbone_from_checkpoint": "build",
    "backbone_name": "build",
    "build_backbone": "build",
    "build_model": "build",
    "check_sha256": "build",
    "checkpoint_extras": "build",
    "checkpoint_weights": "build",
    "default_pretrained": "build",
    "input_side": "build",
    "is_builtin": "build",
    "preflight": "build",
    "reshaped_backbone": "build",
    "resolve_layers": "build",
    "tap_model": "build",
    "PaperMLP": "builtin",
    "SmallCNN": "builtin",
    "BACKBONES": "registry",
    "BUILTIN": "registry",
    "FAMILIES": "registry",
    "Family": "registry",
    "TorchvisionFamily": "registry",
    "family_for_model": "registry",
    "family_of": "registry",
    "Layouts": "pooling",
    "TapFormat": "pooling",
    "pool_tokens": "pooling",
    "IMAGENET_MEAN": "spec",
    "IMAGENET_STD": "spec",
    "USER_BACKBONE": "spec",
    "BackboneSpec": "spec",
    "InputConfig": "spec",
    "TextInput": "spec",
    "TappedBackbone": "taps",
    "match_layers": "taps",
    "normalize_ref": "usercode",
    "trust_code": "usercode",
    "CLASSIFIER_KEYS": "weights",
    "file_sha256": "weights",
    "load_state": "weights",
    "read_weights_file": "weights",
    "state_fingerprint": "weights",
    "weights_sha256": "weights",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
