"""Every model type transformers ships, through laya's whole pipeline: ``python -m benchmarks.zoo --sweep --source hf
--all [--only a,b] [--json FILE] [--markdown FILE] [--timeout S]``.

The types are ``AutoModel``'s (``MODEL_MAPPING_NAMES``). Each is built from its own default config, shrunk
generically (``shrink``: layers, widths, heads, feed-forward sizes, experts, vocabulary, image size; sub-configs
too) with ``AutoModel.from_config``, saved with ``save_pretrained`` and run as a user would:
``laya train --backbone hf:DIR`` on a few synthetic samples (token texts or drawn images) for one epoch, then
``laya audit --scope both`` (default settings, IG refinement included), ``laya export`` and
``laya depth --truncate``. Each model runs in a forked child with a timeout, so a hang or a crash is one row.

A row is **pass** (every step exit 0), **refused** (a step exits 2 with a one-line reason), **crash** (exit 3, a
timeout, a dead child), **not built** (a type that takes tokens or images of which the sweep could not make a small
model that runs: its shrink breaks the config or leaves it over ``MAX_PARAMS``, or transformers cannot build the
default config offline — the sweep's failure, counted in scope) or **out of scope**: a type whose model takes
neither ``input_ids`` nor ``pixel_values`` (audio, time series, multimodal inputs without a text or vision tower
laya reduces to). Failures are grouped by reason.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import random
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_PARAMS = 30_000_000  # a shrunk model the sweep runs on CPU in seconds; above it the row says the shrink fell short
NO_SIZE = 64  # the image side of a model whose config names none (a CNN: any side)
LAYERS, HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB, IMAGE, PATCH = 3, 32, 2, 16, 64, 512, 32, 8
INT_RULES = {  # config attribute -> a small value (only ints are touched)
    **dict.fromkeys(
        (
            "num_hidden_layers",
            "num_layers",
            "n_layer",
            "n_layers",
            "num_encoder_layers",
            "num_decoder_layers",
            "encoder_layers",
            "decoder_layers",
            "num_text_layers",
            "num_vision_layers",
        ),
        LAYERS,
    ),
    **dict.fromkeys(
        (
            "hidden_size",
            "d_model",
            "n_embd",
            "dim",
            "embed_dim",
            "emb_dim",
            "embedding_size",
            "word_embed_proj_dim",
            "out_hidden_size",  # a vision tower's output: the text model's width
            "text_hidden_size",
            "hidden_size_global",  # BLT's local encoder and decoder: the width of its global transformer
        ),
        HIDDEN,
    ),
    **dict.fromkeys(
        ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads"),
        HEADS,
    ),
    **dict.fromkeys(("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"), HEADS),
    **dict.fromkeys(("mamba_n_heads", "mamba_num_heads"), HEADS),
    "mamba_head_dim": HEAD_DIM,  # Nemotron-H's (its mixer as wide as heads × head size, whatever the model's width)
    # linear attention (Qwen3-Next's gated delta net, Kimi's delta attention): its heads and head sizes too
    **dict.fromkeys(("linear_num_heads", "linear_num_key_heads", "linear_num_value_heads"), HEADS),
    **dict.fromkeys(("linear_head_dim", "linear_key_head_dim", "linear_value_head_dim"), HEAD_DIM),
    **dict.fromkeys(("rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim"), 8),
    **dict.fromkeys(("v_head_dim", "kv_lora_rank", "q_lora_rank"), HEAD_DIM),
    **dict.fromkeys(("vocab_size_per_layer_input", "entity_vocab_size", "encoder_hash_byte_group_vocab"), VOCAB),
    **dict.fromkeys(("hidden_size_per_layer_input",), 16),
    **dict.fromkeys(("head_dim", "kv_channels", "d_kv", "attention_head_dim"), HEAD_DIM),
    **dict.fromkeys(
        (
            "intermediate_size",
            "ffn_dim",
            "d_ff",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "n_inner",
            "ffn_hidden_size",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_intermediate_size",
            "expert_ffn_hidden_size",
            "moe_hidden_size",
            "projector_hidden_size",
        ),
        FFN,
    ),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "num_experts_per_token", "moe_k", "num_selected_experts", "moe_topk"), 2),
    **dict.fromkeys(("n_group", "num_expert_group", "topk_group"), 1),  # expert groups: 4 experts make one
    "zero_expert_num": 4,  # LongCat-Flash's identity experts, as many as the others
    "base_channels": 32,  # a VQ image tokenizer's first convolution (Emu3's, Chameleon's): GroupNorm's 32 groups
    "num_res_blocks": 1,
    "num_embeddings": VOCAB,  # a VQ codebook (Janus's, GLM-Image's): its image-token head is this × the width below
    "image_token_embed_dim": HIDDEN,
    # Gemma 3n's last layers reuse the caches of earlier ones, each kind of layer producing one before: three layers
    # of two kinds cannot share one
    "num_kv_shared_layers": 0,
    "num_queries": 16,  # a detector's object queries: fewer than a small image's anchors (RT-DETR picks the top k)
    "image_size": IMAGE,
}
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
PER_TOKEN = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts")  # unset with experts: 2 of them
# unset (None) in a default config whose model reads a number: experts a mixture-of-experts layer builds regardless
# (Dots1, DiffusionGemma), left out where None means a dense model (Gemma 4's) unless the config builds no other way
UNSET_EXPERTS = {
    **dict.fromkeys(EXPERTS, 4),
    **dict.fromkeys(PER_TOKEN, 2),
    "moe_intermediate_size": FFN,
    "n_shared_experts": 1,
}
# how far a config is shrunk, tried in turn until its model runs: all of it; all of it with its per-layer lists cut
# (a kind of layer the default config cannot build left out: Qwen4-Exp's indexed attention); all of it with unset
# expert counts set (``UNSET_EXPERTS``) and sizes tied to a width it changed following it (``_follow_widths``);
# layers only; none
SHRINKS = ("full", "full, cut", "full, filled", "layers", "none")
FLOAT_RULES = {  # EfficientNet-style scaling coefficients; ViT-MAE's random masking off (a feature extractor's use)
    "width_coefficient": 0.25,
    "depth_coefficient": 0.25,
    "width_multiplier": 0.25,
    "mask_ratio": 0.0,
}
DERIVED = {"num_layers", "hidden_size", "num_hidden_layers"}  # what a staged config computes from its stages
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")  # a config's own layer count
WIDTH_LISTS = (
    "hidden_sizes",
    "embed_dims",
    "dims",
    "channels",
    "hidden_dims",
    "neck_hidden_sizes",
    "embed_dim_per_stage",
    "backbone_channel_list",
    "embed_dim",  # a list in a staged config (Florence-2's DaViT)
)
TIMM_VIT = {"embed_dim": HIDDEN, "depth": LAYERS, "num_heads": HEADS}  # a timm ViT's own arguments
TIMM_FASTVIT = {"layers": [1] * 5, "embed_dims": [16, 16, 32, 32, 32], "cls_ratio": 1.0}
SEAMLESS = {
    **dict.fromkeys(("speech_encoder_layers", "t2u_encoder_layers", "t2u_decoder_layers"), LAYERS),
    **dict.fromkeys(
        ("speech_encoder_attention_heads", "t2u_encoder_attention_heads", "t2u_decoder_attention_heads"), HEADS
    ),
    **dict.fromkeys(("speech_encoder_intermediate_size", "t2u_encoder_ffn_dim", "t2u_decoder_ffn_dim"), FFN),
    **dict.fromkeys(("unit_embed_dim", "upsample_initial_channel"), HIDDEN),
    "unit_hifi_gan_vocab_size": VOCAB,
}
# (sub-)config model type -> values set after its shrink, where the default config cannot build a model and no
# generic rule says what it lacks (sizes and lists those of the shrunk config: LAYERS layers, HIDDEN wide)
OVERRIDES = {
    "esm": {"pad_token_id": 1},  # no tokenizer in the default config: positions count from the padding id (ESM-2's)
    # per-layer kinds unset, the model indexes them: LFM2's short convolutions around attention, DeepSeek's
    # first layer dense and the others mixtures of experts
    "lfm2_moe": {"layer_types": ["conv", "full_attention", "conv"]},
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse", "sparse"]},
    # rotary parameters keyed by layer kind, the default config's empty (its model's sections: of a 16-wide head)
    "cohere_compass_text": {
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2]}}
    },
    # its sliding-window layers' head: their nope and rotary parts (8 + 8 in the shrunk config)
    "dots3_note_text": {"head_dim": HEAD_DIM},
    # its image and audio tokens' ranges (codebooks of 131072 and 4096 from fixed offsets) fill the vocabulary
    "apertus1p5": {"text_config": {"vocab_size": 266752}},
    "bridgetower_vision_model": {"hidden_size": 64},  # its heads: hidden_size // 64
    "fun_asr_nano": {"adaptor_config": {"intermediate_size": HIDDEN // 4}},  # validated: the text width // 4
    # vision layers whose features go to which text layers: unset in the default config, its model counts them; its
    # Q-Former's heads: the vision width // 64
    "granite4_vision": {
        "deepstack_layer_map": [[-1, 0]],
        "downsample_rate": "1/2",
        "spatial_target_layers": [0, 1, 2, 2],
        "vision_config": {"hidden_size": 64},
    },
    # CLVP's rotary width is projection_dim // (2 · heads), at least 32, of each head: its encoders' projection is
    # their width (768 both by default), so one 32-wide head
    "clvp_encoder": {"projection_dim": HIDDEN, "num_attention_heads": 1},
    # its shared transformer block is tied across its hybrid layers: two of them at least
    "zamba": {"layers_block_type": ["hybrid", "linear_attention", "hybrid"]},
    # Mimi codec's depthwise upsampling (one group per channel) and the depth decoder's input: the shrunk widths
    "csm": {"codec_config": {"upsample_groups": HIDDEN}, "depth_decoder_config": {"backbone_hidden_size": HIDDEN}},
    # the audio padding token: the last of the embedding table after the text and 32 codebooks of 2049
    "kyutai_speech_to_text": {"audio_pad_token_id": VOCAB + 32 * 2049},
    "mobilevitv2": {"image_size": 64},  # 32× downsampled, then unfolded into 2 × 2 patches: 32 px leave none
    # no image size in its config (the sweep's default: 64 px): its extra 32× feature level needs 2 × 2 at least
    "deformable_detr": {"image_size": 128},
    "pp_ocrv5_mobile_rec": {"image_size": 96},  # its head pools 3 rows of the 32× downsampled image
    # the patch encoder's hidden states DepthPro's fusion reads (of its 24 layers by default): within the 3 left
    "depth_pro": {"intermediate_hook_ids": [2, 1]},
    # LW-DETR's default config projects no feature level (no scale factors: nothing reaches its encoder; a
    # checkpoint's config names them), and its windows must tile the 32-pixel image's 4 × 4 patches
    "lw_detr": {"projector_scale_factors": [1.0]},
    "lw_detr_vit": {"num_windows": 4},
    # EdgeTAM's default config misspells its timm backbone ("archirecture": repvit_m1), so a ResNet-50 is built
    # whose widths its neck does not take: RepViT-M1, the neck sized by its four stages
    "edgetam_vision_model": {
        "backbone_config": {"architecture": "repvit_m1"},
        "backbone_channel_list": [384, 192, 96, 48],
    },
    # UVDoc's bridge concatenates all six stages' maps; its backbone's default config outputs the last alone
    "uvdoc_backbone": {"out_features": [f"stage{i}" for i in range(1, 7)], "out_indices": list(range(1, 7))},
    # its to_dict() lists attention and MLP blocks apart (two entries a layer): three layers, one per stage
    "dory": {
        "num_hidden_layers": 2 * LAYERS,
        **dict.fromkeys(("n_input_layers", "n_recurrent_layers", "n_output_layers"), 2),
        "layer_types": ["sliding_attention", "mlp", "full_attention", "mlp", "sliding_attention", "mlp"],
    },
    # timm towers: the arguments of a small MobileNet-V5 or FastViT (five stages, one block each, its attention stages
    # one 32-wide head; its features as wide as the config's width, 32); a ViT where the model reads one's width
    # (Perception LM's default config names a ResNet)
    "fast_vlm": {"vision_config": {"model_args": {"inference_mode": True, **TIMM_FASTVIT}}},
    "gemma3n": {"vision_config": {"model_args": {"channel_multiplier": 0.125}}},  # MobileNet-V5 at an eighth
    # the Conformer speech encoder's width and head size (``hidden_dim`` elsewhere: DistilBERT's feed-forward size)
    **dict.fromkeys(
        ("granite_speech_encoder", "granite_speech_plus_encoder"), {"hidden_dim": HIDDEN, "dim_head": HEAD_DIM}
    ),
    # SeamlessM4T's speech encoder, text-to-unit model and vocoder, sized by keys of their own
    **dict.fromkeys(("seamless_m4t", "seamless_m4t_v2"), SEAMLESS),
    # VibeVoice's audio tokenizers: channels doubling over seven stages from this many
    **dict.fromkeys((f"vibevoice_acoustic_tokenizer{s}" for s in ("", "_encoder", "_decoder")), {"num_filters": 4}),
    # attributes a sub-config lacks that its model reads (a composite config sets them; alone, it does not)
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},  # its model clamps by clip_qkv, None or not
    "t5gemma2_encoder": {"text_config": {"dropout_rate": 0.0}},
    # the thinker's multimodal rotary index reads it, its config class does not set it (the talker's does; a released
    # checkpoint's thinker config names it): the same id
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"), {"vision_start_token_id": 151652}),
    # the language whose adapters run: a model saved without one cannot run (transformers asks for
    # set_default_language); a user's checkpoint names the language of their texts in config.json
    "xmod": {"default_language": "en_XX"},
    # its model builds a sliding-window mask whatever its layers' kinds, the default config sets no window (a released
    # checkpoint does): 8, shorter than the sweep's texts
    "step3p7": {"text_config": {"sliding_window": 8}},
    # its sliding-window layers have twice its key/value heads: 1, so that they have no more than its 2 heads
    "mimo_v2_flash": {"num_key_value_heads": 1},
    # its rotary sections, a default of its code ([22, 22, 20]), stack height and width frequencies: equal ones (the
    # generic thirds of an 8-wide rotary half are 4, 2, 2)
    "ernie4_5_vl_moe_text": {
        "rope_parameters": {"rope_theta": 5e5, "rope_type": "default", "mrope_section": [3, 3, 2]}
    },
    "perception_lm": {"vision_config": {"architecture": "vit_pe_core_large_patch14_336", "model_args": TIMM_VIT}},
}
WIDTHS = tuple(k for k, v in INT_RULES.items() if v == HIDDEN)  # a model's width, under its names
NOT_TIED = ("vocab", "max_", "image", "patch", "position")  # sizes of other things that may equal a width
LAYOUT_HIDDEN = 48  # a layout model's width: six box embeddings of 8 (LayoutLMv3, LiLT)
LIST_RULES = {"depths": 1, "num_heads": HEADS, "encoder_depths": 1, "decoder_depths": 1}  # per-stage lists


@dataclass
class Row:
    model_type: str
    status: str = ""  # pass | refused | crash | not built | out of scope
    stage: str = ""  # build | train | audit | export | depth
    reason: str = ""
    kind: str = ""  # text | vision
    shrink: str = ""  # how far the config was shrunk: SHRINKS
    seconds: float = 0.0
    steps: dict = field(default_factory=dict)  # step -> exit code


class OutOfScope(Exception):
    pass


class NeedsMore(Exception):
    """A model that takes tokens or images but whose forward requires more (``grid_thw``, task inputs): in scope,
    refused by laya in one line (``laya train`` says the same), the row's stage ``build``."""


