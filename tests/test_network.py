"""Network scope (laya audit --scope network|both): layer effects patched inside the backbone,
Captum's layer methods on the backbone's own modules, the scope comparison, JSON and gating."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_close_tree, assert_user_error, invoke, make_backbone

from laya_cli import backbones as bb
from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.metrics import lolo_effects
from laya_cli.auditing.network import reference as network_reference_module
from laya_cli.auditing.network.patching import NetworkScope, full_model_layer_ig
from laya_cli.auditing.network.reference import network_reference
from laya_cli.auditing.network.results import NETWORK_KEYS
from laya_cli.auditing.settings import AuditSettings, Removal
from laya_cli.features.extraction import tap_means, to_float_images
from laya_cli.model.checkpoint import read_checkpoint, save_checkpoint
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.heads import build_head
from laya_cli.model.laya_model import load_model
from laya_cli.runtime.errors import LayaError
from laya_cli.runtime.memory import MEMORY_KEYS

# (backbone, input side): chains of every engine/layout, small and random (no downloads)
FAMILIES = [
    ("mlp", 8),
    ("cnn", 16),
    pytest.param("timm:vit_tiny_patch16_224", 32, marks=pytest.mark.slow),  # blocks, NLC+1 (slow on 2 cores)
    pytest.param("timm:resnet18", 32, marks=pytest.mark.slow),  # stages, BatchNorm
    pytest.param("torchvision:resnet18", 32, marks=pytest.mark.slow),  # FX engine for plain runs
]

_cache: dict = {}


def scope_for(name: str, side: int, reference: str = "mean"):
    """(NetworkScope on a random tapped backbone + random LAYA head, images, targets)."""
    if (name, side, reference) not in _cache:
        b = make_backbone(name, side)
        for p in b.parameters():
            p.requires_grad_(False)
        g = torch.Generator().manual_seed(1)
        train = torch.rand(16, *b.example_shape, generator=g)
        x = torch.rand(4, *b.example_shape, generator=g)
        ref = tap_means(b, train) if reference == "mean" else None
        with torch.no_grad():
            dims = [r.shape[-1] for r in b(x)]
        head = build_head("laya", dims, 5).eval()
        scope = NetworkScope(b, head, ref)
        with torch.no_grad():
            target = scope.probs(b(x)).argmax(-1)
        _cache[(name, side, reference)] = (scope, x, target)
    return _cache[(name, side, reference)]


@pytest.mark.parametrize("name,side", FAMILIES)
def test_prefix_cached_patched_pass_equals_a_full_forward_with_a_replacing_hook(name, side):
    scope, x, target = scope_for(name, side)
    assert scope.prefix, "these families are chains: the prefix-cached route must be used"
    full = NetworkScope(scope.backbone, scope.head, scope.reference, prefix=False)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    for i in range(len(hs)):  # each patched pass: continue_from vs a full forward with a replacing hook
        fill = scope.fill(i, hs[i])
        for a, b in zip(scope.later(i, fill, x), full.later(i, fill, x)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        scope.effects(x, hs, feats, target), full.effects(x, hs, feats, target), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("name,side", FAMILIES)
def test_network_ig_equals_captum_layer_integrated_gradients_on_the_full_model(name, side):
    scope, x, target = scope_for(name, side)
    hs = scope.activations(x)
    ours = scope.integrated_gradients(x, hs, scope.pooled(hs), target, n_steps=8)
    # Captum's straightforward route: one LayerIntegratedGradients per layer over images -> backbone -> head
    theirs = full_model_layer_ig(scope.backbone, scope.head, x, target, scope.reference, n_steps=8)
    assert ours.shape == (len(x), len(hs))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    # internal_batch_size changes the chunks, not the numbers
    chunked = scope.integrated_gradients(x, hs, scope.pooled(hs), target, n_steps=8, internal_batch_size=8)
    torch.testing.assert_close(chunked, ours, rtol=0, atol=1e-6)


@pytest.mark.parametrize("reference", ["mean", "zero"])
def test_network_ig_is_complete_against_the_total_effects(reference):
    """IG along layer i's path from the reference activation sums to p_ŷ(x) − p_ŷ(x, layer i patched):
    Δ_network (an independent check of baseline, target and path)."""
    scope, x, target = scope_for("mlp", 8, reference)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    ig = scope.integrated_gradients(x, hs, feats, target, n_steps=64)
    delta = scope.effects(x, hs, feats, target)
    torch.testing.assert_close(ig, delta, rtol=0, atol=2e-3)


def test_network_gradxact_equals_total_derivatives_by_autograd():
    scope, x, target = scope_for("cnn", 16)
    got = scope.gradient_x_activation(x, target)
    sal = scope.saliency(x, target)
    with torch.enable_grad():  # by hand: ∂p_ŷ/∂h_i through every later layer (one autograd graph)
        hs = scope.backbone.activations(x.clone().requires_grad_(True))
        p = scope.probs(scope.pooled(hs)).gather(1, target.view(-1, 1)).sum()
        grads = torch.autograd.grad(p, hs)
    want = torch.stack([(g * h).flatten(1).sum(-1) for g, h in zip(grads, hs)], 1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(sal, torch.stack([g.abs().flatten(1).sum(-1) for g in grads], 1), rtol=1e-4, atol=1e-7)


def test_taps_that_are_not_modules_cannot_be_patched():
    b = bb.build_backbone(
        bb.BackboneSpec("torchvision:resnet18", ["layer*.0.add"], in_channels=3, image_size=(32, 32), input_size=32)
    )
    with pytest.raises(LayaError, match="layer1.0.add is a traced graph node, not a module"):
        NetworkScope(b, build_head("laya", [64, 128, 256, 512], 3), None)
    stages = bb.build_backbone(
        bb.BackboneSpec("timm:resnet18", ["feature_info.*"], in_channels=3, image_size=(32, 32), input_size=32)
    )
    with pytest.raises(LayaError, match="feature_info.0 is a timm stage read from forward_intermediates, not a mod"):
        NetworkScope(stages, build_head("laya", [64, 64, 128, 256, 512], 3), None)


# --------------------------------------------------------------------------- on a trained checkpoint


def test_new_checkpoints_store_the_tap_means_and_the_last_layer_agrees_across_scopes(digits_ckpt):
    model = load_model(digits_ckpt)
    stored = model.checkpoint["tap_reference"]
    assert [tuple(t.shape) for t in stored] == [(512,), (256,), (128,)]
    data = load_eval_data(model, samples=64, stream=True)
    scope = NetworkScope(model.backbone, model.head, stored)
    x = to_float_images(data.images)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    net = scope.effects(x, hs, feats, target)
    head = lolo_effects(model.head, feats, target, model.reference)
    # nothing is later than the last tap, and pooling is linear: both scopes remove the same thing there
    torch.testing.assert_close(net[:, -1], head[:, -1], rtol=0, atol=1e-5)
    assert not torch.allclose(net[:, 0], head[:, 0], atol=1e-3)  # earlier layers act through later ones


def test_older_checkpoints_compute_the_tap_means_once_and_cache_them(digits_ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    ckpt = read_checkpoint(digits_ckpt)
    stored = ckpt.pop("tap_reference")
    old = tmp_path / "old.pt"
    save_checkpoint(ckpt, old)
    model = load_model(old)
    first = network_reference(model)
    for a, b in zip(first, stored):  # the same training images through the same backbone
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 1
    monkeypatch.setattr(
        network_reference_module, "tap_means", lambda *a, **k: pytest.fail("recomputed instead of read from the cache")
    )
    second = network_reference(load_model(old))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert network_reference(model, "zero") is None
    with pytest.raises(LayaError, match="--ablation mask only changes the head"):
        Removal.parse("mask").at("network")  # the removal is checked once, before any work


# --------------------------------------------------------------------------- the command


def _head_keys(doc: dict) -> dict:
    """An audit JSON without what only the network scope or the gates add (``network``, ``settings.scope``,
    the gate outcome, the thresholds asked for, the verdict in words and the references run: they speak of every
    scope audited), without
    the run's memory measurements and the command line it recorded (``options``)."""
    skip = ("network", "fail_under", "verdict", "verdict_text", "verdict_scopes", "references", "options", *MEMORY_KEYS)
    out = {k: v for k, v in doc.items() if k not in skip}
    out["settings"] = {k: v for k, v in doc["settings"].items() if k not in ("scope", "fail_under")}
    return out


