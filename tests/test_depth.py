"""laya depth: truncated heads against by-hand references, FLOPs against FlopCounterMode and by-hand
counts, early-exit policies, the truncated checkpoint, the command line and its bad inputs."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_user_error, invoke, make_head_and_features
from torch.utils.flop_counter import FlopCounterMode

from laya_cli.backbones.build import BackboneSpec, build_backbone
from laya_cli.depthing import early_exit as ee
from laya_cli.depthing.compute import model_flops, tap_flops
from laya_cli.depthing.truncation import fold_head, masked_output
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.integrity import with_digest
from laya_cli.model.laya_model import load_model
from laya_cli.model.settings import HeadSettings

# --------------------------------------------------------------------------- masked heads, by hand


def _by_hand_laya(head, feats, ref, k):
    """LAYA from its definition: z_i = g_i(r_i) (r̄_i above k), s = MLP([ψ(z_1) ‖ … ‖ ψ(z_L)]),
    α = softmax(s/τ) kept for i ≤ k and renormalised, logits = W Σ_{i≤k} α_i z_i + b."""
    n = feats[0].shape[0]
    rs = [feats[i] if i < k else ref[i].expand(n, -1) for i in range(len(ref))]
    z = [g(r) for g, r in zip(head.adapters, rs)]
    u = torch.cat([head.psi(zi) for zi in z], dim=1)
    s = head.scorer[2](torch.nn.functional.gelu(head.scorer[0](u)))
    alpha = torch.softmax(s / head.tau, dim=1)
    kept = alpha[:, :k] / alpha[:, :k].sum(1, keepdim=True)
    h = sum(kept[:, i : i + 1] * z[i] for i in range(k))
    return head.classifier(h), alpha


def _by_hand_scalarmix(head, feats, k):
    w = torch.softmax(head.mix_logits, 0)[:k]
    w = w / w.sum()
    h = head.gamma * sum(w[i] * head.adapters[i](feats[i]) for i in range(k))
    return head.classifier(h)


@pytest.mark.parametrize("psi", ["identity", "mlp"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_masking_above_k_is_the_head_on_taps_up_to_k_with_renormalised_alpha(k, psi):
    torch.manual_seed(0)
    dims = (12, 8, 6, 10)
    from laya_cli.model.heads import build_head

    head = build_head("laya", dims, 5, HeadSettings(d_star=8, score_hidden=16, psi=psi)).eval()
    _, feats, ref = make_head_and_features("laya", dims=dims)
    with torch.no_grad():
        out = masked_output(head, feats, ref, k)
        want, alpha = _by_hand_laya(head, feats, ref, k)
        torch.testing.assert_close(out.logits, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.alpha, alpha, rtol=1e-5, atol=1e-6)  # unmasked α at depth k
        # only the first k features matter: anything above k is replaced by the reference
        junk = [*feats[:k], *(torch.randn_like(f) * 100 for f in feats[k:])]
        torch.testing.assert_close(masked_output(head, junk, ref, k).logits, want, rtol=1e-5, atol=1e-6)
        small = fold_head(head, ref, k, HeadSettings(d_star=8, score_hidden=16, psi=psi), 5)
        assert len(small.adapters) == k
        torch.testing.assert_close(small(feats[:k]).logits, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_scalarmix_masked_and_folded_by_hand(k):
    head, feats, ref = make_head_and_features("scalarmix")
    with torch.no_grad():
        head.mix_logits.copy_(torch.tensor([0.3, -1.0, 2.0, 0.5]))
        head.gamma.fill_(1.7)
        want = _by_hand_scalarmix(head, feats, k)
        torch.testing.assert_close(masked_output(head, feats, ref, k).logits, want, rtol=1e-5, atol=1e-6)
        small = fold_head(head, ref, k, HeadSettings(d_star=8, score_hidden=16), 5)
        torch.testing.assert_close(small(feats[:k]).logits, want, rtol=1e-5, atol=1e-5)


def test_full_depth_is_the_unmasked_head():
    head, feats, ref = make_head_and_features("laya")
    with torch.no_grad():
        assert torch.equal(masked_output(head, feats, ref, 4).logits, head(feats).logits)


# --------------------------------------------------------------------------- early exit, by hand


def test_exit_depth_and_minimal_sufficient_depth_by_hand():
    scores = torch.tensor([[0.2, 0.95, 0.99], [0.97, 0.5, 1.0], [0.1, 0.2, 0.3], [1.0, 1.0, 1.0]], dtype=torch.float64)
    assert ee.exit_depth(scores, 0.9).tolist() == [1, 0, 2, 0]
    assert ee.exit_depth(scores, 0.96).tolist() == [2, 0, 2, 0]
    # t = 1: nothing is above it, every sample runs the full model (p_max = 1.0 exactly included)
    assert ee.exit_depth(scores, 1.0).tolist() == [2, 2, 2, 2]
    preds = torch.tensor([[3, 1, 1], [2, 2, 2], [0, 1, 0], [4, 5, 6]])
    assert ee.minimal_sufficient_depth(preds).tolist() == [1, 0, 0, 2]
    assert ee.depth_histogram(ee.minimal_sufficient_depth(preds), 3) == [2, 1, 1]


def test_threshold_one_equals_the_full_model_and_operating_points():
    g = torch.Generator().manual_seed(0)
    n, L = 200, 4
    preds = torch.randint(0, 3, (n, L), generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    pmax = torch.rand(n, L, generator=g, dtype=torch.float64)
    pmax[::7, 0] = 1.0  # saturated softmax at a shallow depth must not exit at t = 1
    cost = [0.1, 0.4, 0.7, 1.0]
    points = ee.sweep("p_max", preds, pmax, labels, [0.5, 0.9, 1.0], cost, None, 3)
    full = (preds[:, -1] == labels).double().mean().item()
    last = points[-1]
    assert last.threshold == 1.0 and last.accuracy == pytest.approx(full) and last.flops_fraction == 1.0
    assert last.exits == [0, 0, 0, n] and last.mean_depth == L
    # by hand for t = 0.5
    depth = [next((k for k in range(L) if pmax[i, k] > 0.5), L - 1) for i in range(n)]
    acc = sum(int(preds[i, depth[i]] == labels[i]) for i in range(n)) / n
    assert points[0].accuracy == pytest.approx(acc)
    assert points[0].flops_fraction == pytest.approx(sum(cost[d] for d in depth) / n)
    best = ee.cheapest_within(points, full, 1.0)  # everything qualifies: the cheapest wins
    assert best.flops_fraction == min(p.flops_fraction for p in points)
    assert ee.cheapest_within(points, full, 0.0).accuracy >= full - 1e-12


# --------------------------------------------------------------------------- FLOPs


def _plain_flops(backbone, x):
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        backbone.model(backbone.adapter(x))
    return fc.get_total_flops()


@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("cnn", (1, 28, 28))])
def test_full_backbone_flops_equal_flopcountermode_on_the_plain_model(name, shape):
    b = build_backbone(BackboneSpec(name, in_channels=shape[0], image_size=shape[1:])).eval()
    x = torch.rand(2, *shape)
    flops = tap_flops(b, x)
    assert flops[-1] == model_flops(b, x) == _plain_flops(b, x) // 2
    assert all(a < c for a, c in zip(flops, flops[1:]))  # each tap costs more than the one before


def test_vit_block_flops_by_hand():
    """timm ViT-tiny at 32×32 (4 patches + CLS): every block costs 24·N·D² + 4·N²·D (qkv, proj, MLP; QKᵀ and
    AV, attention counted on the CPU too), the first tap adds the patch embedding."""
    b = build_backbone(
        BackboneSpec("timm:vit_tiny_patch16_224", in_channels=3, image_size=(32, 32), input_size=32)
    ).eval()
    x = torch.rand(1, 3, 32, 32)
    flops = tap_flops(b, x)
    N, D = 5, 192
    block = 24 * N * D * D + 4 * N * N * D
    assert [b - a for a, b in zip(flops, flops[1:])] == [block] * 11
    assert flops[0] == 2 * 4 * 3 * 16 * 16 * D + block  # patch embedding conv + block 0
    assert model_flops(b, x) == flops[-1]  # nothing with FLOPs after the last block (norm, no head)


# --------------------------------------------------------------------------- the command line


def test_depth_table_json_markdown_plot(digits_ckpt, tmp_path):
    r = invoke(
        "depth",
        digits_ckpt,
        "--time-repeats",
        1,
        "--json",
        tmp_path / "d.json",
        "--markdown",
        tmp_path / "d.md",
        "--plot",
        tmp_path / "d.png",
    )
    assert r.exit_code == 0, r.output
    assert "laya depth: truncation" in r.output and "within 1pp" in r.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["format"] == "laya-depth" and [row["k"] for row in doc["truncation"]] == [1, 2, 3]
    assert doc["truncation"][-1]["accuracy"] == pytest.approx(doc["full"]["accuracy"])
    assert doc["truncation"][-1]["flops_fraction"] == 1.0
    assert sum(doc["oracle"]["histogram"]) == doc["n_samples"]
    pts = [p for p in doc["early_exit"]["points"] if p["threshold"] == 1.0]
    assert {p["policy"] for p in pts} == {"p_max", "alpha_mass"}
    assert all(p["accuracy"] == pytest.approx(doc["full"]["accuracy"]) for p in pts)
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    assert "| k | layer |" in (tmp_path / "d.md").read_text()


def test_truncated_checkpoint_predicts_as_the_masked_full_model(digits_ckpt, tmp_path):
    small = tmp_path / "small.pt"
    r = invoke("depth", digits_ckpt, "--truncate", 2, "--out", small)
    assert r.exit_code == 0, r.output
    ckpt = read_checkpoint(small)
    keys = set(ckpt["backbone"]["weights"])
    assert keys and all(k.startswith(("blocks.0.", "blocks.1.")) for k in keys)  # nothing above tap 2 stored
    assert ckpt["layers"] == ["blocks.0", "blocks.1"] and len(ckpt["reference"]) == 2
    full, cut = load_model(digits_ckpt), load_model(small)
    assert len(cut.backbone.model.blocks) == 2  # and nothing above tap 2 built
    data = load_eval_data(full)
    with torch.no_grad():
        want = masked_output(full.head, data.features.feats, full.reference, 2).logits
        images = data.images.float() / 255 if data.images.dtype == torch.uint8 else data.images.float()
        got = cut.head(cut.backbone(images)).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    info = invoke("info", small, "--json")
    assert info.exit_code == 0, info.output
    summary = json.loads(info.stdout)
    assert (
        summary["truncated"]["depth"] == 2
        and summary["backbone"]["parameters"] < summary["truncated"]["parameters_full"]
    )
    audited = invoke("audit", small, "--compare", "", "--samples", 20)
    assert audited.exit_code == 0, audited.output


def test_public_load_of_a_truncated_checkpoint_predicts_as_the_masked_full_model(digits_ckpt, tmp_path):
    """``laya_cli.load(small.pt)`` (the public API) rebuilds the cut backbone through ``model.laya_model.load_model``;
    the checkpoint's SHA-256 is of the weights it stores (so nothing refuses it), and an edited digest is refused."""
    import laya_cli
    from laya_cli.backbones.build import weights_sha256
    from laya_cli.runtime.errors import LayaError

    small = tmp_path / "small.pt"
    assert invoke("depth", digits_ckpt, "--truncate", 2, "--out", small).exit_code == 0
    ckpt = read_checkpoint(small)
    assert ckpt["backbone"]["sha256"] == weights_sha256(ckpt["backbone"]["weights"])
    assert ckpt["backbone"]["spec"]["cut"] is True and "truncated after blocks.1" in ckpt["backbone"]["source"]
    full, cut = laya_cli.load(digits_ckpt), laya_cli.load(small)
    assert isinstance(cut, laya_cli.LayaModel) and cut.layer_names == ["blocks.0", "blocks.1"]
    data = load_eval_data(full)
    images = data.images.float() / 255 if data.images.dtype == torch.uint8 else data.images.float()
    with torch.no_grad():
        want = masked_output(full.head, data.features.feats, full.reference, 2).logits
        got = cut(images).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    # saved again from Python, it is still a cut checkpoint that loads and predicts the same
    again = cut.save(tmp_path / "again.pt")
    with torch.no_grad():
        torch.testing.assert_close(laya_cli.load(again)(images).logits, got)
    exported = invoke("export", small, "--out", tmp_path / "exp", "--samples", 20, "--no-plots")
    assert exported.exit_code == 0, exported.output
    ckpt["backbone"]["sha256"] = "0" * 64
    torch.save(with_digest(ckpt), tmp_path / "edited.pt")  # an edit that kept the file whole: the weights' check
    with pytest.raises(LayaError, match="backbone weights differ"):
        laya_cli.load(tmp_path / "edited.pt")


