"""Transformers models whose layers or outputs are laid out unlike a BERT's, tapped (or refused) by what they are,
not by name: stage outputs returned without an embeddings state (MobileNet, CvT, SegFormer), an encoder's states
beside other parts' (MaskFormer), layers that run time first (XLNet, FSMT: found transposed), a forward that returns
a tuple unless told (DPR), an embedding table the model does not name, a cache switched off in a sub-config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from laya_cli.backbones.hf import HFFamily, _layer_outputs, _probe_inputs, layer_taps
from laya_cli.backbones.tokenizers import input_embeddings, vocabulary
from laya_cli.runtime.errors import LayaError

transformers = pytest.importorskip("transformers")


def _model(config):
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval()


def test_stage_outputs_without_an_embeddings_state_are_the_taps():
    model = _model(transformers.MobileNetV1Config(image_size=32, depth_multiplier=0.25))
    taps = layer_taps(model)
    states, outs, _ = _layer_outputs(model, _probe_inputs(model))
    assert len(taps) == len(states[0])  # every state is a layer's output: none is the embeddings'
    got = dict(outs["layer"])
    assert all(torch.equal(got[t], h) for t, h in zip(taps, states[0]))  # the taps are the states themselves


def test_time_first_layers_are_found_by_their_outputs_transposed():
    config = transformers.XLNetConfig(vocab_size=64, d_model=16, n_layer=2, n_head=2, d_inner=32)
    model = _model(config)
    assert layer_taps(model) == ["layer.0", "layer.1"]
    assert model.laya_time_first == {"layer.0", "layer.1"}  # read and written back transposed: test_hf_time_first.py


def test_a_forward_that_returns_a_tuple_unless_told_is_told():
    config = transformers.DPRConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = _model(config)
    base = getattr(model, "base_model", model)
    assert len(layer_taps(base)) == 2


class _Unnamed(nn.Module):
    """A text model whose ``get_input_embeddings`` is not implemented (Dia's encoder)."""

    def __init__(self, vocab: int = 40):
        super().__init__()
        self.config = transformers.PretrainedConfig(vocab_size=vocab)
        self.tokens, self.other = nn.Embedding(vocab, 8), nn.Embedding(7, 8)

    def get_input_embeddings(self):
        raise NotImplementedError

    def forward(self, input_ids, attention_mask=None):
        return self.tokens(input_ids)


def test_the_embedding_table_of_the_config_vocabulary_is_found_where_the_model_does_not_name_it():
    model = _Unnamed()
    assert input_embeddings(model) is model.tokens and vocabulary(model) == 40
    model.other = nn.Embedding(40, 8)  # two tables of that size: which embeds the tokens is not known
    assert input_embeddings(model) is None


def test_a_table_that_is_no_nn_embedding_is_fed_and_its_gradient_reaches_the_taps():
    """I-BERT's ``QuantEmbedding``: a 2-D weight of the vocabulary's rows, returning (embeddings, scaling factor)."""
    from laya_cli.backbones.hf import _embedding_grads

    config = transformers.IBertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = _model(config).requires_grad_(False)
    assert type(input_embeddings(model)).__name__ == "QuantEmbedding" and vocabulary(model) == 64
    assert layer_taps(model) == ["encoder.layer.0", "encoder.layer.1"]
    _embedding_grads(model)
    with torch.enable_grad():
        out = model(**_probe_inputs(model)).last_hidden_state
    assert out.requires_grad  # a frozen model: Captum's layer gradients start at the embeddings' output


def test_a_table_named_by_a_sub_config_vocabulary_and_precise_refusals():
    model = _Unnamed()
    text = SimpleNamespace(vocab_size=40)
    model.config = SimpleNamespace(sub_configs={"text_config": None}, text_config=text)  # FastSpeech 2 + vocoder
    assert input_embeddings(model) is model.tokens
    text.vocab_size = None
    with pytest.raises(LayaError, match="names none .get_input_embeddings. and its config no vocab_size"):
        vocabulary(model)

    class Codebooks(nn.Module):  # Kyutai's, CSM's: codebooks summed per position, no one table of token ids
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(100, 8)

    model.get_input_embeddings = Codebooks
    with pytest.raises(LayaError, match=r"input embedding \(Codebooks\) is no table indexed by token ids"):
        vocabulary(model)


def test_a_model_without_a_forward_is_refused_in_one_line():
    from laya_cli.backbones.hf import _base_model

    class Parts(transformers.PreTrainedModel):  # Bark: three models that generate() runs in turn
        config_class = transformers.PretrainedConfig

        def __init__(self, config):
            super().__init__(config)
            self.semantic = nn.Embedding(10, 4)

    with pytest.raises(LayaError, match="has no forward of its own"):
        _base_model(Parts(transformers.PretrainedConfig()), "parts")


def test_the_cache_is_off_in_every_sub_config():
    model = _Unnamed()
    model.config = transformers.Qwen2VLConfig()
    model.config.text_config.use_cache = True
    HFFamily().prepare(model)
    assert model.config.text_config.use_cache is False


def test_a_replaced_output_is_a_copy_later_layers_may_write_into():
    from laya_cli.backbones.engines import own_memory

    reference = torch.zeros(1, 3, 4).expand(2, 3, 4)  # broadcast to the batch: one memory for every row
    leaf = torch.ones(2, 3, 4, requires_grad=True)  # Captum's input
    for value in (reference, (leaf, "cache")):
        new = own_memory(value)
        first = new if isinstance(new, torch.Tensor) else new[0]
        first.mul_(2)  # FlauBERT's tensor *= mask
    assert reference.sum() == 0 and leaf.detach().sum() == 24
    own_memory((leaf, None))[0].sum().backward()
    assert leaf.grad is not None and leaf.grad.sum() == 24  # the gradient reaches the leaf through the copy


def test_a_per_sample_1d_argument_of_a_replayed_layer_follows_the_rows(tmp_path):
    """X-MOD's layers take one language id per sample (1-D, batch long): prefix caching on some rows of a batch
    (network-scope IG refining them) hands the layers those rows' ids, as the full passes do."""
    from laya_cli import backbones as bb
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.backbones import tokenizers as tokenization
    from laya_cli.model.heads import build_head

    config = transformers.XmodConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
        languages=["en_XX", "de_DE"], default_language="en_XX", max_position_embeddings=40,
    )  # fmt: skip
    _model(config).save_pretrained(tmp_path / "xmod")
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{tmp_path / 'xmod'}", pretrained=True, max_length=12)).eval()
    texts = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf", "milk egg"]
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(texts).split(), "test words")
    x = tokenization.encode(backbone.input_cfg, texts)
    torch.manual_seed(0)
    head = build_head("laya", [16, 16, 16], 3).eval()
    scope, full = (NetworkScope(backbone, head, prefix=p) for p in (True, False))
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    rows = torch.tensor([0, 2])
    some = (x[rows], [h[rows] for h in hs], [f[rows] for f in feats], target[rows])
    with backbone.batch_rows(rows):
        ours = scope.integrated_gradients(*some, n_steps=4)
    full.activations(x[rows])
    torch.testing.assert_close(ours, full.integrated_gradients(*some, n_steps=4), rtol=0, atol=1e-5)


