"""Hugging Face families for the zoo sweep: one small config each, built offline (random weights).

``HF_ZOO`` lists the families the issue names (encoders, decoders, vision transformers); ``check(entry,
root)`` saves the model with ``save_pretrained``, taps it as ``laya train --backbone hf:DIR`` does, and
checks what laya promises for a transformer: one tap per hidden state after the embeddings, widths equal
to the hidden size (ConvNeXt: its stages), the pool its kind implies (decoders: the last real token;
encoders: the first; vision: the class token or the patches' mean), and that the network scope can
continue from a layer (prefix caching). ``benchmarks.zoo --sweep`` runs it beside timm and torchvision;
``tests/test_hf_zoo.py`` runs every entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LAYERS = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
TEXT = dict(vocab_size=500, max_position_embeddings=64)


@dataclass(frozen=True)
class HFModel:
    name: str  # the family, as transformers names its model type
    kind: str  # encoder | decoder | vision
    config: Callable[[], object]  # a small config (called with transformers imported)
    widths: tuple[int, ...] = (32, 32)
    vision_tower: bool = False  # CLIP: the vision tower of a dual model, saved on its own


def _t():
    import transformers

    return transformers


HF_ZOO = [
    HFModel("bert", "encoder", lambda: _t().BertConfig(hidden_size=32, **LAYERS, **TEXT)),
    HFModel(
        "roberta",
        "encoder",
        lambda: _t().RobertaConfig(hidden_size=32, **LAYERS, vocab_size=500, max_position_embeddings=66),
    ),
    HFModel(
        "distilbert", "encoder", lambda: _t().DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **TEXT)
    ),
    HFModel("deberta-v2", "encoder", lambda: _t().DebertaV2Config(hidden_size=32, **LAYERS, **TEXT)),
    HFModel("electra", "encoder", lambda: _t().ElectraConfig(hidden_size=32, embedding_size=32, **LAYERS, **TEXT)),
    HFModel("gpt2", "decoder", lambda: _t().GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=500, n_positions=64)),
    HFModel("gpt-neox", "decoder", lambda: _t().GPTNeoXConfig(hidden_size=32, **LAYERS, **TEXT)),
    HFModel("llama", "decoder", lambda: _t().LlamaConfig(hidden_size=32, num_key_value_heads=1, **LAYERS, **TEXT)),
    HFModel("mistral", "decoder", lambda: _t().MistralConfig(hidden_size=32, num_key_value_heads=1, **LAYERS, **TEXT)),
    HFModel("qwen2", "decoder", lambda: _t().Qwen2Config(hidden_size=32, num_key_value_heads=1, **LAYERS, **TEXT)),
    HFModel("phi", "decoder", lambda: _t().PhiConfig(hidden_size=32, **LAYERS, **TEXT)),
    HFModel("vit", "vision", lambda: _t().ViTConfig(image_size=32, patch_size=8, hidden_size=32, **LAYERS)),
    HFModel("deit", "vision", lambda: _t().DeiTConfig(image_size=32, patch_size=8, hidden_size=32, **LAYERS)),
    HFModel("dinov2", "vision", lambda: _t().Dinov2Config(image_size=32, patch_size=8, hidden_size=32, **LAYERS)),
    HFModel(
        "swin",
        "vision",
        lambda: _t().SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4
        ),
    ),
    HFModel(
        "convnext",
        "vision",
        lambda: _t().ConvNextConfig(image_size=32, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
        widths=(16, 32),
    ),
    HFModel(
        "clip-vision",
        "vision",
        lambda: _t().CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, **LAYERS),
        vision_tower=True,
    ),
]
EXPECTED_POOL = {"encoder": "cls", "decoder": "last"}


@dataclass
class HFResult:
    entry: HFModel
    ok: bool
    taps: list[str]
    widths: list[int]
    formats: list[str]
    pool: str
    prefix_cached: bool
    seconds: float
    error: str = ""


def check(entry: HFModel, root: Path) -> HFResult:
    """Build, save, tap and check one family; never raises (the error is in the result)."""
    import torch

    from laya_cli import backbones as bb
    from laya_cli.backbones import tokenizers

    start = time.perf_counter()
    taps: list[str] = []
    try:
        transformers = _t()
        torch.manual_seed(0)
        config = entry.config()
        model = (
            transformers.CLIPVisionModel(config) if entry.vision_tower else transformers.AutoModel.from_config(config)
        )
        model.save_pretrained(root / entry.name)
        text = entry.kind != "vision"
        spec = bb.BackboneSpec(f"hf:{root / entry.name}", pretrained=True, max_length=12 if text else None)
        backbone = bb.build_backbone(spec).eval()
        taps = backbone.layer_names
        if text:
            tokenizers.train_tokenizer(backbone.input_cfg, ["the cat sat on the mat", "a dog ran"] * 5, "probe texts")
            x = tokenizers.encode(backbone.input_cfg, ["the cat sat", "a dog ran on the mat"])
        else:
            x = torch.rand(2, 3, 32, 32)
        with torch.no_grad():
            widths = [int(f.shape[-1]) for f in backbone(x)]
        problems = []
        if len(taps) != 2:
            problems.append(f"{len(taps)} taps for 2 layers")
        if tuple(widths) != entry.widths:
            problems.append(f"widths {widths}, expected {list(entry.widths)}")
        want_pool = EXPECTED_POOL.get(entry.kind)
        if want_pool and backbone.pool != want_pool:
            problems.append(f"pool {backbone.pool}, expected {want_pool}")
        if not backbone.can_continue:
            problems.append("cannot continue from a layer")
        return HFResult(
            entry,
            not problems,
            taps,
            widths,
            backbone.tap_formats,
            backbone.pool,
            backbone.can_continue,
            time.perf_counter() - start,
            "; ".join(problems),
        )
    except Exception as e:  # a family that fails is a row of the table, not the end of the sweep
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        return HFResult(
            entry, False, taps, [], [], "", False, time.perf_counter() - start, f"{type(e).__name__}: {detail}"
        )