def test_refit_works_for_a_head_without_alpha(digits_ckpts, tmp_path):
    r = invoke(
        "depth",
        digits_ckpts["last"],
        "--refit",
        "--refit-epochs",
        1,
        "--time-repeats",
        0,
        "--json",
        tmp_path / "d.json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert all(row["refit_accuracy"] is not None and row["accuracy"] is None for row in doc["truncation"])
    assert doc["early_exit"]["source"] == "refit"
    assert doc["compute"]["time_fraction"] is None
    small = tmp_path / "last2.pt"
    r = invoke("depth", digits_ckpts["last"], "--refit", "--refit-epochs", 1, "--truncate", 2, "--out", small)
    assert r.exit_code == 0, r.output
    assert read_checkpoint(small)["truncated"]["head"] == "refit"


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--truncate", "4", "--out", "x.pt"], ["--truncate must be a depth between 1 and 3", "got 4"]),
        (["--truncate", "0", "--out", "x.pt"], ["between 1 and 3", "got 0"]),
        (["--thresholds", "0,0.5"], ["--thresholds values must be in (0, 1]", "got 0"]),
        (["--thresholds", "1.01"], ["(0, 1]", "got 1.01"]),
        (["--thresholds", "high"], ["--thresholds: 'high' is not a number"]),
        (["--truncate", "2"], ["--out small.pt"]),
        (["--out", "x.pt"], ["add one of them", "--truncate K or --drop K"]),
        (["--time-repeats", "-1"], ["--time-repeats must be at least 0"]),
    ],
)
def test_bad_input_is_one_line(digits_ckpt, tmp_path, monkeypatch, args, fragments):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("depth", digits_ckpt, *args), *fragments)
    assert not (tmp_path / "x.pt").exists()


