"""``--device-map``: a language model placed by transformers/accelerate (``from_pretrained(device_map=…)``) gives
what the same model loaded whole gives. On CPU there is one device, so the map here offloads a layer to disk:
accelerate's hooks load its weights at every call, as they do for a model larger than its GPUs — the route, not a
split over several GPUs, is what this checks (docs/lm.md)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from laya_cli.backbones.causal import build_language_model
from laya_cli.backbones.spec import BackboneSpec
from laya_cli.features.positions import token_states
from laya_cli.runtime.errors import LayaError
from tests.helpers import assert_close_tree, assert_user_error, invoke, make_lm_folder, sentences

pytest.importorskip("accelerate")

OFFLOAD = json.dumps(
    {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu", "transformer.h.1": "cpu",
     "transformer.h.2": "disk", "transformer.h.3": "cpu", "transformer.ln_f": "cpu", "lm_head": "cpu"}
)  # fmt: skip
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm-map"), sentences(300), 250)


def _spec(lm_dir):
    return BackboneSpec(f"hf:{lm_dir / 'model'}", pretrained=True, task="lm")


def test_a_placed_model_gives_the_states_of_the_whole_one(lm_dir):
    whole = build_language_model(_spec(lm_dir))
    placed = build_language_model(_spec(lm_dir), device_map=OFFLOAD)
    offloaded = [n for n, p in placed.backbone.model.named_parameters() if p.is_meta]
    assert placed.placed and offloaded and all(n.startswith("h.2.") for n in offloaded)  # loaded at each call
    assert placed.sha256 == whole.sha256  # read where accelerate keeps the offloaded weights
    ids = torch.randint(0, whole.readout.vocabulary, (2, 9), generator=torch.Generator().manual_seed(0))
    x = torch.stack([ids, torch.ones_like(ids)], 1)
    with torch.no_grad():
        (hs_w, y_w), (hs_p, y_p) = token_states(whole, x), token_states(placed, x)
    assert torch.equal(y_w, y_p)
    torch.testing.assert_close(hs_p, hs_w, atol=1e-6, rtol=1e-6)
    assert placed.to("cpu") is placed and placed.head_device == hs_p.device


def test_train_and_audit_with_a_device_map_match_the_whole_model(lm_dir, tmp_path):
    common = ["--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
              "--epochs", "1", "--block-size", "16", "--eval-tokens", "300", "--device", "cpu", "--quiet"]  # fmt: skip
    for name, extra in (("whole", []), ("placed", ["--device-map", OFFLOAD])):
        r = invoke("train", *common, "--out", tmp_path / f"{name}.pt", *extra)
        assert r.exit_code == 0, r.output
    info = [json.loads(invoke("info", tmp_path / f"{n}.pt", "--json").stdout) for n in ("whole", "placed")]
    assert_close_tree(info[0]["metrics"], info[1]["metrics"], 1e-5)  # held-out figures: the same heads
    audit = ["--samples", "40", "--scope", "both", "--compare", "gradxact", "--device", "cpu", "-q"]
    for name, extra in (("whole", []), ("placed", ["--device-map", OFFLOAD])):
        r = invoke("audit", tmp_path / "whole.pt", *audit, "--json", tmp_path / f"{name}.json", *extra)
        assert r.exit_code == 0, r.output
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("whole", "placed"))
    for doc in (a, b):  # what the machine measured (time, free memory), not what the audit found
        for key in [k for k in doc if k in ("settings", "options") or "memory" in k or "seconds" in k]:
            doc.pop(key)
    assert_close_tree(a, b, 1e-5)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--device-map", "everywhere"], "choose from auto"),
        (["--device-map", '{"h.0": [1]}'], "JSON object"),
        (["--device-map", "{}"], "JSON object"),
        (["--device-map", '{"transformer.h.0": true}'], "JSON object"),
        (["--device-map", '{"transformer.h.0": "gpu7"'], "JSON object"),  # not JSON
        (["--device-map", '{"transformer.h.0": "gpu7"}'], "unknown device 'gpu7' for transformer.h.0"),
        (["--device-map", '{"transformer.h.0": "cuda:99"}'], "transformer.h.0 on GPU 'cuda:99'"),
        (["--device-map", '{"transformer.h.0": 99}'], "transformer.h.0 on GPU 99"),
        (["--device-map", '{"transformer.h0": "cpu"}'], "unknown module in --device-map 'transformer.h0'"),
        (["--device-map", '{"transformer.h.0": "cpu", "transformer.h.1": "disk"}'], "--device-map: hf:"),
    ],
)
def test_a_bad_device_map_is_one_line(lm_dir, tmp_path, args, fragment):
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--out", tmp_path / "m.pt", "--quiet", *args)  # fmt: skip
    assert_user_error(r, fragment)
    assert not (tmp_path / "m.pt").exists()


def test_a_device_map_for_a_classifier_is_refused(tmp_path):
    r = invoke("train", "--dataset", "digits", "--epochs", "1", "--out", tmp_path / "m.pt", "--device-map", "auto")
    assert_user_error(r, "--device-map places a language model")


def test_without_accelerate_a_device_map_says_what_to_install(lm_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "accelerate", None)  # import accelerate raises ImportError
    with pytest.raises(LayaError, match="needs accelerate"):
        build_language_model(_spec(lm_dir), device_map="auto")


def test_auto_on_one_device_places_the_whole_model_there(lm_dir):
    placed = build_language_model(_spec(lm_dir), device_map="auto")
    assert placed.placed and placed.head_device == placed.input_device == torch.device("cpu")
