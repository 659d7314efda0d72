"""report.html in a real browser (headless system Chromium via Playwright): no console error, no request
leaves the file, every image decodes, the explorer filters, sorts and renders lazily, with and without α.

Skips, saying why, where Playwright or Chromium is missing (``.ci/run`` installs Debian's chromium
when it runs as root). How fast 10,000 samples become interactive is a benchmark, not a test:
``python -m benchmarks.report_explorer``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import invoke

from benchmarks import browser as lb
from laya_cli.data.settings import EvalDataSettings
from laya_cli.exporting.folder import assemble, build_table, run_export, write_export
from laya_cli.exporting.settings import ExportSettings

REASON = lb.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no browser to test report.html in: {REASON}")


@pytest.fixture(scope="module")
def chromium():
    with lb.chromium() as b:
        yield b


@pytest.fixture(scope="module")
def digits_export(digits_ckpt, tmp_path_factory) -> Path:
    """A real export of the digits model (359 samples), with its audit and its depth result attached."""
    root = tmp_path_factory.mktemp("browser")
    audit, depth = root / "audit.json", root / "depth.json"
    r = invoke("audit", digits_ckpt, "--samples", 60, "--steps", 4, "--json", audit, "-q")
    assert r.exit_code == 0, r.output
    r = invoke("depth", digits_ckpt, "--time-repeats", 0, "--json", depth, "-q")
    assert r.exit_code == 0, r.output
    run_export(
        digits_ckpt, root / "export", ExportSettings(audit=str(audit), depth=str(depth), device="cpu"), use_cache=False
    )
    return root / "export"


@pytest.fixture(scope="module")
def big_export(tmp_path_factory) -> Path:
    """3,000 made-up samples, 12 layers, 28×28 images: enough rows for lazy rendering to matter."""
    n, L, C = 3000, 12, 10
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, C, (n,), generator=g)
    logits = torch.randn(n, C, generator=g) + 2 * torch.nn.functional.one_hot(labels, C)
    alpha = torch.softmax(torch.randn(n, L, generator=g), -1)
    contrib = torch.randn(n, L, generator=g, dtype=torch.float64)
    layers, classes = [f"blocks.{i}" for i in range(L)], [f"class <{c}>" for c in range(C)]  # names need escaping
    table = build_table(torch.arange(n), labels, logits, alpha, contrib, layers, classes)
    images = (torch.rand(n, 1, 28, 28, generator=g) * 255).to(torch.uint8)
    exp = assemble(table, layers, classes, images, {"head": "laya", "backbone": "made-up"})
    out = tmp_path_factory.mktemp("big") / "export"
    write_export(exp, out, plots=False)
    return out


def data_of(report: Path) -> dict:
    """The explorer's embedded data, read from the file (the expectations are computed from it in Python)."""
    text = report.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="laya-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def open_ready(chromium, report: Path):
    page, watch = lb.open_report(chromium, report)
    page.wait_for_selector("body[data-explorer=ready]", timeout=30_000)
    return page, watch


def rendered(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#x-body tr.x-row",
        """rows => rows.map(r => ({
        index: +r.dataset.index, label: +r.querySelector('.c-label').dataset.label,
        pred: +r.querySelector('.c-pred').dataset.pred, p: +r.querySelector('.c-p').textContent,
        correct: r.querySelector('.c-correct').classList.contains('ok')}))""",
    )


def scroll_to(page, where: str) -> None:
    page.evaluate(f"() => {{ const s = document.getElementById('x-scroll'); s.scrollTop = {where}; }}")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def test_the_page_loads_without_errors_or_requests(chromium, digits_export):
    page, watch = open_ready(chromium, digits_export / "report.html")
    try:
        assert watch.console_errors == [] and watch.page_errors == []
        assert watch.external_requests == []  # one self-contained file: nothing else is fetched
        assert page.text_content("#x-count") == "showing 359 of 359 samples"
        for anchor in ("model", "result-audit", "result-depth", "global", "class-layer", "shift", "explorer"):
            assert page.locator(f"h2#{anchor}").count() == 1, anchor
            assert page.locator(f"nav.toc a[href='#{anchor}']").count() == 1, anchor
        # the audit's section, up to the next heading: the metrics' definitions, then the question and the verdict
        # in words (issue 70), then the methods table
        section = page.evaluate("""() => { const out = [];
            for (let el = document.getElementById('result-audit').nextElementSibling; el && el.tagName !== 'H2';
                 el = el.nextElementSibling) out.push([el.tagName, el.textContent]); return out; }""")
        tags = [tag for tag, _ in section]
        table = tags.index("TABLE")
        assert tags[:table] == ["P"] * table and section[0][1].startswith("Faithfulness = Spearman")
        said = [text for _, text in section[1:table]]
        assert said[0].startswith("question: ") and said[1].startswith("verdict: "), said
        audit = section[table][1]
        assert "laya" in audit and "faithfulness" in audit
        assert page.locator('figure img[alt^="Accuracy against mean backbone FLOPs"]').count() == 1  # the depth plot
        # α's collapse summary beside the global profile, and the warning box exactly when it has collapsed
        collapsed = json.loads((digits_export / "summary.json").read_text())["alpha_collapse"]["collapsed"]
        assert page.locator("p.collapse").is_visible() and page.locator("p.warning").count() == int(collapsed)
    finally:
        page.close()