def test_head_without_alpha_says_refit_works(digits_ckpts):
    assert_user_error(
        invoke("depth", digits_ckpts["concat"]),
        "concat head has no layer weighting α",
        "--refit",
        "works for every head",
    )


def test_export_shows_the_depth_section(digits_ckpt, tmp_path):
    d = tmp_path / "d.json"
    assert invoke("depth", digits_ckpt, "--time-repeats", 1, "--json", d).exit_code == 0
    r = invoke("export", digits_ckpt, "--out", tmp_path / "exp", "--depth", d, "--samples", 30)
    assert r.exit_code == 0, r.output
    html = (tmp_path / "exp" / "report.html").read_text()
    assert "Depth: how deep must the model be" in html and (tmp_path / "exp" / "plots" / "depth.png").is_file()
    assert json.loads((tmp_path / "exp" / "depth.json").read_text()) == json.loads(
        d.read_text()
    )  # attached as a result
    plain = invoke("export", digits_ckpt, "--out", tmp_path / "exp2", "--samples", 30, "--no-plots")
    assert (
        plain.exit_code == 0
        and "Depth: how deep must the model be" not in (tmp_path / "exp2" / "report.html").read_text()
    )
    # found beside the checkpoint: MODEL.depth.json; one for other layers is skipped with a note
    import shutil

    model = shutil.copy(digits_ckpt, tmp_path / "m.pt")
    doc = json.loads(d.read_text())
    (tmp_path / "m.depth.json").write_text(json.dumps(doc))
    found = invoke("export", model, "--out", tmp_path / "exp3", "--samples", 30, "--no-plots")
    assert found.exit_code == 0, found.output
    assert "Depth: how deep must the model be" in (tmp_path / "exp3" / "report.html").read_text()
    (tmp_path / "m.depth.json").write_text(json.dumps({**doc, "layers": ["a", "b", "c"]}))
    foreign = invoke("export", model, "--out", tmp_path / "exp4", "--samples", 30, "--no-plots")
    assert foreign.exit_code == 0 and "m.depth.json beside the checkpoint was not shown" in foreign.output
    assert_user_error(
        invoke("export", model, "--out", tmp_path / "exp5", "--depth", tmp_path / "m.depth.json"),
        "computed for other layers",
    )
    assert not (tmp_path / "exp5").exists()


