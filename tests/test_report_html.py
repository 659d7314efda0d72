"""report.html without a browser: the explorer's embedded data, thumbnails, attached results (laya export
--audit) and the hook for results without a view yet. The page in a real browser: test_report_browser.py."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import assert_user_error, invoke
from PIL import Image

from laya_cli.exporting.folder import assemble, build_table, write_export
from laya_cli.report.figures import thumbnails


def data_block(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="laya-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def audited_export(digits_ckpt, tmp_path_factory):
    root = tmp_path_factory.mktemp("audited")
    audit = root / "audit.json"
    r = invoke(
        "audit",
        digits_ckpt,
        "--samples",
        60,
        "--steps",
        4,
        "--fail-under",
        "gradxact:faithfulness=0.99",
        "--json",
        audit,
        "-q",
    )
    assert r.exit_code == 1, r.output  # a missed gate: the report shows it
    r = invoke("export", digits_ckpt, "--out", root / "export", "--audit", audit, "--no-plots", "-q")
    assert r.exit_code == 0, r.output
    return root / "export", json.loads(audit.read_text())


def test_export_attaches_the_audit_and_the_report_shows_it(audited_export):
    out, audit = audited_export
    assert json.loads((out / "audit.json").read_text()) == audit
    summary = json.loads((out / "summary.json").read_text())
    assert summary["results"] == {"audit": "audit.json"} and "audit.json" in summary["files"]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<h2 id="result-audit">Audit: are the layer attributions faithful?</h2>' in html
    assert f"{audit['methods']['laya']['faithfulness']:.3f}" in html
    assert 'Gate: <span class="fail">FAIL</span>' in html and "gradxact: faithfulness" in html
    assert '<a href="#result-audit">Audit</a>' in html


def test_explorer_data_is_the_samples_table(audited_export):
    out, _ = audited_export
    t = pd.read_csv(out / "samples.csv")
    d = data_block((out / "report.html").read_text(encoding="utf-8"))
    assert d["index"] == t["index"].tolist() and d["label"] == t["label"].tolist()
    assert d["pred"] == t["predicted"].tolist() and d["classes"] == [str(i) for i in range(10)]
    np.testing.assert_allclose(d["p"], t["p_pred"], atol=5e-5)
    layers = d["layers"]
    alpha = np.array(d["alpha"]).reshape(len(t), len(layers))
    np.testing.assert_allclose(alpha, t[[f"alpha[{n}]" for n in layers]].to_numpy(), atol=5e-5)
    contrib = np.array(d["contrib"]).reshape(len(t), len(layers))
    np.testing.assert_allclose(contrib, t[[f"contrib[{n}]" for n in layers]].to_numpy(), atol=5e-5)
    assert len(d["thumbs"]) == len(t)
    with Image.open(io.BytesIO(base64.b64decode(d["thumbs"][0]))) as im:
        assert im.size == (8, 8) and im.mode == "L"


def test_an_audit_of_another_model_or_not_an_audit_is_refused(digits_ckpt, audited_export, tmp_path):
    _, audit = audited_export
    other = dict(audit, layers=["fc1", "fc2", "fc3"])
    (tmp_path / "other.json").write_text(json.dumps(other))
    (tmp_path / "junk.json").write_text("{not json")
    for path, fragment in (
        (tmp_path / "other.json", "other layers"),
        (tmp_path / "junk.json", "is not JSON"),
        (tmp_path / "missing.json", "no such file"),
    ):
        assert_user_error(
            invoke("export", digits_ckpt, "--out", tmp_path / "out", "--audit", path), "--audit", fragment
        )
        assert not (tmp_path / "out").exists()


def made_up_export(classes, results=None, n=40):
    g = torch.Generator().manual_seed(0)
    L, C = 3, len(classes)
    labels = torch.randint(0, C, (n,), generator=g)
    logits = torch.randn(n, C, generator=g)
    alpha = torch.softmax(torch.randn(n, L, generator=g), -1)
    table = build_table(torch.arange(n), labels, logits, alpha, None, ["a", "b", "c"], classes)
    exp = assemble(table, ["a", "b", "c"], classes, torch.rand(n, 3, 64, 48, generator=g), {"head": "laya"})
    exp.results = dict(results or {})
    return exp


def test_class_names_cannot_break_out_of_the_page(tmp_path):
    exp = made_up_export(["</script><script>alert(1)</script>", "a & b", "ok"])
    write_export(exp, tmp_path / "e", plots=False)
    html = (tmp_path / "e" / "report.html").read_text(encoding="utf-8")
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert data_block(html)["classes"][0] == "</script><script>alert(1)</script>"
    assert data_block(html)["contrib"] is None  # no contrib columns in this table


def test_a_result_without_a_view_is_shown_raw(tmp_path):
    """Attached results are never dropped, even without a renderer (depth has one since issue 12: another key)."""
    exp = made_up_export(["x", "y"], results={"calibration": {"accuracy_by_depth": [0.5, 0.9], "note": "<b>"}})
    write_export(exp, tmp_path / "e", plots=False)
    out = tmp_path / "e"
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<h2 id="result-calibration">calibration results</h2>' in html and "accuracy_by_depth" in html
    assert "&lt;b&gt;" in html
    assert json.loads((out / "calibration.json").read_text()) == {"accuracy_by_depth": [0.5, 0.9], "note": "<b>"}


def test_thumbnails_shrink_large_images_and_keep_small_ones():
    big = torch.rand(2, 3, 64, 48)
    small = (torch.rand(1, 1, 8, 8) * 255).to(torch.uint8)
    for images, size, mode in ((big, (24, 32), "RGB"), (small, (8, 8), "L")):
        for t in thumbnails(images):
            with Image.open(io.BytesIO(base64.b64decode(t))) as im:
                assert (im.size, im.mode) == (size, mode)
    with Image.open(io.BytesIO(base64.b64decode(thumbnails(small)[0]))) as im:
        np.testing.assert_array_equal(np.asarray(im), small[0, 0].numpy())  # lossless, pixel for pixel