def test_scope_both_cli_json_markdown_and_gate(digits_ckpt, tmp_path):
    from laya_cli.cli.common import EXIT_OK

    head_json, both_json, md, junit = (tmp_path / n for n in ("head.json", "both.json", "a.md", "junit.xml"))
    common = ["audit", str(digits_ckpt), "--compare", "all", "--samples", "60", "--steps", "4"]
    r = invoke(*common, "-q", "--json", head_json)
    assert r.exit_code == EXIT_OK, r.output
    r = invoke(
        *common,
        "--scope",
        "both",
        "--json",
        both_json,
        "--markdown",
        md,
        "--junit",
        junit,
        "--fail-under",
        "network:ig:faithfulness=-1",
        "--fail-under",
        "all:faithfulness=-1",
    )
    assert r.exit_code == EXIT_OK, r.output
    for title in ("head scope (direct effects)", "network scope (total effects)", "ρ(head, network)", "direct ÷ total"):
        assert title in r.output
    head, both = json.loads(head_json.read_text()), json.loads(both_json.read_text())
    # head scope: every key and number of a head-only run; the network scope beside them
    assert _head_keys(both) == _head_keys(head)
    assert both["methods"] == head["methods"]
    # the verdict in words: the head-only audit's, then the network scope's (one text: the JSON's is the Markdown's)
    assert both["verdict_scopes"][0] == head["verdict_scopes"][0]
    assert [v["scope"] for v in both["verdict_scopes"]] == ["head", "network"]
    assert both["verdict_text"] == " ".join(v["text"] for v in both["verdict_scopes"])
    assert both["verdict_text"].startswith(head["verdict_text"])
    assert both["verdict_text"] in md.read_text()
    assert both["settings"]["scope"] == "both" and "scope" not in head["settings"]
    assert "network" not in head
    net = both["network"]
    assert list(net["methods"]) == list(head["methods"])
    # only what the network scope computes: no deeper-metric keys holding defaults that read as results
    assert all(set(net["methods"][m]) | {"ig_steps"} == set(NETWORK_KEYS) for m in head["methods"])
    assert "ig_steps" in net["methods"]["ig"] and "ig_steps" not in net["methods"]["laya"]
    assert "aopc" not in net["methods"]["ig"] and "randomisation" not in net["methods"]["ig"]
    assert net["patched"] == "prefix" and net["reference"] == "mean"
    scopes = net["scopes"]
    assert set(scopes["layers"]) == set(both["layers"])
    # laya, contrib and random score the same at both scopes: ρ = 1 by construction, left out (issue 64)
    assert {"lolo_effects", "ig", "gradxact"} <= set(scopes["methods"])
    assert not {"laya", "contrib", "random"} & set(scopes["methods"])
    text = md.read_text()
    assert "### laya audit · network scope (total effects)" in text and "#### Direct ÷ total effect" in text
    # the network-scope threshold is a gate check like any other: verdict, JSON and JUnit
    assert both["verdict"]["passed"] and both["verdict"]["checks"] == 1 + 7  # network:ig + every method but random
    assert "network:ig:faithfulness&gt;=-1" in junit.read_text()