class NotBuilt(Exception):
    """A type that takes tokens or images of which the sweep could not make a small model that runs (its generic
    shrink breaks the config or leaves it over ``MAX_PARAMS``; transformers cannot build its default config
    offline): the sweep's failure, not laya's refusal, and counted in scope."""

    def __init__(self, reason: str, kind: str = ""):
        super().__init__(reason)
        self.kind = kind


# --------------------------------------------------------------------------- configs


def _special_ids(d: dict) -> list[int]:
    ids = []
    for key, value in d.items():
        if re.search(r"_(token_id|token_index|id)$", key) and isinstance(value, int) and value >= 0:
            ids.append(value)
        elif key.endswith("_token_id") and isinstance(value, list):
            ids += [v for v in value if isinstance(v, int)]
    return ids


def _ints(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, int) for v in value)


def shrink_dict(d: dict, full: bool = True, kinds: bool = True, experts: bool = False) -> dict:
    """A config's ``to_dict()`` made small in place (sub-configs too): fewer layers and a smaller image always; with
    ``full``, narrower too (widths, heads, feed-forward, experts, per-stage lists, vocabulary — never below the
    special token ids); sizes a default config leaves unset set (``_fill_unset``)."""
    widths: dict[int, int] = {}  # a sub-config's stage widths, old -> new: the same widths named above it follow
    vision_layers = _layers(d.get("vision_config"))
    for value in d.values():
        if isinstance(value, dict) and "model_type" in value:
            before = {k: value.get(k) for k in WIDTH_LISTS if _ints(value.get(k))}
            shrink_dict(value, full, kinds, experts)
            widths.update(p for k, v in before.items() if _ints(value.get(k)) for p in zip(v, value[k]))
    _fill_unset(d, experts)
    _shrink_feature_layers(d, vision_layers)
    staged = isinstance(d.get("depths"), (list, tuple))  # Swin-like: layers and width follow from the stages
    old = dict(d)
    for key in (*WIDTH_LISTS, "encoder_in_channels"):  # SAM 2's channel list, RT-DETR's: its backbone's widths
        if full and widths and _ints(d.get(key)) and all(v in widths for v in d[key]):
            d[key] = [widths[v] for v in d[key]]
    for key, small in INT_RULES.items():
        value, is_layers = d.get(key), small == LAYERS and "layer" in key
        if staged and key in DERIVED or not (full or is_layers or key in ("image_size", "num_queries")):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > small:
            d[key] = small
    _shrink_layer_lists(d, old, kinds)
    _shrink_block_types(d)
    if full:
        _shrink_widths(d, old)
        _shrink_experts(d)
        _shrink_ssm(d)
        _shrink_rope(d, old)
        if d.get("model_type") == "timm_wrapper" and str(d.get("architecture")).startswith("vit_"):
            d["model_args"] = {**(d.get("model_args") or {}), **TIMM_VIT}  # a timm ViT tower (PE Video's)
    if _ints(d.get("image_size")) and len(d["image_size"]) == 2 and min(d["image_size"]) > 64:
        d["image_size"] = [64, 64]
    _merge(d, OVERRIDES.get(d.get("model_type"), {}))
    return d


