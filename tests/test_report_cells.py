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

    assert _change({"change": 0.00012, "ci_low": 0.00004, "ci_high": 0.0002}) == "* +0.00012 [+0.00004, +0.00020]"
    assert _change({"change": 0.012, "ci_low": -0.004, "ci_high": 0.027}) == "+0.012 [-0.004, +0.027]"  # as before
    assert _change({"change": 2e-10, "ci_low": 1e-10, "ci_high": 3e-10}) == "* +2.00e-10 [+1.00e-10, +3.00e-10]"
    assert interval_format(None, float("nan"), "n/a") == "{:+.3f}"  # nothing to size it on: the usual 3 decimals


def _vs(difference, low, high):
    return {"difference": difference, "ci_low": low, "ci_high": high}


def _piped(table) -> str:
    """A rich table as a piped CI log shows it: no colour, no style."""
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    console.print(table)
    return console.export_text()


def test_a_difference_whose_interval_excludes_0_is_marked_by_a_character_in_every_form_and_never_green():
    """Issue 64: 'marked: the interval excludes 0' was bold green ANSI only (a piped log marked nothing), and green
    marked a worse result too (gradxact −0.214)."""
    from laya_cli.report.audit import VS_LAYA_CAPTION, vs_laya_markdown, vs_laya_rich_table
    from laya_cli.report.cells import EXCLUDES_0_LEGEND, RICH_MARKS
    from laya_cli.report.intervals import vs_laya_rows

    rows = {
        "laya": {"ci_level": 0.95},
        "gradxact": {"ci_level": 0.95, "vs_laya": {"faithfulness": _vs(-0.214, -0.25, -0.18)}},
        "ig": {"ci_level": 0.95, "vs_laya": {"faithfulness": _vs(0.004, -0.01, 0.02)}},
    }
    _, body = vs_laya_rows(rows)
    worse, level = body[0][1], body[1][1]
    assert worse.text == "* -0.214" and worse.mark == "sig" and level.text == "+0.004" and level.mark is None
    assert "green" not in RICH_MARKS["sig"] and EXCLUDES_0_LEGEND in VS_LAYA_CAPTION
    result = type("R", (), {"methods": rows})()
    piped = _piped(vs_laya_rich_table(result))
    assert "* -0.214" in piped and "* +0.004" not in piped and EXCLUDES_0_LEGEND in " ".join(piped.split())
    md = "\n".join(vs_laya_markdown(rows))
    assert "**\\* -0.214**" in md and EXCLUDES_0_LEGEND in md


def test_a_column_of_differences_keeps_one_number_of_decimals():
    """Issue 64: decimals changed within a column ('-0.00117', '+0.00007', '-0.000009')."""
    from laya_cli.report.intervals import vs_laya_rows

    rows = {
        "a": {"ci_level": 0.95, "vs_laya": {"faithfulness": _vs(-0.00117, -0.002, -0.0005)}},
        "b": {"ci_level": 0.95, "vs_laya": {"faithfulness": _vs(0.00007, -0.0001, 0.0002)}},
        "c": {"ci_level": 0.95, "vs_laya": {"faithfulness": _vs(-0.000009, -0.00002, 0.000001)}},
    }
    _, body = vs_laya_rows(rows)
    texts = [r[1].text.lstrip("* ") for r in body] + [r[2].text for r in body]
    decimals = {len(t.split(".")[1]) for text in texts for t in text.strip("[]").split(", ")}
    assert decimals == {6}, texts


def test_p_values_read_as_numbers_or_below_one_thousandth():
    from laya_cli.report.cells import p_clause, p_text

    assert [p_text(0.0004), p_text(0.0123), p_text(None)] == ["< 0.001", "0.012", "n/a"]
    assert [p_clause(0.0004), p_clause(1.0)] == ["p < 0.001", "p = 1.000"]


def test_a_warning_note_is_never_labelled_note_warning():
    from laya_cli.report.audit import closing_lines
    from laya_cli.report.notes import labelled

    assert (
        labelled("warning: accuracy 0.333 is within noise of chance")
        == "warning: accuracy 0.333 is within noise of chance"
    )
    assert labelled("ig integrates from the patch") == "note: ig integrates from the patch"
    assert "- warning: x" in closing_lines(["warning: x"], None, None)