def test_network_fail_under_gates(digits_ckpt, tmp_path):
    """``--fail-under network:…`` passes (exit 0) and fails (exit 1) like a head-scope threshold; with -q the
    verdict line alone names the network-scope check."""
    from laya_cli.cli.common import EXIT_GATE_FAILED, EXIT_OK

    common = ["audit", str(digits_ckpt), "--samples", "40", "--steps", "4", "--scope", "network", "-q"]
    r = invoke(*common, "--fail-under", "network:laya:deletion@1=0", "--junit", tmp_path / "j.xml")
    assert r.exit_code == EXIT_OK, r.output
    assert r.output.strip().startswith("laya audit: PASS · 1 of 1 gate checks passed"), r.output
    assert "network:laya:deletion@1" in (tmp_path / "j.xml").read_text()
    r = invoke(
        *common,
        "--fail-under",
        "network:random:faithfulness=0.99,network:laya:deletion@1=0",
        "--json",
        tmp_path / "a.json",
    )
    assert r.exit_code == EXIT_GATE_FAILED, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("laya audit: FAIL · 1 of 2 gate checks failed"), r.output
    assert "network:random: faithfulness" in lines[0]
    doc = json.loads((tmp_path / "a.json").read_text())
    # the network scope's default methods (IG there is the effect computed again): gradxact, atp
    assert doc["methods"] == {} and set(doc["network"]["methods"]) == {"laya", "gradxact", "atp", "random"}
    assert doc["fail_under"]["misses"] and not doc["fail_under"]["passed"]