def test_every_image_decodes(chromium, digits_export):
    page, watch = open_ready(chromium, digits_export / "report.html")
    try:
        plots = page.evaluate("""async () => Promise.all([...document.images].map(async im => {
            await im.decode(); return [im.naturalWidth, im.naturalHeight]; }))""")
        assert len(plots) > 7 and all(w > 0 and h > 0 for w, h in plots)  # plots + the rendered thumbnails
        thumbs = page.evaluate("""async () => {
            const D = JSON.parse(document.getElementById('laya-data').textContent);
            return Promise.all(D.thumbs.map(async t => { const im = new Image();
                im.src = 'data:image/png;base64,' + t; await im.decode();
                return [im.naturalWidth, im.naturalHeight]; }));
        }""")
        assert len(thumbs) == 359 and set(map(tuple, thumbs)) == {(8, 8)}  # digits are 8×8, kept as they are
        assert watch.console_errors == [] and watch.page_errors == []
    finally:
        page.close()


def test_filtering_to_one_class_shows_only_that_class(chromium, digits_export):
    t = pd.read_csv(digits_export / "samples.csv")
    page, watch = open_ready(chromium, digits_export / "report.html")
    try:
        page.select_option("#x-label", "3")
        want = t.loc[t.label == 3, "index"].tolist()
        assert page.text_content("#x-count") == f"showing {len(want)} of 359 samples"
        rows = rendered(page)
        assert rows and {r["label"] for r in rows} == {3}
        assert page.evaluate("window.layaExplorer.view()") == want
        scroll_to(page, "s.scrollHeight")
        rows = rendered(page)
        assert {r["label"] for r in rows} == {3} and rows[-1]["index"] == want[-1]
        page.select_option("#x-outcome", "incorrect")  # class 3 and wrong
        want = t.loc[(t.label == 3) & ~t.correct, "index"].tolist()
        assert page.evaluate("window.layaExplorer.view()") == want
        assert all(not r["correct"] and r["label"] == 3 and r["pred"] != 3 for r in rendered(page))
        page.select_option("#x-label", "")
        page.select_option("#x-outcome", "correct")
        assert page.evaluate("window.layaExplorer.view()") == t.loc[t.correct, "index"].tolist()
        page.click("#x-reset")
        assert page.text_content("#x-count") == "showing 359 of 359 samples"
        assert watch.console_errors == [] and watch.page_errors == []
    finally:
        page.close()


def expected_order(values, descending: bool) -> list[int]:
    """Positions sorted by value, ties by position (the explorer's documented order)."""
    v = np.asarray([-np.inf if x is None else x for x in values], dtype=float)
    return sorted(range(len(v)), key=lambda j: ((-v[j] if descending else v[j]), j))


def test_sorting_works_on_every_kind_of_column(chromium, digits_export):
    data = data_of(digits_export / "report.html")
    index = data["index"]
    page, watch = open_ready(chromium, digits_export / "report.html")
    try:
        page.click("th button[data-sort=p]")
        assert page.evaluate("window.layaExplorer.view()") == [index[j] for j in expected_order(data["p"], False)]
        ps = [r["p"] for r in rendered(page)]
        assert ps == sorted(ps) and len(ps) > 5
        page.click("th button[data-sort=p]")  # again: reversed
        assert page.evaluate("window.layaExplorer.view()") == [index[j] for j in expected_order(data["p"], True)]
        assert page.get_attribute("th button[data-sort=p]", "aria-pressed") == "true"
        L = len(data["layers"])
        page.click("button[data-sort='alpha:1']")  # a layer under the α header
        a1 = data["alpha"][1::L]
        assert page.evaluate("window.layaExplorer.view()") == [index[j] for j in expected_order(a1, False)]
        page.select_option("#x-sort", "contrib:2")  # the same through the select
        page.click("#x-dir")
        c2 = data["contrib"][2::L]
        assert page.evaluate("window.layaExplorer.view()") == [index[j] for j in expected_order(c2, True)]
        page.click("th button[data-sort=label]")
        assert page.evaluate("window.layaExplorer.view()") == [index[j] for j in expected_order(data["label"], False)]
        assert watch.console_errors == [] and watch.page_errors == []
    finally:
        page.close()