@pytest.mark.parametrize(
    "backbone,side,k,kept,dropped",
    [
        ("timm:vit_tiny_patch16_224", 32, 4, "blocks.3.", "blocks.4."),
        # stages read from forward_intermediates (feature_info.<i>): the same cut, timm's own
        ("timm:mvitv2_tiny", 64, 2, "stages.1.", "stages.2."),
    ],
)
def test_frozen_timm_truncated_checkpoint(tmp_path, image_folder, backbone, side, k, kept, dropped):
    """A frozen timm model (random weights) cut after tap k by timm's own prune_intermediate_layers:
    the stored weights hold no later block, and the rebuilt model predicts as the masked full one."""
    ckpt, small = tmp_path / "full.pt", tmp_path / "cut.pt"
    trained = invoke(
        "train",
        "--backbone",
        backbone,
        "--no-pretrained",
        "--input-size",
        side,
        "--dataset",
        f"folder:{image_folder}",
        "--epochs",
        2,
        "--out",
        ckpt,
        "--quiet",
    )
    assert trained.exit_code == 0, trained.output
    r = invoke("depth", ckpt, "--truncate", k, "--out", small)
    assert r.exit_code == 0, r.output
    keys = read_checkpoint(small)["backbone"]["weights"]
    assert any(n.startswith(kept) for n in keys) and not any(n.startswith(dropped) for n in keys)
    full, cut = load_model(ckpt), load_model(small)
    data = load_eval_data(full)
    with torch.no_grad():
        want = masked_output(full.head, data.features.feats, full.reference, k).logits
        got = cut.head(cut.backbone(data.images.float() / 255)).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_depth_benchmark_smoke(digits_ckpt, tmp_path):
    """The benchmark's plumbing (a smoke run: its timings are not a measurement)."""
    from benchmarks.depth import main

    rows = main(
        [
            "--model",
            f"{digits_ckpt}@2",
            "--images",
            "16",
            "--batch",
            "8",
            "--repeats",
            "1",
            "--json",
            str(tmp_path / "b.json"),
        ]
    )
    assert rows[0]["k"] == 2 and rows[0]["parameters"] < rows[0]["parameters_full"]
    assert rows[0]["flops_ratio"] == pytest.approx(rows[0]["flops_full"] / rows[0]["flops_truncated"])
    assert json.loads((tmp_path / "b.json").read_text())[0]["images"] == 16


