"""docs/examples/notebook.ipynb, run by a Jupyter kernel (nbclient + ipykernel): each result displays itself as
HTML (report.html's tables, intervals included, the class × layer picture inline as a PNG) and as plain text that
fits a terminal (report/notebook.py). Its HTML is also opened in headless Chromium when one is there."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient: pip install 'laya-audit[test]'")
pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel: pip install 'laya-audit[test]'")
nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat: pip install 'laya-audit[test]'")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "examples" / "notebook.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cwd = tmp_path_factory.mktemp("notebook")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), before) if p)  # the kernel: this checkout
    try:
        where = {"metadata": {"path": str(cwd)}}
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources=where).execute()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = before
    return nb


def _displayed(nb, source_end: str) -> dict:
    """The rich output (``execute_result``) of the code cell whose source ends with ``source_end``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.strip().endswith(source_end):
            (out,) = [o for o in cell.outputs if o.output_type == "execute_result"]
            return out["data"]
    raise AssertionError(f"no cell ends with {source_end!r}")


def test_each_result_displays_its_tables_and_picture(executed, tmp_path):
    audit = _displayed(executed, "\nresult")
    html, text = audit["text/html"], audit["text/plain"]
    assert '<div class="laya-result">' in html and "<h3>laya audit</h3>" in html
    assert "95% CI" in html and "Paired difference from laya" in html and "Faithfulness by class" in html
    assert "bootstrap over the class" in html and html.count("data:image/png;base64,") == 1  # mean α by class × layer
    assert text.startswith("AuditResult · ") and "deletion@1 by class" in text and "…" not in text  # nothing cut
    assert re.search(r"faithfulness\s*\[95%", text) and re.search(r"\d\.\d{3}\s+\[-?\d\.\d{3},\s+-?\d\.\d{3}\]", text)
    columns = os.environ.get("COLUMNS", "")
    width = min(int(columns), 120) if columns.isdigit() else 100  # the kernel has no terminal: COLUMNS, else 100
    assert max(len(line) for line in text.splitlines()) <= width

    depth = _displayed(executed, "\ndeep")
    assert "<h3>laya depth</h3>" in depth["text/html"] and "data:image/png;base64," in depth["text/html"]
    assert depth["text/plain"].startswith("DepthResult · ") and "laya depth: truncation" in depth["text/plain"]

    change = _displayed(executed, "\nchange")
    assert "<h3>laya diff</h3>" in change["text/html"] and "Layer usage by class" in change["text/html"]
    assert "Δ mean α (B − A)" in change["text/html"] and "data:image/png;base64," in change["text/html"]
    assert "laya diff: layer usage by class" in change["text/plain"]

    exp = _displayed(executed, "\nexp")
    assert "<h3>laya export</h3>" in exp["text/html"] and "Mean layer attention α by true class" in exp["text/html"]
    assert exp["text/plain"].startswith("Export · ") and "Attention shift" in exp["text/plain"]

    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert text in printed  # print(repr(result)): the same text as the display's

    page = tmp_path / "displays.html"
    page.write_text("<!doctype html><meta charset='utf-8'>" + "".join(
        d["text/html"] for d in (audit, depth, change, exp)
    ), encoding="utf-8")  # fmt: skip
    from benchmarks.browser import unavailable_reason

    if unavailable_reason() is None:  # the page renders: its images decode, no script error
        from benchmarks.browser import chromium, open_report

        with chromium() as browser:
            view, watch = open_report(browser, page)
            sizes = view.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
            assert len(sizes) == 4 and all(w > 100 for w in sizes)
            assert not (watch.console_errors or watch.page_errors or watch.external_requests)
            shots = os.environ.get("LAYA_NOTEBOOK_SCREENSHOT")  # where to keep a picture of it, if anywhere
            if shots:
                view.set_viewport_size({"width": 1100, "height": 900})
                view.screenshot(path=shots, full_page=True)
