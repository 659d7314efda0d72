"""Backbones: a model plus the layers we tap and how each tap is pooled to a vector.

Every backbone family answers the same small interface (``families.Family``). Modules: ``spec`` (what is
stored), ``builtin`` (mlp, cnn), ``families`` (the registry), ``taps`` (running up to and continuing from a
tap), ``pooling`` (tap formats), ``weights`` (files, hashes, hub caches), ``usercode`` (``--arch``),
``program`` (``.pt2``), ``build`` (building, tapping and restoring a backbone). This file only re-exports.
"""

from .spec import BackboneSpec, IMAGENET_MEAN, IMAGENET_STD, InputConfig
from .builtin import PaperMLP, SmallCNN
from .families import BACKBONES, BUILTIN, FAMILIES, Family, family_for_model, family_of, TorchvisionFamily
from .taps import InputAdapter, match_layers, TappedBackbone
from .pooling import Layouts, pool_tokens, TapFormat
from .weights import CLASSIFIER_KEYS, file_sha256, load_state, read_weights_file, state_fingerprint, weights_sha256
from .usercode import normalize_ref, trust_code
from .build import backbone_from_checkpoint, backbone_name, build_backbone, build_model, BUILTIN_FINETUNE, check_sha256, checkpoint_extras, checkpoint_weights, cut_backbone, default_pretrained, input_side, is_builtin, preflight, resolve_layers, tap_model

__all__ = [
    "BACKBONES", "BUILTIN", "BUILTIN_FINETUNE", "BackboneSpec", "CLASSIFIER_KEYS", "FAMILIES", "Family",
    "IMAGENET_MEAN", "IMAGENET_STD", "InputAdapter", "InputConfig", "Layouts", "PaperMLP", "SmallCNN", "TapFormat",
    "TappedBackbone", "TorchvisionFamily", "backbone_from_checkpoint", "backbone_name", "build_backbone",
    "build_model", "check_sha256", "checkpoint_extras", "checkpoint_weights", "cut_backbone", "default_pretrained",
    "family_for_model", "family_of", "file_sha256", "input_side", "is_builtin", "load_state", "match_layers",
    "normalize_ref", "pool_tokens", "preflight", "read_weights_file", "resolve_layers", "state_fingerprint",
    "tap_model", "trust_code", "weights_sha256",
]
