"""Every model type transformers ships (benchmarks/zoo/hf_all.py), shrunk from its own config, saved, and run
through ``laya train`` → ``audit --scope both`` → ``export`` → ``depth --truncate`` in a forked child: a few
diverse types by default (an encoder, a decoder, an encoder–decoder read through its encoder, a dual model read
through its vision tower, a vision transformer, a detector whose FLOP count once crashed, a model out of scope);
every type with ``-m slow``, where none may crash (exit 3, a hang): each passes, is refused in one line (exit 2),
or is out of scope."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root holds benchmarks/

transformers = pytest.importorskip("transformers")

from benchmarks.zoo.hf_all import Row, model_types, run_isolated, shrink, summary, warm_up, write_texts  # noqa: E402

FAST = {"bert": "text", "gpt2": "text", "t5": "text", "clip": "vision", "vit": "vision", "rf_detr": "vision"}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hf-all")
    write_texts(root / "text")
    warm_up()  # transformers' modeling machinery imported once, not in every forked child
    return root


@pytest.fixture(scope="module")
def fast_rows(tmp_path_factory) -> dict[str, Row]:
    """The sweep over a diverse few, run as its own process: forking this test process, whose torch thread pools
    earlier tests started, can leave a child waiting on a lock no thread will release."""
    out = tmp_path_factory.mktemp("hf-fast") / "rows.json"
    only = ",".join([*FAST, "wav2vec2"])
    cmd = [sys.executable, "-m", "benchmarks.zoo", "--sweep", "--source", "hf", "--all", "--only", only,
           "--json", str(out), "--timeout", "240"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return {r["model_type"]: Row(**r) for r in json.loads(out.read_text())}


@pytest.mark.parametrize("model_type", sorted(FAST))
def test_a_diverse_few_pass_the_whole_pipeline(model_type, fast_rows):
    row = fast_rows[model_type]
    assert row.status == "pass", f"{row.status} at {row.stage}: {row.reason}"
    assert row.kind == FAST[model_type] and row.steps == {"train": 0, "audit": 0, "export": 0, "depth": 0}


def test_a_model_of_neither_tokens_nor_images_is_out_of_scope(fast_rows):
    row = fast_rows["wav2vec2"]
    assert row.status == "out of scope" and "input_values" in row.reason


def test_shrink_makes_a_config_small_and_keeps_its_special_ids():
    config = shrink(transformers.AutoConfig.for_model("gpt2"))
    assert (config.n_layer, config.n_embd, config.n_head) == (3, 32, 2)
    assert config.vocab_size > config.eos_token_id  # 50256: the vocabulary still holds it
    swin = shrink(transformers.AutoConfig.for_model("swin"))
    assert swin.depths == [1, 1, 1, 1] and swin.num_layers == 4  # a staged config keeps what its stages imply


def test_shrink_fills_what_a_default_config_leaves_unset_and_keeps_sizes_it_ties():
    hunyuan = shrink(transformers.AutoConfig.for_model("hunyuan_v1_dense"))  # head_dim None: its model needs one
    assert hunyuan.head_dim == hunyuan.hidden_size // hunyuan.num_attention_heads
    mistral4 = shrink(transformers.AutoConfig.for_model("mistral_large4")).text_config  # per-layer layer indices
    assert mistral4.kv_source_layers == [0, 1, 2] and len(mistral4.no_rope_layers) == 3
    molmo2 = shrink(transformers.AutoConfig.for_model("molmo2"))  # vision layers 24 and 18 of 25: inside 3 layers
    assert all(0 <= i < 3 for i in molmo2.adapter_config.vision_feature_layer)
    pocket = shrink(transformers.AutoConfig.for_model("pocket_tts"), filled=True)  # a size validated equal to a width
    assert pocket.flow_head_config.condition_dim == pocket.hidden_size == 32


def test_the_summary_counts_in_scope_types_and_groups_reasons():
    rows = [
        Row("a", "pass"),
        Row("b", "refused", "train", "error: x takes 12 tokens"),
        Row("c", "refused", "train", "error: x takes 16 tokens"),
        Row("d", "out of scope", "build", "takes input_values"),
        Row("e", "not built", "build", "no small model of it: full: 96 M parameters"),  # the sweep's failure
    ]
    lines = summary(rows)
    assert (
        lines[0].startswith("1 of 4 in-scope") and "not built (no small model of it the sweep could run): 1" in lines[0]
    )
    assert any(line.strip().startswith("2 at train: error: x takes N tokens") for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", model_types())
def test_no_transformers_model_type_crashes(model_type, data):
    row = run_isolated(model_type, data, timeout=300)
    assert row.status != "crash", f"{model_type}: crash at {row.stage}: {row.reason}"


def _text(config):
    return config.get_text_config()


def test_shrink_keeps_rotary_sections_summing_to_the_rotary_half():
    for model_type in ("qwen2_vl", "glm4v"):  # sections the config names none of: the model's code holds them
        text = _text(shrink(transformers.AutoConfig.for_model(model_type)))
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2


def test_shrink_keeps_every_kind_of_layer_and_expert_groups_that_divide():
    text = _text(shrink(transformers.AutoConfig.for_model("qwen3_5")))
    assert len(text.layer_types) == text.num_hidden_layers == 3 and "full_attention" in text.layer_types
    assert text.linear_num_key_heads == 2 and text.linear_key_head_dim == 16  # linear attention is shrunk too
    axk1 = shrink(transformers.AutoConfig.for_model("axk1"))
    assert axk1.n_routed_experts % axk1.n_group == 0 and axk1.topk_group <= axk1.n_group
    assert shrink(transformers.AutoConfig.for_model("deepseek_v2")).num_experts_per_tok == 2  # unset by default


def test_shrink_keeps_the_sizes_a_model_derives_from_each_other():
    mistral4 = shrink(transformers.AutoConfig.for_model("mistral4"))  # latent attention: rotary part of head_dim
    factor = mistral4.rope_parameters.get("partial_rotary_factor", 1.0)
    assert mistral4.head_dim * factor == mistral4.qk_rope_head_dim
    layout = shrink(transformers.AutoConfig.for_model("layoutlmv3"))  # six box embeddings make the width
    assert 4 * layout.coordinate_size + 2 * layout.shape_size == layout.hidden_size
    sam2 = shrink(transformers.AutoConfig.for_model("sam2")).vision_config
    assert sam2.backbone_channel_list == sam2.backbone_config.embed_dim_per_stage[::-1]
    assert shrink(transformers.AutoConfig.for_model("efficientnet")).hidden_dim == 320  # 1280 × 0.25


def test_a_model_that_takes_images_and_more_is_in_scope_and_refused():
    from benchmarks.zoo.hf_all import NEEDS_MORE

    assert NEEDS_MORE.match("takes pixel_values and grid_thw: laya feeds a model tokens or images alone")
    assert not NEEDS_MORE.match("takes input_values: laya taps text and image models")  # audio: out of scope
