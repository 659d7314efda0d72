"""Transformers models whose layers or outputs are laid out unlike a BERT's, tapped (or refused) by what they are,
not by name: stage outputs returned without an embeddings state (MobileNet, CvT, SegFormer), an encoder's states
beside other parts' (MaskFormer), layers that run time first (XLNet, FSMT), a forward that returns a tuple unless
told (DPR), an embedding table the model does not name, a cache switched off in a sub-config."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from laya_cli.backbones.hf import HFFamily, _layer_outputs, _probe_inputs, layer_taps
from laya_cli.backbones.tokens import input_embeddings, vocabulary
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


def test_time_first_layers_are_refused_saying_so():
    config = transformers.XLNetConfig(vocab_size=64, d_model=16, n_layer=2, n_head=2, d_inner=32)
    with pytest.raises(LayaError, match="time first"):
        layer_taps(_model(config))


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
