"""Backbones: a model plus the layers we tap and how each tap is pooled to a vector.

Every backbone family answers the same small interface (``families.Family``). Modules: ``spec`` (what is
stored), ``builtin`` (mlp, cnn), ``families`` (the registry), ``taps`` (running up to and continuing from a
tap), ``pooling`` (tap formats), ``weights`` (files, hashes, hub caches), ``usercode`` (``--arch``),
``program`` (``.pt2``), ``hf`` (Hugging Face transformers), ``build`` (building, tapping and restoring a
backbone). This file only re-exports.
"""

from .adapters import InputAdapter, TokenAdapter
from .build import (
    BUILTIN_FINETUNE,
    backbone_from_checkpoint,
    backbone_name,
    build_backbone,
    build_model,
    check_sha256,
    checkpoint_extras,
    checkpoint_weights,
    default_pretrained,
    input_side,
    is_builtin,
    preflight,
    reshaped_backbone,
    resolve_layers,
    tap_model,
)
from .builtin import PaperMLP, SmallCNN
from .families import BACKBONES, BUILTIN, FAMILIES, Family, TorchvisionFamily, family_for_model, family_of
from .pooling import Layouts, TapFormat, pool_tokens
from .spec import IMAGENET_MEAN, IMAGENET_STD, USER_BACKBONE, BackboneSpec, InputConfig, TextInput
from .taps import TappedBackbone, match_layers
from .usercode import normalize_ref, trust_code
from .weights import CLASSIFIER_KEYS, file_sha256, load_state, read_weights_file, state_fingerprint, weights_sha256

__all__ = [
    "USER_BACKBONE",
    "BACKBONES",
    "BUILTIN",
    "BUILTIN_FINETUNE",
    "BackboneSpec",
    "CLASSIFIER_KEYS",
    "FAMILIES",
    "Family",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "InputAdapter",
    "InputConfig",
    "Layouts",
    "PaperMLP",
    "SmallCNN",
    "TapFormat",
    "TappedBackbone",
    "TextInput",
    "TokenAdapter",
    "TorchvisionFamily",
    "backbone_from_checkpoint",
    "backbone_name",
    "build_backbone",
    "build_model",
    "check_sha256",
    "checkpoint_extras",
    "checkpoint_weights",
    "reshaped_backbone",
    "default_pretrained",
    "family_for_model",
    "family_of",
    "file_sha256",
    "input_side",
    "is_builtin",
    "load_state",
    "match_layers",
    "normalize_ref",
    "pool_tokens",
    "preflight",
    "read_weights_file",
    "resolve_layers",
    "state_fingerprint",
    "tap_model",
    "trust_code",
    "weights_sha256",
]