def _layers(d) -> int | None:
    """A config's own layer count (None where it names none)."""
    return next((d[k] for k in LAYER_KEYS if isinstance(d.get(k), int)), None) if isinstance(d, dict) else None


def _shrink_feature_layers(d: dict, old_layers: int | None) -> None:
    """The vision layers whose features a multimodal model reads (``vision_feature_layer``, here or in an adapter's
    sub-config), counted from the first and past the shrunk tower's, kept as far from its last (Molmo 2's 24 and 18
    of 25)."""
    layers = _layers(d.get("vision_config"))
    if not isinstance(old_layers, int) or not isinstance(layers, int) or layers == old_layers:
        return
    for c in (d, *(v for v in d.values() if isinstance(v, dict) and "model_type" in v)):
        value = c.get("vision_feature_layer")
        if isinstance(value, int) or _ints(value):
            new = [x if x < layers else max(0, layers - (old_layers - x)) for x in _listed(value)]
            c["vision_feature_layer"] = new[0] if isinstance(value, int) else new


def _listed(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _merge(d: dict, changes: dict) -> None:
    """``changes`` set in ``d``, those of a sub-config in it."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(d.get(key), dict) and "model_type" in d[key]:
            _merge(d[key], value)
        else:
            d[key] = value


def _fill_unset(d: dict, experts: bool) -> None:
    """Sizes a default config leaves unset (None) where its model reads a number (transformers' defaults that do not
    build): the head size its width and heads imply (Hunyuan, Ministral), as many key-value heads as heads
    (Nemotron), a vocabulary (ESM), an empty map of image tokens; with ``experts``, expert counts
    (``UNSET_EXPERTS``)."""
    heads, width = d.get("num_attention_heads"), d.get("hidden_size")
    if "head_dim" in d and d["head_dim"] is None and isinstance(heads, int) and heads and isinstance(width, int):
        d["head_dim"] = width // heads
    if "num_key_value_heads" in d and d["num_key_value_heads"] is None and isinstance(heads, int):
        d["num_key_value_heads"] = heads
    if "vocab_size" in d and d["vocab_size"] is None:
        d["vocab_size"] = max([VOCAB, *(i + 1 for i in _special_ids(d))])
    if "vocabulary_map" in d and d["vocabulary_map"] is None:  # image tokens' names (Chameleon, Emu3): none mapped
        d["vocabulary_map"] = {}
    for key, small in UNSET_EXPERTS.items() if experts else ():
        if key in d and d[key] is None:
            d[key] = small


def _layer_lists(d: dict, layers: int) -> list[str]:
    """The keys of ``d`` that hold one entry per layer (``layer_types``, ``mlp_layer_types``, ``attention_layers``…):
    lists of names or flags as long as the config's layer count."""
    flags = (str, bool, float, type(None))  # names, flags, per-layer rates (Gemma 3n's activation sparsity)
    return [
        k
        for k, v in d.items()
        if isinstance(v, list) and len(v) == layers and v and all(isinstance(x, flags) for x in v)
    ]


def _shrink_layer_lists(d: dict, old: dict, kinds: bool = True) -> None:
    """Per-layer lists (and ``per_layer_config``, keyed by layer) cut to the new layer count, their last layers
    those where each kind of layer the cut would lose first comes (``kinds``): a hybrid model cut to three
    linear-attention layers is another model (and its cache, with no attention layer, cannot say how long its
    sequence is)."""
    key = next((k for k in LAYER_KEYS if isinstance(d.get(k), int) and isinstance(old.get(k), int)), None)
    if key is None or d[key] == old[key]:
        return
    layers, lists = d[key], _layer_lists(old, old[key])
    first = sorted({old[k].index(x) for k in lists for x in old[k]} - set(range(layers))) if kinds else []
    index = list(range(layers - len(first))) + first if len(first) < layers else list(range(layers))
    for k in lists:
        d[k] = [old[k][i] for i in index]
    for k, small in INT_RULES.items():  # per-layer sizes (Gemma 3n's intermediate_size: one per layer)
        if _ints(old.get(k)) and len(old[k]) == old[key]:
            d[k] = [min(old[k][i], small) for i in index]
    for k, v in old.items():  # per-layer 0/1 flags (Mistral 4's no_rope_layers) and layer indices (kv_source_layers)
        if k in INT_RULES or not _ints(v) or len(v) != old[key]:
            continue
        if set(v) <= {0, 1}:
            d[k] = [v[i] for i in index]
        elif all(0 <= x <= i for i, x in enumerate(v)):  # each layer's source: itself or an earlier one, kept
            d[k] = [index.index(v[i]) if v[i] in index else n for n, i in enumerate(index)]
    per_layer = old.get("per_layer_config")
    if isinstance(per_layer, dict) and all(str(k).isdigit() for k in per_layer):
        by_layer = {int(k): v for k, v in per_layer.items()}
        d["per_layer_config"] = {str(n): _small(by_layer[i]) for n, i in enumerate(index) if i in by_layer}


def _shrink_block_types(d: dict) -> None:
    """A config whose layers are its list of block kinds (Nemotron-H's ``layers_block_type``, no layer count): its
    first LAYERS blocks and the first of each kind after them."""
    blocks = d.get("layers_block_type")
    if _layers(d) is not None or not isinstance(blocks, list) or not all(isinstance(b, str) for b in blocks):
        return
    keep = sorted(set(range(min(LAYERS, len(blocks)))) | {blocks.index(b) for b in blocks})
    d["layers_block_type"] = [blocks[i] for i in keep]


def _small(d: dict) -> dict:
    """One layer's own sizes (``per_layer_config``) no larger than ``INT_RULES``'s."""
    return {k: min(v, INT_RULES[k]) if k in INT_RULES and isinstance(v, int) else v for k, v in d.items()}


def _shrink_ssm(d: dict) -> None:
    """Mamba-2's heads: as many as the expanded width holds (``num_heads × head_dim = expand × hidden_size``), in one
    group."""
    if all(isinstance(d.get(k), int) for k in ("num_heads", "head_dim", "expand", "hidden_size", "n_groups")):
        d["num_heads"] = max(1, d["expand"] * d["hidden_size"] // d["head_dim"])
        d["n_groups"] = 1
    if isinstance(d.get("mamba_num_heads"), int) and isinstance(d.get("n_groups"), int):  # Nemotron-H: groups of heads
        d["n_groups"] = 1


def _shrink_experts(d: dict) -> None:
    """Experts per token where a default config with experts leaves it unset (DeepSeek-V2's)."""
    if any(isinstance(d.get(k), int) and d[k] > 0 for k in EXPERTS):
        for k in PER_TOKEN:
            if k in d and d[k] is None:
                d[k] = INT_RULES[k]


def _shrink_rope(d: dict, old: dict) -> None:
    """Rotary sizes that follow the new head size: multimodal sections (``mrope_section``, also where only the
    model's code holds their default) summing to the rotary half; latent attention's rotary head keeping its ratio
    to ``head_dim`` (Mistral 4's partial rotary factor)."""
    rope = d.get("rope_parameters") or d.get("rope_scaling")
    head_dim = _head_dim(d)
    if isinstance(rope, dict) and isinstance(head_dim, int) and (_ints(rope.get("mrope_section")) or _mrope(d)):
        factor = rope.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0
        rotary = d.get("qk_rope_head_dim") if isinstance(d.get("qk_rope_head_dim"), int) else int(head_dim * factor)
        half, k = rotary // 2, len(rope.get("mrope_section") or [0] * 3)  # sections of the rotary half
        rope["mrope_section"] = [half // k + (half % k if i == 0 else 0) for i in range(k)]
    rotary, old_rotary = d.get("qk_rope_head_dim"), old.get("qk_rope_head_dim")
    if isinstance(rotary, int) and "head_dim" in d:  # multi-head latent attention: rotary dims
        ratio = old["head_dim"] / old_rotary if isinstance(old.get("head_dim"), int) and old_rotary else 1
        d["head_dim"] = max(rotary, int(rotary * ratio))
        d["qk_head_dim"] = rotary + d.get("qk_nope_head_dim", 0)


def _head_dim(d: dict) -> int | None:
    head_dim = d.get("head_dim")
    heads = d.get("num_attention_heads")  # a list in a staged config (CLAP's audio Swin): no one head size
    if not isinstance(head_dim, int) and isinstance(d.get("hidden_size"), int) and isinstance(heads, int) and heads:
        head_dim = d["hidden_size"] // d["num_attention_heads"]
    return head_dim


def _mrope(d: dict) -> bool:
    """Whether the config's model reads multimodal rotary sections (its config class says so, or its modeling code
    reads ``mrope_section`` with a default of its own, sized for the full model)."""
    import importlib
    import inspect

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if d.get("model_type") not in CONFIG_MAPPING:  # a lazy mapping: its get() answers None
        return False
    cls = CONFIG_MAPPING[d["model_type"]]
    if "mrope_section" in (getattr(cls, "ignore_keys_at_rope_validation", None) or ()):
        return True
    try:
        module = importlib.import_module(cls.__module__.replace(".configuration_", ".modeling_"))
        return '.get("mrope_section", [' in inspect.getsource(module)
    except (ImportError, OSError, TypeError):
        return False


def _shrink_widths(d: dict, old: dict) -> None:
    for key, small in LIST_RULES.items():
        if _ints(d.get(key)):
            d[key] = [min(v, small) for v in d[key]]
    for key, small in FLOAT_RULES.items():
        if isinstance(d.get(key), float) and d[key] > small:
            d[key] = small
    if isinstance(d.get("hidden_dim"), int) and d.get("width_coefficient") != old.get("width_coefficient"):
        d["hidden_dim"] = int(d["hidden_dim"] * d["width_coefficient"] / old["width_coefficient"])  # its last conv
    width, old_width = d.get("hidden_size"), old.get("hidden_size")
    shared = old_width // width if isinstance(width, int) and isinstance(old_width, int) and width > 0 else 0
    for key in WIDTH_LISTS:  # per-stage widths: scaled so the first is 32 (GroupNorm's 32 groups still divide)
        if _ints(d.get(key)) and shared > 1 and old_width in d[key] and old_width % width == 0:
            d[key] = [v // shared for v in d[key]]  # lists of the model's width (SAM 2's stages): its factor
        elif _ints(d.get(key)) and d[key][0] > 32 and d[key] == old.get(key):
            factor = d[key][0] // 32
            d[key] = [max(8, v // factor) for v in d[key]]
    if isinstance(d.get("max_2d_position_embeddings"), int) and isinstance(width, int):  # layout models' boxes
        d["hidden_size"] = LAYOUT_HIDDEN  # six box embeddings (x0, y0, x1, y1, w, h) share the width
        for key in ("coordinate_size", "shape_size"):
            if isinstance(d.get(key), int):
                d[key] = LAYOUT_HIDDEN // 6
    if isinstance(d.get("patch_size"), int) and d["patch_size"] > PATCH:
        d["patch_size"] = PATCH
    vocab = d.get("vocab_size")
    if isinstance(vocab, int) and vocab > VOCAB:
        d["vocab_size"] = max([VOCAB, *(i + 1 for i in _special_ids(d) if i < vocab)])


def _changed(old: dict, new: dict) -> dict:
    """What ``new`` changes of ``old``; a changed sub-config whole; the stages a backbone outputs reset (a staged
    config with fewer layers computes them again)."""
    out = {k: v for k, v in new.items() if old.get(k) != v}
    for k, v in out.items():  # a sub-config's backbone stages too (DepthPro's DINOv2 outputs its last stage)
        if isinstance(v, dict) and "model_type" in v and isinstance(old.get(k), dict):
            out[k] = {**v, **_changed(old[k], v)}
    layers = out.get("num_hidden_layers")
    if isinstance(layers, int) and not isinstance(new.get("depths"), list):  # a backbone's stages: one per layer
        if _ints(old.get("out_indices")):
            out["out_indices"] = [min(i, layers) for i in old["out_indices"][-1:]]
        if isinstance(old.get("out_features"), list) and old["out_features"]:
            out["out_features"] = [f"stage{layers}"]
    return out


def shrink(config, full: bool = True, kinds: bool = True, filled: bool = False):
    """A small copy of ``config``: its type built again with the shrunk values (``shrink_dict``) as arguments, so
    what it derives from them (stage names, per-layer lists) follows; with ``filled``, unset expert counts set and
    sizes tied to a width following it."""
    import copy

    import transformers

    old = config.to_dict()
    new = shrink_dict(copy.deepcopy(old), full, kinds, experts=filled)
    if filled:
        _follow_widths(old, new)
    changes = _changed(old, new)
    return transformers.AutoConfig.for_model(config.model_type, **changes)


def _configs(d: dict):
    """``d`` and its sub-configs, depth first."""
    yield d
    for value in d.values():
        if isinstance(value, dict) and "model_type" in value:
            yield from _configs(value)


def _follow_widths(old: dict, new: dict) -> None:
    """Sizes the shrink left as they were that equal a width it changed (anywhere in the config), set to that width's
    new value: an input or output tied to another tower's width and validated so (a codec's ``codebook_dim`` equal to
    its ``hidden_size``, Pocket TTS's flow head's ``condition_dim`` to its backbone's, NeMo's ``audio_hidden_size``)."""
    widths: dict[int, set] = defaultdict(set)
    for o, n in zip(_configs(old), _configs(new)):
        for k in WIDTHS:
            if isinstance(o.get(k), int) and n.get(k) != o[k]:
                widths[o[k]].add(n[k])
    for o, n in zip(_configs(old), _configs(new)):
        for k, v in o.items():
            tied = ("dim" in k or k.endswith(("hidden_size", "input_size"))) and not any(x in k for x in NOT_TIED)
            if tied and k not in INT_RULES and type(v) is int and n.get(k) == v and len(widths.get(v, ())) == 1:
                n[k] = next(iter(widths[v]))


def _shrunk(base, how: str):
    """``base`` shrunk as ``how`` (one of ``SHRINKS``) says."""
    if how == "none":
        return base
    return shrink(base, full=how != "layers", kinds=how != "full, cut", filled=how == "full, filled")


def _input_kind(model) -> str:
    """text | vision: the input of what laya taps (its reduction of the model: the base model, an encoder–decoder's
    encoder, a dual model's vision tower); OutOfScope when that takes neither tokens nor images."""
    from laya_cli.backbones.hf import _base_model, is_text
    from laya_cli.runtime.errors import LayaError

    try:
        tapped = _base_model(model, model.config.model_type)
    except LayaError as e:
        reason = str(e).replace(f"hf:{model.config.model_type} ", "")
        if NEEDS_MORE.match(reason):  # it takes tokens or images, and more: in scope, and laya refuses it
            raise NeedsMore(f"error: {reason}") from None
        raise OutOfScope(reason) from None
    return "text" if is_text(tapped) else "vision"


NEEDS_MORE = re.compile(r"takes (input_ids|pixel_values) and ")  # laya's refusal of a forward needing more


def build_folder(model_type: str, folder: Path) -> tuple[str, str]:
    """Build the smallest config of ``model_type`` that ``AutoModel`` builds, save it to ``folder``: (kind,
    shrink). OutOfScope when the model takes neither tokens nor images; NotBuilt when it takes them but no config
    gives a model the sweep can run (the sweep's failure: counted in scope)."""
    import torch
    import transformers

    try:
        base = transformers.AutoConfig.for_model(model_type)
    except Exception as e:
        raise OutOfScope(f"no config offline: {_line(e)}") from None
    errors, built, kind = [], None, ""
    for how in SHRINKS:
        try:
            config = _shrunk(base, how)
            _name_architecture(transformers, config)
            with torch.device("meta"):  # counted before anything is allocated
                meta = transformers.AutoModel.from_config(config)
            kind = kind or _input_kind(meta)  # OutOfScope: neither tokens nor images
            params = sum(p.numel() for p in meta.parameters())
            if params > MAX_PARAMS:
                errors.append(f"{how}: {params / 1e6:.0f} M parameters (the sweep's limit: {MAX_PARAMS / 1e6:.0f} M)")
                continue
            torch.manual_seed(0)
            model = transformers.AutoModel.from_config(config)
        except (OutOfScope, NeedsMore):
            raise
        except Exception as e:
            errors.append(f"{how}: {_line(e)}")
            continue
        built = built or (model, kind, how)
        if _runs(model, kind) and _reloads(transformers, model, folder):  # a shrink that breaks the model is ours
            return kind, how
    if built is None:
        kind = kind or _class_kind(transformers, base)
        raise NotBuilt(f"no small model of it: {errors[0][:110]}; {errors[-1][:90]}", kind)
    model, kind, how = built
    model.save_pretrained(folder)
    return kind, how


def _name_architecture(transformers, config) -> None:
    """AutoModel picks among a type's classes by ``config.architectures``, which a default config leaves None (and
    iterating None fails: Funnel's): the first of them named, AutoModel's own default."""
    try:
        classes = transformers.AutoModel._model_mapping[type(config)]
    except Exception:  # noqa: BLE001 - a type AutoModel does not map: from_config says so
        return
    if isinstance(classes, (list, tuple)) and classes and config.architectures is None:
        config.architectures = [classes[0].__name__]


def _class_kind(transformers, config) -> str:
    """text | vision from the class ``AutoModel`` maps the config to, where no model of it could be built (its
    default config breaks, a library is missing); OutOfScope when it takes neither; '' when the class is unknown."""
    import inspect

    try:
        cls = transformers.AutoModel._model_mapping[type(config)]
        params = inspect.signature(cls.forward).parameters
    except Exception:  # noqa: BLE001 - no class to read: the kind is unknown, the type counted in scope
        return ""
    name = getattr(cls, "main_input_name", "")
    takes = [n for n in ("input_ids", "pixel_values") if n in (name, *params)]
    if not takes:
        raise OutOfScope(f"takes {name or '?'}: laya taps text and image models")
    return "text" if takes[0] == "input_ids" else "vision"


def _reloads(transformers, model, folder: Path) -> bool:
    """Saved to ``folder``, whether ``AutoModel.from_pretrained`` loads it back (the config round-trips)."""
    try:
        model.save_pretrained(folder)
        transformers.AutoModel.from_pretrained(folder)
        return True
    except Exception:
        return False


def _runs(model, kind: str) -> bool:
    """Whether what laya taps runs on laya's own probe batch (a shrink that breaks the model is the sweep's)."""
    from laya_cli.backbones.hf import _probe_inputs, _stages_without_states, probe_call, tapped_model

    try:
        tapped = tapped_model(model, model.config.model_type).eval()
    except Exception:
        return False
    try:
        probe_call(tapped, {**_probe_inputs(tapped), "output_hidden_states": True})
        return True
    except Exception:  # no hidden states: a timm backbone's declared stages, as laya taps them (EdgeTAM)
        return bool(_stages_without_states(tapped))


def _line(e: BaseException | None) -> str:
    """An exception's type and first line (two where the first only introduces the second: a validator's name)."""
    text = [t.strip() for t in str(e).strip().splitlines()] if e is not None else []
    first = " ".join(text[:2]) if len(text) > 1 and text[0].endswith(":") else (text[0] if text else "")
    return f"{type(e).__name__}: {first[:200]}"


# --------------------------------------------------------------------------- data and the pipeline

WORDS = {
    "sport": "ball goal team match score player".split(),
    "food": "bread cheese apple soup rice pasta".split(),
    "tech": "computer code network chip data server".split(),
}


def write_texts(root: Path, train: int = 24, test: int = 12) -> Path:
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("test", test)):
        with open(root / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            for i in range(n):
                topic = list(WORDS)[i % 3]
                w.writerow([" ".join(rng.choices(WORDS[topic], k=5) + ["the", "a"]), topic])
    return root


def _image_side(folder: Path) -> tuple[int, bool]:
    """The side the sweep's images are drawn at, and whether ``--input-size`` may say it: a config's H × W image
    size that is not square (MGP-STR's) is laya's own default, drawn at its longer side."""
    from laya_cli.backbones.hf import image_hw

    config = json.loads((folder / "config.json").read_text())
    for c in (config, config.get("vision_config") or {}):
        hw = image_hw({"image_size": c.get("image_size")})
        if hw:
            return max(hw), hw[0] == hw[1]
    return NO_SIZE, True


def pipeline_steps(folder: Path, kind: str, data: Path, work: Path) -> list[tuple[str, list[str]]]:
    ckpt, small = work / "m.pt", work / "small.pt"
    if kind == "text":
        dataset = ["--dataset", f"csv:{data / 'text'}", "--max-length", "16"]
    else:
        side, square = _image_side(folder)
        images = data / f"images{side}"
        if not images.exists():
            from benchmarks.synthetic import make_image_folder

            make_image_folder(images, per_class=6, size=side)
        dataset = ["--dataset", f"folder:{images}", *(["--input-size", str(side)] if square else [])]
    common = ["--device", "cpu", "-q"]
    return [
        (
            "train",
            ["train", "--backbone", f"hf:{folder}", *dataset, "--epochs", "1", "--batch-size", "8"]
            + ["--out", str(ckpt), *common],
        ),
        ("audit", ["audit", str(ckpt), "--scope", "both", *common]),
        ("export", ["export", str(ckpt), "--out", str(work / "export"), "--no-plots", "--overwrite", *common]),
        ("depth", ["depth", str(ckpt), "--truncate", "2", "--out", str(small), "--device", "cpu"]),
    ]


def _reason(output: str, code: int) -> str:
    """The one line a step said: a refusal's message; a crash's exception line (before laya's 'internal error')."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    if code == 3:
        tb = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*", ln)]
        return tb[-1][:200] if tb else (lines[-1][:200] if lines else "")
    errs = [ln for ln in lines if ln.lower().startswith(("error", "usage error"))]
    return (errs[-1] if errs else (lines[-1] if lines else ""))[:200]


def run_model(model_type: str, data: Path, work: Path) -> Row:
    """One type end to end, in this process (``sweep_all`` forks one per type)."""
    from typer.testing import CliRunner

    from laya_cli.cli.group import app

    row, start = Row(model_type), time.perf_counter()
    try:
        row.kind, row.shrink = build_folder(model_type, work / "model")
    except OutOfScope as e:
        row.status, row.stage, row.reason = "out of scope", "build", str(e)
        return row
    except NotBuilt as e:
        row.status, row.stage, row.reason, row.kind = "not built", "build", str(e), e.kind
        return row
    except NeedsMore as e:
        row.status, row.stage, row.reason = "refused", "build", str(e)
        return row
    os.environ["LAYA_CACHE_DIR"] = str(work / "cache")
    for stage, args in pipeline_steps(work / "model", row.kind, data, work):
        if stage == "depth":  # --truncate 2, or 1 for a model of one tap (RT-DETR's encoder)
            args[args.index("--truncate") + 1] = str(min(2, _taps(work / "m.pt")))
        res = CliRunner().invoke(app, args)
        row.steps[stage] = res.exit_code
        if res.exit_code != 0:
            row.stage, row.reason = stage, _reason(res.output, res.exit_code)
            row.status = "refused" if res.exit_code == 2 else "crash"
            break
    else:
        row.status = "pass"
    row.seconds = time.perf_counter() - start
    return row


def _taps(ckpt: Path) -> int:
    import torch

    return len(torch.load(ckpt, weights_only=True)["backbone"]["formats"])


def _child(model_type: str, data: Path, work: Path, out: Path) -> None:
    import warnings

    import transformers

    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        row = run_model(model_type, data, work)
    except BaseException as e:  # noqa: BLE001 - the sweep's own failure is a row too
        row = Row(model_type, "crash", "sweep", _line(e))
    out.write_text(json.dumps(asdict(row)))


def run_isolated(model_type: str, data: Path, timeout: float) -> Row:
    """``run_model`` in a forked child: a hang past ``timeout`` or a dead child is a crash row."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"laya-hf-{model_type[:20]}-") as tmp:
        work, out = Path(tmp), Path(tmp) / "row.json"
        proc = multiprocessing.get_context("fork").Process(target=_child, args=(model_type, data, work, out))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            row = Row(model_type, "crash", "timeout", f"no result within {timeout:.0f} s")
        elif out.is_file():
            row = Row(**json.loads(out.read_text()))
        else:
            row = Row(model_type, "crash", "child", f"the child died (exit {proc.exitcode})")
    row.seconds = time.perf_counter() - start
    return row


# --------------------------------------------------------------------------- the sweep


def model_types(only=()) -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    types = sorted(MODEL_MAPPING_NAMES)
    return [t for t in types if t in only] if only else types


def warm_up() -> None:
    """Import once, before the forks, what every child would import again: transformers' modeling machinery (a
    first model costs seconds, the next ones a tenth of one) and laya's jobs."""
    import importlib

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    transformers.AutoModel.from_config(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16))
    for name in ("cli.group", "training", "auditing", "exporting", "depthing", "report"):
        importlib.import_module(f"laya_cli.{name}")


def sweep_all(
    only=(), timeout: float = 120.0, say=print, json_file: str | None = None, rerun: str | None = None
) -> list[Row]:
    """Every type (or ``only`` those), one forked child each; with ``rerun``, the rows of that earlier ``--json``
    that passed are kept as they are and only the others run again."""
    warm_up()

    types = model_types(only)
    kept = {r["model_type"]: Row(**r) for r in json.loads(Path(rerun).read_text())} if rerun else {}
    kept = {t: r for t, r in kept.items() if r.status == "pass" and t in types}
    say(f"transformers model types: {len(types)}, {len(types) - len(kept)} to run ({len(kept)} passed in {rerun})")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="laya-hf-data-") as tmp:
        data = Path(tmp)
        write_texts(data / "text")
        for i, t in enumerate(types, 1):
            row = kept.get(t) or run_isolated(t, data, timeout)
            rows.append(row)
            what = row.status + (f" at {row.stage}: {row.reason[:110]}" if row.status != "pass" else "")
            say(f"  [{i}/{len(types)}] {t:36s} {row.kind:6s} {row.seconds:6.1f}s  {what}")
            if json_file:
                Path(json_file).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return rows


def _generic(reason: str) -> str:
    """A reason without the names of models, paths and numbers that make every row's text differ."""
    reason = re.sub(r"hf:\S+", "hf:DIR", reason)
    reason = re.sub(r"/tmp/\S+", "PATH", reason)
    return re.sub(r"\d+", "N", reason)[:140]


def summary(rows: list[Row]) -> list[str]:
    in_scope = [r for r in rows if r.status != "out of scope"]
    n_pass = sum(r.status == "pass" for r in in_scope)
    by = defaultdict(int)
    for r in rows:
        by[r.status] += 1
    pct = 100 * n_pass / len(in_scope) if in_scope else 0.0
    goal = "met" if pct >= 90 else "target missed"
    lines = [
        f"{n_pass} of {len(in_scope)} in-scope transformers model types pass train → audit --scope both → export → "
        f"depth --truncate ({pct:.1f} %; goal ≥ 90 %: {goal}); refused (exit 2): {by['refused']}; "
        f"crash: {by['crash']}; "
        f"not built (no small model of it the sweep could run): {by['not built']}; "
        f"out of scope: {by['out of scope']} (of {len(rows)} types)"
    ]
    for status in ("crash", "not built", "refused", "out of scope"):
        groups = defaultdict(list)
        for r in rows:
            if r.status == status:
                groups[(r.stage, _generic(r.reason))].append(r.model_type)
        if groups:
            lines.append(f"{status}:")
        for (stage, reason), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(
                f"  {len(names):3d} at {stage}: {reason}  [{', '.join(names[:12])}{' …' if len(names) > 12 else ''}]"
            )
    return lines


def markdown(rows: list[Row], seconds: float) -> str:
    head = "| model type | input | result | stage | reason | seconds |\n|---|---|---|---|---|---|\n"
    body = "\n".join(
        f"| `{r.model_type}` | {r.kind or '—'} | {r.status} | {r.stage if r.status != 'pass' else ''} | "
        f"{r.reason.replace('|', '/')[:140]} | {r.seconds:.1f} |"
        for r in rows
    )
    tail = "\n".join(f"- {ln.strip()}" for ln in summary(rows))
    return f"{head}{body}\n\n{tail}\n\nThe whole sweep: {seconds / 60:.1f} min.\n"
