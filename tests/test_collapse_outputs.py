"""α collapse where users read it (issue 36): the checkpoint ``laya train`` writes, ``laya info``, the audit (JSON,
caption, Markdown, warning, the Python API) and ``laya export``'s report.html.

The collapsed model is the digits checkpoint with its scorer forced onto the last layer (α ≈ 1 − 5e-12 there for every
sample), the spread one with its scorer zeroed (α uniform): what collapse means does not depend on how training went.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import invoke

import laya_cli
from laya_cli.auditing.collapse import collapse_summary
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.evaldata import load_eval_data


def _test_alpha(model) -> torch.Tensor:
    """α of every test sample, computed here independently of train, audit and export."""
    feats = load_eval_data(model, use_cache=False).features.feats
    with torch.no_grad():
        return model.head([f.float() for f in feats]).alpha


def _forced(src, dst, top: int | None):
    """The checkpoint at ``src`` with α forced onto layer ``top`` (None: uniform) and its summary recomputed."""
    model = laya_cli.load(src)
    last = model.head.scorer[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
        if top is not None:
            last.bias[top] = 40.0  # softmax(s / τ), τ = 1.5: the others get exp(−40 / 1.5) ≈ 3e-12
    model.checkpoint["metrics"]["alpha_collapse"] = collapse_summary(_test_alpha(model))
    model.save(dst)
    return dst


@pytest.fixture(scope="module")
def collapsed(digits_ckpt, tmp_path_factory):
    return _forced(digits_ckpt, tmp_path_factory.mktemp("collapse") / "collapsed.pt", top=2)


@pytest.fixture(scope="module")
def spread(digits_ckpt, tmp_path_factory):
    return _forced(digits_ckpt, tmp_path_factory.mktemp("collapse") / "spread.pt", top=None)


@pytest.fixture(scope="module")
def concentrated(collapsed, tmp_path_factory):
    """The collapsed checkpoint as if its α had been trained against the network-scope effects."""
    model = laya_cli.load(collapsed)
    model.checkpoint["train_config"].update(align=1.0, align_target="network")
    model.checkpoint["metrics"]["alpha_collapse"] = collapse_summary(_test_alpha(model), "network")
    dst = tmp_path_factory.mktemp("collapse") / "concentrated.pt"
    model.save(dst)
    return dst


# --------------------------------------------------------------------------- laya train


def test_train_stores_the_summary_of_alpha_on_the_test_split(digits_ckpt):
    ckpt = read_checkpoint(digits_ckpt)
    stored = ckpt["metrics"]["alpha_collapse"]
    want = collapse_summary(_test_alpha(laya_cli.load(digits_ckpt)))
    assert stored["samples"] == ckpt["metrics"]["n_test"] == want["samples"]
    for key in ("entropy_mean", "entropy_sd", "effective_layers_mean", "top_layer_spread"):
        assert stored[key] == pytest.approx(want[key], abs=1e-5), key
    assert stored["modal_top_layer"] == want["modal_top_layer"] and stored["collapsed"] == want["collapsed"]


def test_heads_without_alpha_store_none(digits_ckpts):
    assert read_checkpoint(digits_ckpts["last"])["metrics"]["alpha_collapse"] is None
    assert read_checkpoint(digits_ckpts["scalarmix"])["metrics"]["alpha_collapse"]["top_layer_spread"] == 0.0


def test_a_truncated_checkpoint_does_not_keep_its_full_models_summary(digits_ckpt, tmp_path):
    """laya depth --truncate starts from the full model's metrics: their summary is not the cut head's α (--drop, on
    a residual model: tests/test_removal.py)."""
    r = invoke("depth", digits_ckpt, "--truncate", 2, "--out", tmp_path / "small.pt", "--time-repeats", 0, "-q")
    assert r.exit_code == 0, r.output
    assert read_checkpoint(digits_ckpt)["metrics"]["alpha_collapse"] is not None
    assert read_checkpoint(tmp_path / "small.pt")["metrics"]["alpha_collapse"] is None


# --------------------------------------------------------------------------- laya info


def _unwrapped(output: str) -> str:
    """The panel's text as one line: its borders gone and its wrapped lines joined."""
    return " ".join(output.replace("│", " ").split())


def test_info_shows_a_collapsed_alpha_and_warns(collapsed):
    r = invoke("info", collapsed)
    assert r.exit_code == 0, r.output
    text = _unwrapped(r.output)
    assert "α on test 359 samples: entropy 0.000 ± 0.000 of max 1.099 nats, 1.00 of 3 effective layers" in text
    assert "collapsed onto blocks.2" in text
    assert "warning: α has collapsed onto blocks.2: 1.00 effective layers of 3 on average" in text
    doc = json.loads(invoke("info", collapsed, "--json").stdout)
    assert doc["metrics"]["alpha_collapse"]["collapsed"] is True


def test_info_on_a_spread_alpha_shows_it_without_a_warning(spread):
    r = invoke("info", spread)
    text = _unwrapped(r.output)
    assert r.exit_code == 0 and "1.099 ± 0.000 of max 1.099 nats, 3.00 of 3 effective layers" in text
    assert "collapsed" not in text and "warning" not in text


