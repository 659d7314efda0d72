"""The table model every renderer shares: a table is columns and rows of cells, a cell is a text and an optional
mark, and each form writes the marks its own way.

The per-command modules (``audit``, ``network``, ``bench``, ``depth``, ...) build a table's cells once; the
terminal (rich markup), Markdown and report.html (HTML) only choose the marks, so a value reads the same in all
three: formatted by ``fmt`` ("n/a" where undefined), the best value of a higher-is-better column marked
``best``, a flagged value ``flag``, a change that failed its --max-drop ``failed``, an n/a to fade ``dim``, a
difference whose interval excludes 0 ``sig``.

Every mark that means something survives without colour (a piped CI log, NO_COLOR): ``flag`` writes " !", ``failed``
" ✗", ``sig`` a leading ``EXCLUDES_0`` ("* +0.029": leading, so the digits of a right-aligned column stay aligned),
explained by ``EXCLUDES_0_LEGEND`` under its table; ``sig`` is bold, never green: a difference that excludes 0 is as
often worse as better. A column's numbers share one format (``column_format``), p-values read "0.012" or "< 0.001"
(``p_text``, ``p_clause``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from rich import box
from rich.table import Table

from .inert import html_text, md_text, rich_text, visible_controls


class Column(NamedTuple):
    """A metric column: its header, the key of its value in a row dict, the value's format, whether its best
    (largest) value is marked, and the row key whose truth flags a value."""

    header: str
    key: str
    spec: str = "{:.3f}"
    best: bool = False
    flag: str | None = None
    kind: str = "value"  # "value": the row's own; "base" and "delta": a --baseline's value and the change
    short: str = ""  # the terminal's header, where ``header`` is too wide for it


class Cell(NamedTuple):
    text: str
    mark: str | None = None  # "best", "flag", "failed" or "dim"; a form without the mark shows the plain text


class Marks(dict):
    """A form's marks by name (``{}``: the cell's text), and the form's escaping rule (``inert.py``): a cell's text
    comes from input as often as not (a class name, a layer, a path), so it is escaped before it is marked."""

    def __init__(self, marks: dict[str, str], escape: Callable[[str], str]):
        super().__init__(marks)
        self.escape = escape


RICH_MARKS = Marks(
    {
        "best": "[bold green]{}[/]",
        "flag": "[yellow]{} ![/]",
        "failed": "[bold red]{} ✗[/]",
        "dim": "[dim]{}[/]",
        "sig": "[bold]{}[/]",
    },
    rich_text,
)
MD_MARKS = Marks({"best": "**{}**", "flag": "{} !", "failed": "**{} ✗**", "sig": "**{}**"}, md_text)
HTML_MARKS = Marks(
    {
        "best": '<span class="best">{}</span>',
        "flag": "{} !",
        "failed": '<span class="fail">{} ✗</span>',
        "sig": '<span class="sig">{}</span>',
    },
    html_text,
)

EXCLUDES_0 = "*"  # written before a difference whose interval excludes 0
EXCLUDES_0_LEGEND = f"{EXCLUDES_0} the interval excludes 0"


def excludes_zero(low, high) -> bool:
    """Whether an interval [low, high] lies wholly on one side of 0 (False where a bound is missing)."""
    return low is not None and high is not None and (low > 0 or high < 0)


def difference_cell(text: str, low, high) -> Cell:
    """A difference's cell: marked ``sig`` and led by ``EXCLUDES_0`` where its interval excludes 0."""
    return Cell(f"{EXCLUDES_0} {text}", "sig") if excludes_zero(low, high) else Cell(text)


def p_text(p) -> str:
    """A p-value as a table shows it: '0.012', '< 0.001', 'n/a'."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_clause(p) -> str:
    """A p-value in a sentence: 'p = 0.012', 'p < 0.001' (never 'p = < 0.001')."""
    text = p_text(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def fmt(value, spec: str = "{:.3f}") -> str:
    """``value`` in the format ``spec``; "n/a" where it is undefined (None or NaN), as it is where it does not
    fit the format (an attached JSON may hold anything)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    try:
        return spec.format(value)
    except (TypeError, ValueError):
        return str(value)