def test_hidden_states_from_two_lists_called_in_turn_name_them():
    from laya_cli.backbones.hf import _untappable

    h = [torch.full((2, 3, 4), float(i)) for i in range(5)]
    outs = {"a.layers": [("a.layers.0", h[1]), ("a.layers.1", h[3])], "b.layers": [("b.layers.0", h[2])]}
    outs["b.layers"].append(("b.layers.1", h[4]))
    error = _untappable(nn.Module(), h, outs)
    assert "come from 2 lists of layers called in turn (a.layers, b.layers)" in str(error)


class _NeedsAnImage(nn.Module):
    """A text-and-image model whose forward fails on tokens alone (BridgeTower's cross-modal layers, Llama 4's)."""

    main_input_name = "input_ids"

    def __init__(self, runs: bool = False):
        super().__init__()
        self.config = transformers.BertConfig(
            vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
        )
        self.text_model, self.runs = _model(self.config), runs

    def get_input_embeddings(self):
        return self.text_model.get_input_embeddings()

    def forward(self, input_ids, attention_mask=None, pixel_values=None, output_hidden_states=None):
        if pixel_values is None and not self.runs:
            raise ValueError("You have to specify pixel_values")
        return self.text_model(input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states)


def test_a_model_that_needs_an_image_besides_its_tokens_is_tapped_in_its_text_tower():
    from laya_cli.backbones.hf import _reduced

    model = _NeedsAnImage()
    assert _reduced(model, "pair") is model.text_model
    whole = _NeedsAnImage(runs=True)
    assert _reduced(whole, "pair") is whole  # a model that runs on its tokens is tapped whole