def test_info_on_a_checkpoint_from_before_or_not_measured_says_nothing(collapsed, tmp_path):
    ckpt = torch.load(collapsed, weights_only=True)
    del ckpt["digest"]  # written before laya stored a digest, as before α collapse was measured
    for stored in ("absent", None):  # an older checkpoint; a head without α, or no test split
        if stored is None:
            ckpt["metrics"]["alpha_collapse"] = None
        else:
            del ckpt["metrics"]["alpha_collapse"]
        torch.save(ckpt, tmp_path / "old.pt")
        r = invoke("info", tmp_path / "old.pt")
        assert r.exit_code == 0, r.output
        assert "α on test" not in r.output and "collapsed" not in r.output


# --------------------------------------------------------------------------- laya audit


def test_audit_json_caption_markdown_and_warning_of_a_collapsed_alpha(collapsed, tmp_path):
    out, md = tmp_path / "a.json", tmp_path / "a.md"
    r = invoke("audit", collapsed, "--compare", "", "--samples", 60, "--json", out, "--markdown", md)
    assert r.exit_code == 0, r.output
    block = json.loads(out.read_text())["alpha_collapse"]
    assert block["collapsed"] is True and block["modal_top_layer"] == 2 and block["samples"] == 60
    assert block["effective_layers_mean"] == pytest.approx(1.0, abs=1e-6) and block["top_layer_spread"] == 0.0
    assert block["entropy_max"] == pytest.approx(math.log(3))
    output = " ".join(r.output.split())
    caption = "α entropy 0.000 ± 0.000 of max 1.099 nats, 1.00 of 3 effective layers, top-layer spread 0.0 %"
    assert f"{caption} — collapsed onto blocks.2" in output
    assert "warning: α has collapsed onto blocks.2" in output
    text = md.read_text()
    assert "collapsed onto blocks.2" in text and "- warning: α has collapsed" in text
    assert "note: warning" not in text  # a warning is labelled once (issue 64)


@pytest.mark.parametrize("head", ["last", "concat"])
def test_audit_of_a_head_without_alpha_has_a_null_block(digits_ckpts, head, tmp_path):
    r = invoke("audit", digits_ckpts[head], "--compare", "", "--samples", 30, "--json", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert "alpha_collapse" in doc and doc["alpha_collapse"] is None
    assert "collapse" not in r.output


def test_the_api_result_carries_the_summary_of_the_audited_alpha(spread, collapsed):
    for path, flag in ((spread, False), (collapsed, True)):
        model = laya_cli.load(path)
        result = laya_cli.audit(model, load_eval_data(model, samples=50), compare=(), progress=False)
        assert result.alpha_collapse == collapse_summary(result.samples["scores"]["laya"])  # α is laya's score
        assert result.alpha_collapse["collapsed"] is flag and result.summary["alpha_collapse"]["collapsed"] is flag
        assert any("α has collapsed" in n for n in result.notes) is flag


def test_network_scope_alone_measures_it_too(collapsed, tmp_path):
    r = invoke(
        "audit", collapsed, "--scope", "network", "--compare", "", "--samples", 20, "--json", tmp_path / "n.json"
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "n.json").read_text())["alpha_collapse"]["collapsed"] is True
    assert "warning: α has collapsed" in r.output


# --------------------------------------------------------------------------- laya export: report.html


def test_report_html_shows_the_summary_and_a_warning_box(collapsed, spread, tmp_path):
    for path, flag in ((collapsed, True), (spread, False)):
        out = tmp_path / path.stem
        r = invoke("export", path, "--out", out, "--no-plots", "--samples", 40)
        assert r.exit_code == 0, r.output
        page = (out / "report.html").read_text(encoding="utf-8")
        global_section = page[page.index('<h2 id="global">') : page.index('<h2 id="class-layer">')]
        assert '<p class="collapse">α over these samples: entropy' in global_section
        assert (
            '<p class="warning" role="alert"><b>warning:</b> α has collapsed onto blocks.2' in global_section
        ) is flag
        assert json.loads((out / "summary.json").read_text())["alpha_collapse"]["collapsed"] is flag


def test_an_alpha_trained_against_the_network_reads_as_a_finding_everywhere(concentrated, tmp_path):
    """info, the audit and report.html say which layer the network needs (a note), not that α collapsed."""
    r = invoke("info", concentrated)
    text = _unwrapped(r.output)
    assert r.exit_code == 0 and "concentrated on blocks.2 (trained against the network's effects)" in text
    assert "note: α concentrates on blocks.2" in text and "warning" not in text and "collapsed onto" not in text
    r = invoke("audit", concentrated, "--compare", "", "--samples", 30, "--json", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["alpha_collapse"]["finding"] is True and doc["alpha_collapse"]["trained_against"] == "network"
    assert any(n.startswith("α concentrates on blocks.2") for n in doc["notes"])
    assert "warning: α has collapsed" not in " ".join(r.output.split())
    out = tmp_path / "export"
    assert invoke("export", concentrated, "--out", out, "--no-plots", "--samples", 30).exit_code == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<p class="note"><b>note:</b> α concentrates on blocks.2' in page and 'role="alert"' not in page