def test_network_scope_baseline_and_max_drop(digits_ckpt, tmp_path):
    """--baseline/--max-drop compare network-scope results (keys network:METHOD) when both audits hold them."""
    from laya_cli.cli.common import EXIT_GATE_FAILED, EXIT_OK

    common = ["audit", str(digits_ckpt), "--samples", "40", "--steps", "4", "--scope", "network"]
    base = tmp_path / "base.json"
    assert invoke(*common, "-q", "--json", base).exit_code == EXIT_OK
    md = tmp_path / "a.md"
    r = invoke(*common, "--baseline", base, "--max-drop", "network:all:faithfulness=0", "--markdown", md)
    assert r.exit_code == EXIT_OK, r.output
    assert "max-drop: no metric dropped more than allowed (3 check(s))" in r.output  # laya, ig, gradxact
    text = md.read_text()
    assert "| baseline | Δ |" in text and "max-drop: no metric dropped more than allowed" in text
    doc = json.loads(base.read_text())
    doc["network"]["methods"]["laya"]["faithfulness"] += 0.5  # the stored audit was better
    base.write_text(json.dumps(doc))
    r = invoke(*common, "-q", "--baseline", base, "--max-drop", "network:laya:faithfulness=0.01")
    assert r.exit_code == EXIT_GATE_FAILED, r.output
    assert "FAIL · 1 of 1 gate checks failed: network:laya: faithfulness dropped 0.5000" in r.output


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--fail-under", "network:ig:faithfulness=0.5"], "add --scope network"),
        (["--scope", "network", "--fail-under", "ig:faithfulness=0.5"], "names ig, which is not audited"),
        (["--scope", "network", "--ablation", "mask"], "--ablation mask only changes the head"),
        (["--scope", "everywhere"], "--scope"),
        (["--scope", "both", "--fail-under", "network:aopc=0.5"], "not computed at network scope"),
        (["--scope", "both", "--fail-under", "network:accuracy=0.5"], "belongs to the model"),
        (["--max-drop", "network:faithfulness=0.1", "--baseline", "x.json"], "add --scope network"),
        (["--scope", "network", "--by-class"], "--by-class covers the head scope only"),
    ],
)
def test_network_scope_bad_input_is_one_line(digits_ckpt, args, fragment):
    assert_user_error(invoke("audit", str(digits_ckpt), "--samples", "10", "-q", *args), fragment)


def test_scope_network_takes_method_names_in_any_case(digits_ckpt, tmp_path):
    """``--scope network --compare IG`` audits ig, and run_scoped_audit matches names case-insensitively as
    run_audit does (it once matched them exactly): the same numbers as the command's."""
    out = tmp_path / "net.json"
    common = ["--samples", "20", "--steps", "2", "--batch-size", "8", "-q", "--json", out]
    r = invoke("audit", str(digits_ckpt), "--scope", "network", "--compare", "IG", *common)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["methods"] == ["laya", "ig", "random"] and doc["methods"] == {}
    assert list(doc["network"]["methods"]) == ["laya", "ig", "random"]
    assert doc["network"]["methods"]["ig"]["available"] and doc["network"]["methods"]["ig"]["defined"] > 0
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=20)
    settings = AuditSettings(steps=2, batch_size=8)
    result = run_scoped_audit(model, data, ["LAYA", "IG", "Random", "ig"], settings, "network")
    assert result.settings["methods"] == ["laya", "ig", "random"]
    assert result.to_dict()["network"] == doc["network"]


def test_run_scoped_audit_needs_images(digits_ckpt):
    model = load_model(digits_ckpt)
    feats = load_eval_data(model, samples=10).features
    with pytest.raises(LayaError, match="needs the images"):
        run_scoped_audit(model, feats, ["laya"], AuditSettings(), "network")


