"""``laya export`` of a text model: the samples file has each sample's text, report.html's explorer shows it
(escaped, cut to its first characters) where an image model's shows thumbnails, and nothing draws token ids
as pictures. The model: ``text_ckpt`` (conftest), a tiny BERT trained on a made-up csv dataset."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import invoke

import laya_cli
from laya_cli.exporting.folder import assemble, build_table, write_export
from laya_cli.model.evaldata import load_eval_data
from laya_cli.report.explorer import TEXT_KEPT, TEXT_SHOWN, explorer_data
from laya_cli.report.figures import PLOT_FILES, can_strip

MARKUP = '<b onclick="x()">bold</b> & <script>x()</script>'


@pytest.fixture(scope="module")
def text_export(text_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("text-export") / "export"
    r = invoke("export", text_ckpt.ckpt, "--out", out, "-q")
    assert r.exit_code == 0, r.output
    return out


def page_data(report) -> dict:
    text = report.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="laya-data">(.*?)</script>', text, re.S)[1])


def test_samples_csv_has_each_text_beside_its_index(text_ckpt, text_export):
    t = pd.read_csv(text_export / "samples.csv", keep_default_na=False)
    assert list(t.columns[:3]) == ["index", "text", "label"]
    assert t["index"].tolist() == list(range(len(text_ckpt.texts)))
    assert t["text"].tolist() == text_ckpt.texts  # whole, quotes and line breaks included
    assert t["label_name"].tolist() == text_ckpt.labels
    summary = json.loads((text_export / "summary.json").read_text(encoding="utf-8"))
    assert summary["columns"][:2] == ["index", "text"]


def test_the_explorer_carries_the_texts_and_no_picture_is_drawn(text_ckpt, text_export):
    report = (text_export / "report.html").read_text(encoding="utf-8")
    data = page_data(text_export / "report.html")
    assert data["texts"] == text_ckpt.texts and data["text_shown"] == TEXT_SHOWN
    assert data["thumbs"] is None  # token ids are not images
    assert "<th>text</th>" in report and "<th>image</th>" not in report
    assert f"text (its first {TEXT_SHOWN} characters; hover for the whole text)" in html.unescape(report)
    assert "<script>window.layaPwned" not in report and "<img src=x" not in report  # only ever escaped
    assert not (text_export / "plots" / PLOT_FILES["strip"]).exists()
    assert (text_export / "plots" / PLOT_FILES["global"]).is_file()  # the layer pictures are drawn as for images


@pytest.mark.parametrize("fmt", ["parquet", "npz"])
def test_every_samples_format_has_the_texts(text_ckpt, tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / fmt
    r = invoke("export", text_ckpt.ckpt, "--out", out, "--format", fmt, "--samples", 10, "--no-plots", "-q")
    assert r.exit_code == 0, r.output
    if fmt == "parquet":
        t = pd.read_parquet(out / "samples.parquet")
        index, texts = t["index"].tolist(), t["text"].tolist()
    else:
        with np.load(out / "samples.npz") as z:
            index, texts = z["index"].tolist(), z["text"].tolist()
    assert len(index) == 10 and texts == [text_ckpt.texts[i] for i in index]  # a subset keeps its own texts


def test_the_python_api_exports_the_texts(text_ckpt, tmp_path):
    model = laya_cli.load(text_ckpt.ckpt)
    exp = laya_cli.export(model, load_eval_data(model, samples=8, seed=3), tmp_path / "api", progress=False)
    assert exp.texts == [text_ckpt.texts[i] for i in exp.table["index"]] and exp.images is None
    assert page_data(tmp_path / "api" / "report.html")["texts"] == exp.texts


def made_up(n: int = 6, texts=None, images=None):
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 2
    alpha = torch.softmax(torch.randn(n, 3, generator=g), -1)
    table = build_table(
        torch.arange(n), labels, torch.randn(n, 2, generator=g), alpha, None, ["a", "b", "c"], ["x", "y"], texts
    )
    return assemble(table, ["a", "b", "c"], ["x", "y"], images, {"head": "laya"})


def test_token_batches_are_never_drawn(tmp_path):
    tokens = torch.randint(0, 100, (6, 2, 16), dtype=torch.int32)  # what a text model's data hold as images
    exp = made_up(images=tokens)
    assert exp.texts is None and not can_strip(exp)
    write_export(exp, tmp_path / "out", strip=4)  # no strip, no thumbnails: nothing tries to draw ids
    assert not (tmp_path / "out" / "plots" / PLOT_FILES["strip"]).exists()
    assert page_data(tmp_path / "out" / "report.html")["thumbs"] is None


def test_an_image_export_has_no_text_anywhere():
    exp = made_up(images=torch.rand(6, 1, 8, 8))
    assert "text" not in exp.table and exp.texts is None and can_strip(exp)
    assert "texts" not in explorer_data(exp, None)  # the page's data stay as they were


def test_the_page_keeps_a_long_text_cut_and_the_file_keeps_it_whole(tmp_path):
    long = "word " * 400 + "<end>"
    exp = made_up(texts=["short", long, MARKUP, "a", "b", "c"])
    kept = explorer_data(exp, None)["texts"]
    assert kept[0] == "short" and kept[2] == MARKUP
    assert len(kept[1]) == TEXT_KEPT and kept[1].endswith("…") and long.startswith(kept[1][:-1])
    write_export(exp, tmp_path / "out", plots=False)
    assert pd.read_csv(tmp_path / "out" / "samples.csv")["text"][1] == long