def test_flops_are_counted_for_a_model_that_returns_one_of_its_parameters():
    """FLOPs counted with the model named: its parameters stop requiring gradients meanwhile (FlopCounterMode's module
    tracker failed on RF-DETR's, tests/test_hf_all.py) and require them again after."""
    from laya_cli.depthing.compute import count_flops

    class Queries(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.queries, self.proj = torch.nn.Parameter(torch.ones(3, 4)), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x), self.queries

    model = Queries()
    assert count_flops(lambda: model(torch.ones(2, 4)), model) == 2 * 2 * 4 * 4
    assert all(p.requires_grad for p in model.parameters())  # as they were


# --------------------------------------------------------------------------- times as measurements (issue 64)


def test_the_median_interval_is_the_order_statistics_that_cover_the_median():
    from laya_cli.stats.timing import median, median_interval

    assert median_interval([3.0, 1.0]) is None  # under 3 rounds: a single timing, no interval
    low, high, coverage = median_interval([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (low, high) == (1.0, 5.0) and coverage == pytest.approx(1 - 2 / 32)  # 5 rounds: the whole range
    low, high, coverage = median_interval([float(i) for i in range(10)])
    assert (low, high) == (1.0, 8.0) and coverage == pytest.approx(1 - 2 * 11 / 1024)  # 10: the 2nd and 9th
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([1.0, 2.0, 3.0, 4.0]) == 2.5


def test_a_busy_machines_time_fraction_is_said_to_be_noise_not_given_as_a_number():
    """Issue 64: time % 118.9 at k=4 and 158.5 at full depth, 'full model 31.63 ms' beside a full-depth row of
    50.13 ms, and the API's time_fraction 5.688. Each depth's fraction is paired round by round with the whole
    model's time; where its interval is wider than 20 points it is None, and the table says 'noisy'."""
    from laya_cli.depthing.analysis import timed_compute
    from laya_cli.report.depth import depth_table_rows, timing_caption

    whole = [1.0, 1.02, 0.98, 1.01, 0.99]
    quiet = timed_compute([[0.5, 0.51, 0.49, 0.5, 0.5], [1.0, 1.01, 0.99, 1.0, 1.0]], whole, 10)
    assert quiet["time_fraction"] == pytest.approx([0.5, 1.0], abs=0.02) and not quiet["time_noisy"]
    assert quiet["seconds_full_model"] == pytest.approx(0.1) and quiet["seconds_range"][0] == pytest.approx(
        [0.049, 0.051]
    )
    busy = timed_compute([[0.5, 2.0, 0.4, 0.5, 3.0], [1.0, 5.7, 1.0, 0.9, 1.0]], whole, 10)
    assert busy["time_noisy"] and busy["time_fraction"] == [None, None] and busy["time_fraction_range"][1][1] > 5
    mixed = timed_compute([[0.5, 0.51, 0.49, 0.5, 0.5], [1.0, 5.7, 1.0, 0.9, 1.0]], whole, 10)
    assert mixed["time_noisy"] and mixed["time_fraction"][0] == pytest.approx(0.5, abs=0.02)  # noise per depth
    assert mixed["time_fraction"][1] is None
    doc = {
        "compute": {**busy, "time_repeats": 5, "time_batch": 10, "device": "cpu"},
        "truncation": [
            {"k": k, "layer": f"l{k}", "accuracy": 0.9, "delta": 0.0, "macro_f1": 0.9, "flops": 1, "flops_block": 1,
             "flops_fraction": k / 2, "seconds_per_image": busy["seconds_per_image"][k - 1],
             "seconds_range": busy["seconds_range"][k - 1], "time_fraction": None,
             "time_fraction_range": busy["time_fraction_range"][k - 1]}
            for k in (1, 2)
        ],
    }  # fmt: skip
    header, rows = depth_table_rows(doc)
    assert all(r[header.index("time %")].startswith("noisy (") for r in rows)
    assert "(" in rows[0][header.index("time/img")]  # each time with its interval
    caption = timing_caption(doc["compute"])
    assert "too noisy to tell" in caption and "median of 5 rounds" in caption and "in the same round" in caption