def interval_format(*values: float | None) -> str:
    """A signed format with enough decimals (3 at least) that a difference and its interval — ``values``: the
    difference, the bounds — each show a significant digit, and so does the width: an interval that excludes 0
    reads so (never '+0.000 [+0.000, +0.000]*'). Scientific below 1e-8."""
    return column_format([values])


def column_format(rows: Iterable[Sequence[float | None]]) -> str:
    """One signed format for a whole column of differences with their intervals (``rows``: each row's difference
    and bounds): enough decimals (3 at least) that every value and every interval's width shows a significant digit,
    the same in every row, so a column never reads '-0.00117', '+0.00007', '-0.000009'. Scientific below 1e-8."""
    nonzero = []
    for values in rows:
        defined = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        widths = [max(defined) - min(defined)] if len(defined) > 1 else []
        nonzero += [abs(v) for v in [*defined, *widths] if v]
    smallest = min(nonzero, default=1.0)
    if smallest < 1e-8:
        return "{:+.2e}"
    return f"{{:+.{max(3, math.ceil(-math.log10(smallest)))}f}}"


def best(values: Iterable) -> float | None:
    """The largest defined number (None and NaN ignored), or None."""
    vals = [v for v in values if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))]
    return max(vals) if vals else None


def marked(cells: Iterable[Cell], marks: dict[str, str]) -> list[str]:
    """The cells as text in one form (``marks``: RICH_MARKS, MD_MARKS, HTML_MARKS): each text escaped for the form
    (a plain dict of marks escapes nothing), then marked."""
    escape = getattr(marks, "escape", str)
    return [marks[c.mark].format(escape(c.text)) if c.mark in marks else escape(c.text) for c in cells]


def html_marked(cells: Iterable[Cell]) -> list[str]:
    """The cells as HTML: each text escaped, then marked."""
    return marked(cells, HTML_MARKS)


def align_of(header: Sequence[str], left: Sequence[int] = (0,)) -> str:
    """'l' or 'r' per column: the columns at ``left`` left-aligned (text), the others right-aligned (numbers)."""
    return "".join("l" if i in left else "r" for i in range(len(header)))


def justify(align: str) -> str:
    """A column's 'l' or 'r' as rich's justify."""
    return "left" if align == "l" else "right"


def rich_table(title: str, **kw) -> Table:
    """The terminal's table: a rule under the header, no outer border. Its title and caption are text, never markup
    (a caption names the model, the data set, classes)."""
    from rich.text import Text

    if isinstance(kw.get("caption"), str):
        kw["caption"] = Text(visible_controls(kw["caption"]))
    title = Text(visible_controls(title)) if isinstance(title, str) else title
    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, **kw)


def plain_row(row: Sequence[str]) -> list[str]:
    """A row of plain texts (layers, classes, numbers) as rich cells: shown as written, never read as markup."""
    return [rich_text(c) for c in row]


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> list[str]:
    """A GitHub-flavoured Markdown table; ``align`` per column, 'l' or 'r' (default: first left, rest right)."""
    align = align or align_of(header)
    marks = {"l": ":---", "r": "---:"}
    return [
        "| " + " | ".join(map(_one_line, header)) + " |",
        "| " + " | ".join(marks[a] for a in align) + " |",
        *("| " + " | ".join(map(_one_line, r)) + " |" for r in rows),
    ]


def _one_line(cell: str) -> str:
    """A Markdown cell kept on its row: a line break would end the table (cells' texts are escaped by ``md_text``;
    this guards the row even where a cell was built another way)."""
    return " ".join(str(cell).splitlines())


def html_table(header: Sequence[str] | None, rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> str:
    """An HTML table of cells already written as HTML (the header is escaped here); ``align`` per column, 'r'
    for a number (right-aligned, tabular digits; default: every column left)."""
    align = align or "l" * max(len(header or ()), max((len(r) for r in rows), default=0))
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header) if header else ""
    body = []
    for r in rows:
        cells = "".join(f'<td class="num">{c}</td>' if a == "r" else f"<td>{c}</td>" for c, a in zip(r, align))
        body.append(f"<tr>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"
