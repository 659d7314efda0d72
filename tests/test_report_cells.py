"""The table model (laya_cli.report.cells): one set of cells per audit table, marked alike in the terminal,
Markdown and report.html; the names of the module the report package replaced still resolve."""

from rich.console import Console

from laya_cli.report.audit import AUDIT_COLUMNS, html_methods_table, md_methods_table, rich_methods_table
from laya_cli.report.cells import Cell, fmt, marked


def scores(faithfulness, deletion, available=True):
    return {
        "faithfulness": faithfulness,
        "faithfulness_std": 0.1,
        "undefined": 0,
        "deletion@1": deletion,
        "deletion@1_oracle": 0.6,
        "deletion@1_random": 0.3,
        "deletion@1_normalised": None if deletion is None else deletion / 0.6,
        "available": available,
    }


ROWS = {"laya": scores(0.9, 0.3), "ig": scores(0.8, 0.6), "saliency": scores(None, None, available=False)}
COMPARED = {"ig": {"faithfulness": {"baseline": 0.95, "change": -0.15, "failed": True}}}


def test_every_form_marks_the_same_cells():
    md = "\n".join(md_methods_table(ROWS, AUDIT_COLUMNS, COMPARED))
    page = html_methods_table(ROWS, COMPARED)
    console = Console(width=200, record=True, color_system=None)
    console.print(rich_methods_table(ROWS, AUDIT_COLUMNS, "t", "c", COMPARED))
    terminal = console.export_text()
    assert "| `laya` | **0.900** | — | — | 0.100 | 0 | 0.300 |" in md
    assert "| `ig` | 0.800 | 0.950 | **-0.150 ✗** | 0.100 | 0 | **0.600** |" in md
    assert "| `saliency` | n/a | — | — | 0.100 | 0 | n/a |" in md  # unavailable: never the best
    for cell in ('<span class="best">0.900</span>', '<span class="best">0.600</span>', "<td>—</td>"):
        assert cell.replace("<td>", '<td class="num">') in page
    assert '<span class="fail">-0.150 ✗</span>' in page and "<th>baseline</th>" in page
    assert " base " in terminal and "-0.150 ✗" in terminal  # the terminal's narrower header
    assert page.count('class="best"') == md.count("**") // 2 - 1  # the failed change is bold in Markdown too


def test_a_form_without_a_mark_shows_the_plain_text():
    cells = [Cell("n/a", "dim"), Cell("1.000", "best"), Cell("x")]
    assert marked(cells, {"best": "**{}**"}) == ["n/a", "**1.000**", "x"]
    assert [fmt(None), fmt(float("nan")), fmt(3, "{:d}"), fmt("odd", "{:.3f}")] == ["n/a", "n/a", "3", "odd"]


def test_an_interval_that_excludes_0_prints_digits_that_show_it():
    """Issue 48: laya diff printed '+0.000 [+0.000, +0.000]*' — a star on an interval that reads as 0."""
    from laya_cli.report.cells import interval_format
    from laya_cli.report.diff import _change

    assert _change({"change": 0.00012, "ci_low": 0.00004, "ci_high": 0.0002}) == "+0.00012 [+0.00004, +0.00020]*"
    assert _change({"change": 0.012, "ci_low": -0.004, "ci_high": 0.027}) == "+0.012 [-0.004, +0.027]"  # as before
    assert _change({"change": 2e-10, "ci_low": 1e-10, "ci_high": 3e-10}) == "+2.00e-10 [+1.00e-10, +3.00e-10]*"
    assert interval_format(None, float("nan"), "n/a") == "{:+.3f}"  # nothing to size it on: the usual 3 decimals