def test_rows_are_rendered_lazily(chromium, big_export):
    page, watch = open_ready(chromium, big_export / "report.html")
    try:
        assert watch.console_errors == [] and watch.page_errors == [] and watch.external_requests == []
        assert page.text_content("#x-count") == "showing 3,000 of 3,000 samples"
        first = rendered(page)
        assert 10 <= len(first) <= 80 and first[0]["index"] == 0  # a window of rows, not 3,000
        scroll_to(page, "s.scrollHeight / 2")
        middle = rendered(page)
        assert 1000 < middle[0]["index"] < 2000 and len(middle) <= 80
        scroll_to(page, "s.scrollHeight")
        assert rendered(page)[-1]["index"] == 2999
        options = page.eval_on_selector_all("#x-label option", "os => os.map(o => o.textContent)")
        assert options[1].startswith("class <0> (")  # class names are text, never markup
        assert page.locator("#x-table thead button[data-sort^='alpha:']").count() == 12
    finally:
        page.close()


def test_a_head_without_alpha_gets_an_explorer_too(chromium, digits_ckpts, tmp_path):
    out = tmp_path / "last"
    run_export(
        digits_ckpts["last"],
        out,
        ExportSettings(plots=False, device="cpu"),
        EvalDataSettings(samples=80),
        use_cache=False,
    )
    page, watch = open_ready(chromium, out / "report.html")
    try:
        assert watch.console_errors == [] and watch.page_errors == [] and watch.external_requests == []
        assert page.locator("#x-table thead button[data-sort^='alpha']").count() == 0
        assert page.locator("td.c-alpha").count() == 0 and page.locator("td.c-img").count() > 0
        page.select_option("#x-label", "7")
        t = pd.read_csv(out / "samples.csv")
        assert page.evaluate("window.layaExplorer.view()") == t.loc[t.label == 7, "index"].tolist()
        assert {r["label"] for r in rendered(page)} == {7}
    finally:
        page.close()


@pytest.fixture(scope="module")
def text_export(text_ckpt, tmp_path_factory) -> Path:
    """A text model's export: its explorer shows texts where images get thumbnails."""
    out = tmp_path_factory.mktemp("text") / "export"
    r = invoke("export", text_ckpt.ckpt, "--out", out, "-q")
    assert r.exit_code == 0, r.output
    return out


def shown_texts(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#x-body tr.x-row",
        """rows => rows.map(r => ({index: +r.dataset.index, label: +r.querySelector('.c-label').dataset.label,
        shown: r.querySelector('.c-text').textContent, whole: r.querySelector('.c-text').title}))""",
    )


