"""``laya train --task lm --reads updates``: the language model's LAYA head weighs the blocks' updates h_i − h_{i−1}
(model/lm_heads.py LayaLMHead). α uniform is the model's own prediction, the audit's fast leave-one-layer-out passes
equal the head re-run on each replaced state, the setting is recorded and read back, and a classifier refuses it."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from laya_cli.auditing.lm import token_data
from laya_cli.features.lm_positions import token_states
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import LayaLMHead, lm_from_checkpoint
from laya_cli.model.settings import HeadSettings
from laya_cli.training.lm import train_lm
from tests.helpers import assert_user_error, invoke, make_lm_folder, sentences, small_lm_request

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def readout(width: int = 8, vocabulary: int = 11) -> nn.Module:
    """A final norm then an unembedding, as a causal LM's readout."""
    module = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, vocabulary))
    module.vocabulary = vocabulary
    return module


def head(reads: str = "updates", layers: int = 4) -> LayaLMHead:
    torch.manual_seed(0)
    return LayaLMHead(layers, 8, readout(), HeadSettings(reads=reads)).eval()


def test_an_untrained_head_over_the_updates_is_the_model_itself():
    """Its α starts uniform (the scorer's last layer starts at 0); Σ_i u_i = h_L, and the readout's final norm takes
    away the 1/L: α uniform reads what the model reads."""
    laya = head()
    with torch.no_grad():
        hs = torch.randn(6, 4, 8) * 3
        torch.testing.assert_close(laya(hs).alpha, torch.full((6, 4), 0.25))
        torch.testing.assert_close(laya(hs).logits, laya.readout(hs[:, -1]), atol=1e-3, rtol=1e-3)
        states = head("states")
        for p in states.scorer.parameters():
            p.zero_()
        assert (states(hs).logits - states.readout(hs[:, -1])).abs().max() > 0.1  # a mean of states is not


@pytest.mark.parametrize("reads", ["states", "updates"])
def test_the_fast_removals_are_the_head_rerun_on_each_replaced_state(reads):
    """``removed_logits`` translates only what a replaced state changes (updates: its own and the next layer's)."""
    laya = head(reads)
    hs = torch.randn(5, 4, 8)
    fills = [torch.randn(8) for _ in range(4)]
    with torch.no_grad():
        fast = list(laya.removed_logits(hs, fills))
        torch.testing.assert_close(fast[0], laya(hs).logits)
        for i, fill in enumerate(fills):
            replaced = hs.clone()
            replaced[:, i] = fill
            torch.testing.assert_close(fast[i + 1], laya(replaced).logits, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm"), sentences(150), 110)


def test_a_run_reading_updates_is_recorded_and_read_back_as_trained(lm_dir, tmp_path):
    out = tmp_path / "upd.pt"
    ckpt = train_lm(small_lm_request(lm_dir, out, reads="updates"))
    assert ckpt["head"]["config"]["reads"] == "updates"
    model = lm_from_checkpoint(read_checkpoint(out))
    assert model.laya.reads == "updates"
    hs, _ = token_states(model.lm, token_data(model, None, 30, 2).blocks[0])
    with torch.no_grad():
        got = model.laya(hs).logits
        as_states = LayaLMHead(hs.shape[1], hs.shape[-1], model.lm.readout, HeadSettings())
        as_states.load_state_dict(model.laya.state_dict())
        assert (got - as_states(hs).logits).abs().max() > 1e-3  # the same weights read states: another head
    states = train_lm(small_lm_request(lm_dir, tmp_path / "states.pt", reads="states"))
    assert states["head"]["config"]["reads"] == "states"
    assert lm_from_checkpoint(read_checkpoint(tmp_path / "states.pt")).laya.reads == "states"


def test_the_language_models_default_is_updates_and_an_older_checkpoint_reads_states(lm_dir, tmp_path):
    """Left out, --reads resolves to the LM kind's (backbones/defaults.py) and is recorded resolved; a checkpoint from
    before the setting (no ``reads`` in its head config) was trained on states and is read back as such."""
    out = tmp_path / "default.pt"
    ckpt = train_lm(small_lm_request(lm_dir, out))
    assert ckpt["head"]["config"]["reads"] == "updates"
    older = read_checkpoint(out)
    del older["head"]["config"]["reads"]
    assert lm_from_checkpoint(older).laya.reads == "states"


def test_the_command_line_trains_audits_and_exits_with_it(lm_dir, tmp_path):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--block-size", "16", "--eval-tokens", "200", "--lens", "none",
               "--reads", "updates", "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    info = json.loads(invoke("info", out, "--json").stdout)
    assert info["head"]["config"]["reads"] == "updates"
    assert invoke("audit", out, "--scope", "both", "--compare", "laya,atp", "--samples", "60", "-q").exit_code in (0, 1)
    assert invoke("depth", out, "--samples", "100").exit_code in (0, 1)  # 1: laya's own exit targets missed


def test_a_classifier_and_a_bad_value_are_one_line_and_write_nothing(lm_dir, tmp_path):
    out = tmp_path / "c.pt"
    assert_user_error(invoke("train", "--reads", "updates", "--epochs", "1", "--out", out), "--reads")
    assert not out.exists()
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--reads", "deltas", "--out", out)  # fmt: skip
    assert_user_error(r, "--reads")
    assert not out.exists()
    # laya bench refuses it before its first run (it trained the `last` head first, then refused at `laya`)
    r = invoke("bench", "--reads", "updates", "--seeds", "1", "--epochs", "1", "--out", tmp_path / "bench")
    assert_user_error(r, "--reads")
    assert not (tmp_path / "bench").exists()