def test_a_stage_that_returns_a_tuple_inside_a_tuple_is_tapped_at_its_tensor():
    """PVTv2's stages return ((hidden, height, width), …): the tap is the tensor at the bottom of the first items,
    and a replacement is written back there."""
    from laya_cli.backbones.engines import first_tensor, own_memory, replace_first

    config = transformers.PvtV2Config(
        image_size=32, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4]
    )
    model = _model(config)
    taps = layer_taps(model)
    assert taps == [f"encoder.layers.{i}" for i in range(4)]  # its states are its stages: no embeddings state
    h, extra = torch.ones(2, 3), object()
    nested = ((h, 4, 4), extra)
    assert first_tensor(nested) is h
    out = replace_first(nested, lambda t: t * 2)
    assert torch.equal(out[0][0], 2 * h) and out[0][1:] == (4, 4) and out[1] is extra
    copy = own_memory(nested)
    assert torch.equal(copy[0][0], h) and copy[0][0].data_ptr() != h.data_ptr() and copy[1] is extra


def _calls_across_lists(config):
    model = _model(config)
    states, outs, order = _layer_outputs(model, _probe_inputs(model))
    taps = layer_taps(model)
    got = dict(order)
    matched = sum(any(torch.equal(got[t], h) for h in states[0]) for t in taps)
    return taps, matched


def test_states_from_several_lists_called_in_turn_are_tapped_in_call_order():
    """Funnel: three blocks of layers, then its decoder's layers; its upsampled stream is a state no layer returns."""
    config = transformers.FunnelConfig(
        vocab_size=64,
        block_sizes=[2, 2],
        num_decoder_layers=1,
        d_model=16,
        n_head=2,
        d_head=8,
        d_inner=32,
        architectures=["FunnelModel"],
    )
    taps, matched = _calls_across_lists(config)
    assert taps == ["encoder.blocks.0.0", "encoder.blocks.0.1", "encoder.blocks.1.0", "encoder.blocks.1.1",
                    "decoder.layers.0"]  # fmt: skip
    assert matched == len(taps)  # every tap's output is one of the model's own states


def test_stages_that_are_lists_of_blocks_are_tapped_at_their_last_block():
    config = transformers.PoolFormerConfig(
        image_size=32, hidden_sizes=[8, 16, 24, 32], depths=[1, 2, 1, 1], num_encoder_blocks=4
    )
    taps, matched = _calls_across_lists(config)
    assert taps == ["encoder.block.0.0", "encoder.block.1.1", "encoder.block.2.0", "encoder.block.3.0"]
    assert matched == 4


def test_layers_a_model_computes_without_gradients_refuse_network_gradient_methods(tmp_path):
    """HRM runs all but its last recurrent cycle under torch.no_grad: network-scope IG/Grad×Act/AtP cannot reach
    those taps. One line before any work (it failed deep inside Captum); LOLO alone still runs there."""
    from helpers import assert_user_error, invoke

    from benchmarks.zoo.hf_all import write_texts

    config = transformers.HrmTextConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_attention_heads=2, head_dim=16,
        num_layers_per_stack=1, H_cycles=2, L_cycles=2, architectures=["HrmTextModel"],
    )  # fmt: skip
    _model(config).save_pretrained(tmp_path / "hrm")
    data = write_texts(tmp_path / "text", train=12, test=6)
    ckpt = tmp_path / "m.pt"
    r = invoke("train", "--backbone", f"hf:{tmp_path / 'hrm'}", "--dataset", f"csv:{data}", "--max-length", "12",
               "--epochs", "1", "--out", str(ckpt), "--device", "cpu", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert_user_error(invoke("audit", str(ckpt), "--scope", "network", "--device", "cpu", "-q"), "without gradients")
    r = invoke("audit", str(ckpt), "--scope", "network", "--compare", "contrib", "--device", "cpu", "-q")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    "model_type, tower",
    [("pe_audio", "text_model"), ("sam2_video", "vision_encoder"), ("clvp", "text_encoder_model")],
)
def test_a_model_of_several_parts_that_needs_more_than_tokens_or_images_is_tapped_at_its_tower(model_type, tower):
    """PE Audio's forward needs audio beside its tokens, and names a token table (its text tower's): laya taps the
    text tower. SAM 2 Video reads an inference session: laya taps its image tower (both regressed once). CLVP's
    forward needs speech features: its text encoder."""
    from benchmarks.zoo.hf_all import shrink
    from laya_cli.backbones.hf import _base_model

    model = _model(shrink(transformers.AutoConfig.for_model(model_type)))
    assert _base_model(model, model_type) is getattr(model, tower)