def test_report_html_shows_the_network_scope():
    """report.html (laya export --audit): the network-scope table and the direct shares beside the head's;
    a --scope network audit (empty head-scope methods) shows no empty head table."""
    from laya_cli.report.html import audit_section

    def scores(f):
        return {
            "faithfulness": f,
            "faithfulness_std": 0.1,
            "undefined": 0,
            "defined": 10,
            "degenerate": 0,
            "deletion@1": 0.5,
            "deletion@1_oracle": 0.6,
            "deletion@1_random": 0.3,
            "deletion@1_normalised": 0.667,
            "available": True,
            "note": None,
        }

    doc = {
        "settings": {
            "dataset": "digits",
            "head": "laya",
            "target": "predicted",
            "ablation": "mean",
            "reduce": "sum",
            "steps": 4,
            "scope": "both",
        },
        "n_samples": 10,
        "accuracy": 0.9,
        "layers": ["a", "b", "c"],
        "methods": {"laya": scores(0.111)},
        "network": {
            "methods": {"laya": scores(0.612), "ig": scores(0.987)},
            "patched": "prefix",
            "reference": "mean",
            "notes": [],
            "scopes": {"methods": {}, "layers": {"a": {"delta_head": 0.1, "delta_network": 0.4, "direct_share": 0.25}}},
        },
    }
    page = audit_section(doc)
    assert "0.111" in page and "Network scope (total effects)" in page and "0.612" in page
    assert '<span class="best">0.987</span>' in page and "0.250" in page and "Direct ÷ total effect" in page
    alone = audit_section({**doc, "methods": {}})
    assert alone.count("<table") == page.count("<table") - 1 and "0.111" not in alone


def test_python_api_audit_scope_equals_the_command_route(digits_ckpt):
    """laya_cli.audit(model, loader, scope=...) on a loader of the same images gives the numbers of the route
    laya audit --scope takes (its prepared EvalData into run_scoped_audit)."""
    import laya_cli
    from laya_cli.features.extraction import to_float_images

    model = laya_cli.load(digits_ckpt)
    data = load_eval_data(model, samples=40)
    settings = AuditSettings(steps=4, batch_size=16)
    command = run_scoped_audit(model, data, ["laya", "ig", "random"], settings, "both").to_dict()
    labels = data.features.labels
    loader = [(to_float_images(data.images[i : i + 16]), labels[i : i + 16]) for i in range(0, 40, 16)]
    api = laya_cli.audit(model, loader, "ig", steps=4, batch_size=16, scope="both", device="cpu", progress=False)
    # The loader's batches go through the backbone at another batch size than the command's extraction: equal
    # to float32 rounding (seen: 1e-8), not bit for bit.
    assert_close_tree(api.summary["network"], command["network"], 1e-6)
    assert_close_tree(api.summary["methods"], command["methods"], 1e-6)
    alone = laya_cli.audit(model, loader, "ig", steps=4, batch_size=16, scope="Network", device="cpu", progress=False)
    assert alone.methods == {}
    assert_close_tree(alone.summary["network"]["methods"], command["network"]["methods"], 1e-6)
    with pytest.raises(LayaError, match="--ablation mask only changes the head"):
        laya_cli.audit(model, loader, scope="network", ablation="mask", progress=False)


def test_the_network_caption_names_the_removal_that_ran_not_the_head_scopes():
    """Issue 48: ``--scope both --ablation bypass`` printed 'ablation mean' in the network table's footer beside
    'the block skipped'; the per-layer quantity is a ratio (it exceeds 1), not a share."""
    from types import SimpleNamespace

    from laya_cli.report.audit import audit_caption
    from laya_cli.report.network import SCOPE_LAYER_HEADER, SCOPE_LAYER_TITLE, network_caption

    settings = {"target": "predicted", "ablation": "mean", "reduce": "sum", "methods": ["laya"], "head": "laya"}
    net = SimpleNamespace(reference="bypass", patched="full", ties=None)
    result = SimpleNamespace(settings=settings, n_samples=10, accuracy=0.9, layers=["a", "b"], network=net)
    footer = network_caption(result)
    assert "the block skipped" in footer and "ablation" not in footer
    assert "head-scope ablation mean" in audit_caption(result)  # the head table says which scope removed by mean
    result.network = None
    assert "· ablation mean ·" in audit_caption(result)  # a head-scope audit: as before
    assert "share" not in SCOPE_LAYER_HEADER[-1] and "ratio" in SCOPE_LAYER_TITLE
