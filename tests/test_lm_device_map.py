"""``--device-map``: a language model placed by transformers/accelerate (``from_pretrained(device_map=…)``) gives
what the same model loaded whole gives. On CPU there is one device, so the map here offloads a layer to disk:
accelerate's hooks load its weights at every call, as they do for a model larger than its GPUs — the route, not a
split over several GPUs, is what this checks (docs/lm.md)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from laya_cli.backbones.lm import build_language_model
from laya_cli.backbones.spec import BackboneSpec
from laya_cli.features.lm_positions import token_states
from laya_cli.runtime.errors import LayaError
from tests.helpers import assert_close_tree, assert_user_error, invoke, lm_request, make_lm_folder, sentences

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
    assert_user_error(r, "--device-map only applies to language models")


def test_without_accelerate_a_device_map_says_what_to_install(lm_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "accelerate", None)  # import accelerate raises ImportError
    with pytest.raises(LayaError, match="needs accelerate"):
        build_language_model(_spec(lm_dir), device_map="auto")


def test_auto_on_one_device_places_the_whole_model_there(lm_dir):
    placed = build_language_model(_spec(lm_dir), device_map="auto")
    assert placed.placed and placed.head_device == placed.input_device == torch.device("cpu")


@pytest.fixture(scope="module")
def lm_ckpt(lm_dir, tmp_path_factory):
    from laya_cli.training.lm import train_lm

    out = tmp_path_factory.mktemp("lm-map-ckpt") / "a.pt"
    train_lm(lm_request(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", out, block_size=16,
                       epochs=1, lr=3e-3, eval_tokens=300, layer_dropout=0.3))  # fmt: skip
    return out


def _loads(monkeypatch, module) -> list:
    """Every ``lm_from_checkpoint`` call of ``module``: the device map it was given, and whether it was
    handed a model already loaded (``lm``) instead of loading one."""
    from laya_cli.model import lm_heads

    maps, load = [], lm_heads.lm_from_checkpoint

    def spy(ckpt, device_map=None, lm=None):
        maps.append((device_map, lm is not None))
        return load(ckpt, device_map, lm)

    monkeypatch.setattr(module, "lm_from_checkpoint", spy)
    return maps


def test_diff_with_a_device_map_places_both_models_and_finds_what_the_whole_ones_give(lm_ckpt, tmp_path, monkeypatch):
    from laya_cli.auditing.diff import lm as lm_diff

    docs = {}
    for name, extra in (("whole", []), ("placed", ["--device-map", OFFLOAD])):
        maps = _loads(monkeypatch, lm_diff)
        out = tmp_path / f"{name}.json"
        r = invoke("diff", lm_ckpt, lm_ckpt, "--samples", "40", "--device", "cpu", "--json", out, "--quiet", *extra)
        assert r.exit_code == 0, r.output
        docs[name] = json.loads(out.read_text())
        # one frozen model under both checkpoints: loaded (placed) once, the second checkpoint's heads share it
        assert maps == [(OFFLOAD if extra else None, False), (OFFLOAD if extra else None, True)]
    placed = docs["placed"]
    assert placed["settings"]["device_map"] == OFFLOAD and placed["options"]["values"]["device_map"] == OFFLOAD
    for doc in docs.values():
        doc.pop("settings"), doc.pop("options")
    assert_close_tree(docs["whole"], placed, 1e-5)


def test_bench_with_a_device_map_trains_and_audits_every_run_with_it(lm_dir, tmp_path, monkeypatch):
    from laya_cli.model import lm_heads

    common = ["bench", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
              f"text:{lm_dir / 'corpus'}", "--epochs", "1", "--block-size", "16", "--eval-tokens", "300",
              "--seeds", "1", "--audit-samples", "40", "--device", "cpu", "--out", tmp_path / "runs",
              "--quiet"]  # fmt: skip
    maps = _loads(monkeypatch, lm_heads)  # bench_lm.audit_run imports it from lm_heads when it audits
    r = invoke(*common, "--device-map", OFFLOAD, "--json", tmp_path / "placed.json")
    assert r.exit_code == 0, r.output
    assert maps == [(OFFLOAD, False)]  # the audit's model; the training's is train_lm's (its checkpoint says so)
    doc = json.loads((tmp_path / "placed.json").read_text())
    assert doc["bench"]["train"]["device_map"] == OFFLOAD
    ckpt = torch.load(doc["runs"][0]["checkpoint"], weights_only=False)
    assert ckpt["train_config"]["device_map"] == OFFLOAD  # recorded where laya train records it
    # placement is not a training option: the same bench without the map reuses the run and its audit
    r = invoke(*common, "--json", tmp_path / "whole.json")
    assert r.exit_code == 0, r.output
    again = json.loads((tmp_path / "whole.json").read_text())
    assert not again["runs"][0]["trained"] and again["objectives"] == doc["objectives"]
    assert again["bench"]["train"]["device_map"] is None and maps == [(OFFLOAD, False)]  # nothing audited again


@pytest.mark.parametrize(
    "value, fragment",
    [("nonsense", "choose from auto"), ('{"transformer.h0": "cpu"}', "unknown module in --device-map")],
)
def test_a_bad_device_map_for_bench_or_diff_is_one_line(lm_dir, lm_ckpt, tmp_path, value, fragment):
    out = tmp_path / "d.json"
    r = invoke("diff", lm_ckpt, lm_ckpt, "--samples", "40", "--json", out, "--quiet", "--device-map", value)
    assert_user_error(r, fragment)
    assert not out.exists()
    r = invoke("bench", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--out", tmp_path / "runs", "--json", out, "--quiet",
               "--device-map", value)  # fmt: skip
    assert_user_error(r, fragment)
    assert not out.exists() and not list((tmp_path / "runs").rglob("*.pt"))
    if value == "nonsense":  # refused before the bench folder is made
        assert not (tmp_path / "runs").exists()


def test_a_device_map_for_a_classifier_bench_or_diff_is_refused(digits_ckpt, tmp_path):
    r = invoke("bench", "--dataset", "digits", "--seeds", "1", "--out", tmp_path / "runs", "--device-map", "auto")
    assert_user_error(r, "--device-map only applies to language models")
    assert not (tmp_path / "runs").exists()
    r = invoke("diff", digits_ckpt, digits_ckpt, "--json", tmp_path / "d.json", "--device-map", "auto")
    assert_user_error(r, "--device-map only applies to language models")
    assert not (tmp_path / "d.json").exists()


def test_a_device_map_for_a_model_built_without_weights_is_refused(lm_dir, tmp_path):
    r = invoke("bench", "--task", "lm", "--backbone", "hf:gpt2", "--no-pretrained", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--out", tmp_path / "runs", "--quiet",
               "--device-map", '{"x": "cpu"}')  # fmt: skip
    assert_user_error(r, "not with --no-pretrained")
    assert not list((tmp_path / "runs").rglob("*.pt"))