def clipped(text: str, n: int) -> str:
    """What the explorer shows of a text: whitespace runs as one space, the first n characters (… when cut)."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= n else one_line[: n - 1] + "…"


def test_a_text_models_explorer_shows_the_texts_inert_and_filters(chromium, text_export, text_ckpt):
    t = pd.read_csv(text_export / "samples.csv", keep_default_na=False)
    shown_n = data_of(text_export / "report.html")["text_shown"]
    page, watch = open_ready(chromium, text_export / "report.html")
    try:
        assert watch.console_errors == [] and watch.page_errors == [] and watch.external_requests == []
        assert page.locator("td.c-img").count() == 0 and page.locator("#x-table thead th", has_text="text").count()
        rows = shown_texts(page)
        assert [r["index"] for r in rows] == t["index"].tolist()  # 24 rows: all in view
        for r in rows:
            whole = text_ckpt.texts[r["index"]]
            assert r["whole"] == whole and r["shown"] == clipped(whole, shown_n)
        long = rows[1]["shown"]
        assert len(long) == shown_n and long.endswith("…")  # ~300 characters cut to the first 100
        assert rows[0]["shown"].startswith('<script>window.layaPwned = 1</script><img src=x onerror="')  # as text
        assert page.evaluate("typeof window.layaPwned") == "undefined"  # neither the script nor onerror ran
        assert page.locator("#x-body script, #x-body img").count() == 0
        label = int(t.loc[0, "label"])
        page.select_option("#x-label", str(label))
        want = t.loc[t.label == label, "index"].tolist()
        assert page.text_content("#x-count") == f"showing {len(want)} of {len(t)} samples"
        rows = shown_texts(page)
        assert [r["index"] for r in rows] == want and {r["label"] for r in rows} == {label}
        assert [r["whole"] for r in rows] == [text_ckpt.texts[i] for i in want]
        page.click("th button[data-sort=p]")  # sorting still works with the text column in place
        ps = t.set_index("index").loc[page.evaluate("window.layaExplorer.view()"), "p_pred"].tolist()
        assert ps == sorted(ps)
        assert watch.console_errors == [] and watch.page_errors == [] and watch.external_requests == []
    finally:
        page.close()


# --------------------------------------------------------------------------- labels that never overlap or clip

LAYER_LABELS = "#x-table thead .x-layers button"


def made_up_export(root: Path, layers: list[str], spread: float, n: int = 300, C: int = 5) -> Path:
    """A made-up export of ``n`` samples over ``layers``; α a softmax of noise of scale ``spread`` (small: near
    uniform)."""
    L = len(layers)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, C, (n,), generator=g)
    logits = torch.randn(n, C, generator=g) + 2 * torch.nn.functional.one_hot(labels, C)
    alpha = torch.softmax(spread * torch.randn(n, L, generator=g), -1)
    contrib = torch.randn(n, L, generator=g, dtype=torch.float64)
    table = build_table(torch.arange(n), labels, logits, alpha, contrib, layers, [f"c{c}" for c in range(C)])
    images = (torch.rand(n, 3, 16, 16, generator=g) * 255).to(torch.uint8)
    exp = assemble(table, layers, [f"c{c}" for c in range(C)], images, {"head": "laya", "backbone": "made-up"})
    write_export(exp, root, plots=True)
    return root


@pytest.fixture(scope="module")
def near_uniform_export(tmp_path_factory) -> Path:
    """A near-uniform α (about 4.96 of 5 effective layers) over a timm ResNet's stage names, which share no prefix:
    the names that overlapped into 'act1layelayelayelaye'."""
    layers = ["act1", "layer1", "layer2", "layer3", "layer4"]
    return made_up_export(tmp_path_factory.mktemp("uniform") / "export", layers, spread=0.1)


@pytest.fixture(scope="module")
def deep_export(tmp_path_factory) -> Path:
    """48 layers: too many for a label over each bar (numbers or a legend instead)."""
    layers = [f"model.layers.{i}.mlp.act" for i in range(48)]
    return made_up_export(tmp_path_factory.mktemp("deep") / "export", layers, spread=1.0, n=120)


@pytest.mark.parametrize("which", ["digits_export", "near_uniform_export", "deep_export", "text_export"])
def test_the_explorers_layer_labels_never_overlap_or_clip(chromium, request, which):
    """Issue 64: the explorer's layer labels overlapped into 'act1layelayelaye'. On the demo model, a near-uniform α
    with a ResNet's stage names, 48 layers and the tiny BERT: every label fits its bar (nothing cut, nothing
    overlapping), each sits over its own bar, and numbered or unlabelled bars have a legend naming every layer."""
    root = request.getfixturevalue(which)
    layers = data_of(root / "report.html")["layers"]
    page, watch = open_ready(chromium, root / "report.html")
    try:
        faults = lb.label_faults(page, LAYER_LABELS)
        assert faults["count"] == 2 * len(layers)  # α and contrib, one label per layer each
        assert faults["clipped"] == [] and faults["overlapping"] == [], faults
        labels = page.eval_on_selector_all(LAYER_LABELS, "bs => bs.map(b => b.textContent)")[: len(layers)]
        if not all(labels) or labels != [name[-len(label) :] for name, label in zip(layers, labels)]:
            legend = page.text_content(".x-legend")  # numbered or unlabelled bars: the legend names each layer
            assert all(f"{k + 1} {name}" in legend for k, name in enumerate(layers)), legend
        lefts = page.eval_on_selector_all(LAYER_LABELS, "bs => bs.map(b => b.getBoundingClientRect().left)")
        bar = page.eval_on_selector("#x-body tr.x-row td.c-alpha svg", "s => s.getBoundingClientRect().left")
        rects = page.eval_on_selector_all(
            "#x-body tr.x-row:first-child td.c-alpha svg rect", "rs => rs.map(r => r.getBoundingClientRect().left)"
        )
        for k, x in enumerate(rects):  # each bar under its own label (a bar of 0 height is drawn too: 0.5 px)
            assert abs(x - lefts[k]) <= 1.0 and x >= bar - 0.5, (k, x, lefts[k])
        assert watch.console_errors == [] and watch.page_errors == [] and watch.external_requests == []
    finally:
        page.close()


def test_a_near_uniform_alpha_reads_as_near_uniform_in_the_reports_captions(near_uniform_export):
    """Issue 64: the heat map's scale ran dark purple → bright yellow over 0.17–0.24 for a near-uniform α, and an
    attention shift of JS 0.000121 was a full-width bar ranked first. The captions state the anchored scale and the
    practical size; no class of the near-uniform model is ranked."""
    page = (near_uniform_export / "report.html").read_text(encoding="utf-8")
    assert "Colour from 0 to 0.40" in page and "uniform 1/L = 0.200" in page
    assert "Ranked and drawn in colour only from 0.01 bits on" in page
    shift = pd.read_csv(near_uniform_export / "attention_shift.csv")
    assert shift["js_divergence"].max() < 0.01 and shift["rank"].isna().all()
