"""Rich display in Jupyter (docs/api.md, "In a notebook"): what ``AuditResult``, ``DepthResult``, ``DiffResult``
and ``Export`` show as their ``_repr_html_`` and their plain-text ``__repr__``.

Both come from the same cells as the terminal, Markdown and report.html (``cells``; the tables of ``audit``,
``depth``, ``diff`` and ``html``): the text is the terminal's rich tables written without colour at a width
that fits a terminal (``text_width``), the HTML is report.html's tables with its marks and intervals, and the
class × layer picture (``figures.plot_heatmap``) is embedded as a base64 PNG, so the cell output is
self-contained (a saved notebook shows it offline, as GitHub renders it).
"""

from __future__ import annotations

import base64
import html
import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .cells import fmt, html_marked, html_table
from .notes import labelled

_CSS = (
    "<style>.laya-result{font-family:-apple-system,'Segoe UI',Roboto,Arial,sans-serif;color:#222;line-height:1.4}"
    ".laya-result h3{margin:.2em 0 .1em}.laya-result h4{margin:.9em 0 .2em}.laya-result .sub{color:#666;margin:0}"
    ".laya-result table{border-collapse:collapse;margin:.5em 0;font-size:.9em}"
    ".laya-result th,.laya-result td{border:1px solid #ddd;padding:.2em .55em;text-align:left}"
    ".laya-result th{background:#f4f4f4}.laya-result td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".laya-result .best{font-weight:bold;color:#2a7d34}.laya-result .fail{color:#c62828;font-weight:bold}"
    ".laya-result .note{background:#fff8e1;border-left:4px solid #f0b400;padding:.3em .6em;margin:.3em 0}"
    ".laya-result img{max-width:min(100%,640px);height:auto}</style>"
)
TEXT_WIDTH = 100  # a terminal's width where none is known (a notebook's kernel has no terminal)


def text_width() -> int:
    """The width the plain text is written at: ``COLUMNS`` or the terminal's, at most 120, else 100."""
    if os.environ.get("COLUMNS", "").isdigit():
        return min(int(os.environ["COLUMNS"]), 120)
    return min(shutil.get_terminal_size((TEXT_WIDTH, 24)).columns, 120)


def plain_text(title: str, tables: Sequence, notes: Sequence[str] = ()) -> str:
    """The rich tables as plain text (no colour, no markup), under a title line, the notes after them."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=text_width(), color_system=None, force_terminal=False, force_jupyter=False)
    console.print(title, markup=False, highlight=False)
    for table in tables:
        console.print(table)
    for note in notes:
        console.print(labelled(note), markup=False, highlight=False)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip().splitlines())


def page(title: str, caption: str, parts: Sequence[str], notes: Sequence[str] = ()) -> str:
    """One cell's HTML: the title, its caption, the parts (tables, figures), the notes."""
    e = html.escape
    body = [f"<h3>{e(title)}</h3>", f'<p class="sub">{e(caption)}</p>', *parts]
    body += [f'<p class="note">{e(n)}</p>' for n in notes]
    return f'{_CSS}<div class="laya-result">{"".join(p for p in body if p)}</div>'


def png_img(draw, alt: str) -> str:
    """An ``<img>`` of the PNG that ``draw(path)`` writes (a ``figures`` function), as a base64 data URI; '' when
    matplotlib is missing (the tables still show)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "figure.png"
        draw(path)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}"></figure>'


def heatmap_img(matrix, rows: Sequence[str], layers: Sequence[str], title: str, label: str, **kw) -> str:
    """The class × layer picture (``figures.plot_heatmap``) as an inline PNG."""
    from .figures import plot_heatmap

    return png_img(lambda p: plot_heatmap(matrix, rows, layers, title, label, p, **kw), title)


def cells_table(header: Sequence[str], rows, align: str | None = None) -> str:
    return html_table(header, [html_marked(r) for r in rows], align or "l" + "r" * (len(header) - 1))


# --------------------------------------------------------------------------- laya audit


def merged_table(title: str, header: Sequence[str], rows, caption: str | None = None):
    """A table for a narrow screen from the same cells: each interval column (its header ends in "CI") written
    into the cell before it (``0.912 [0.885, 0.939]``); below about 95 columns a cell wraps before its interval
    rather than being cut."""
    from .cells import RICH_MARKS, Cell, marked, rich_table

    keep = [i for i, h in enumerate(header) if not (i and h.endswith("CI"))]
    heads = [header[i] + (f" [{header[i + 1]}]" if i + 1 < len(header) and i + 1 not in keep else "") for i in keep]
    table = rich_table(title, caption=caption, caption_justify="left")
    for i, h in enumerate(heads):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0, style="bold" if i == 0 else None)
    for row in rows:
        merged = [
            Cell(row[i].text + (f" {row[i + 1].text}" if i + 1 < len(row) and i + 1 not in keep else ""), row[i].mark)
            for i in keep
        ]
        table.add_row(*marked(merged, RICH_MARKS))
    return table


def audit_tables(result) -> list:
    """The audit's main table (without the oracle and random columns: the normalised Deletion@1 holds them) and
    the paired differences from laya, intervals merged into their values."""
    from .audit import AUDIT_COLUMNS, VS_LAYA_CAPTION, method_cells
    from .cells import Cell
    from .intervals import interval_columns, vs_laya_rows

    rows = {m: s.to_dict() for m, s in result.methods.items()}
    if not rows:
        return []
    shown = [c for c in AUDIT_COLUMNS if c.key not in ("deletion@1_oracle", "deletion@1_random")]
    columns = interval_columns(shown, rows)
    body = [[Cell(name), *cells] for name, cells in method_cells(rows, columns, None).items()]
    tables = [merged_table("laya audit", ["method", *(c.header for c in columns)], body)]
    header, paired = vs_laya_rows(rows)
    if paired:
        tables.append(merged_table("paired difference from laya", header, paired, VS_LAYA_CAPTION))
    return tables


def audit_text(result) -> str:
    from .audit import audit_caption, audit_class_tables

    tables = audit_tables(result) + audit_class_tables(result)
    return plain_text(f"AuditResult · {audit_caption(result)}", tables, result.notes)


def audit_html(result) -> str:
    from .audit import CLASS_TABLES, VS_LAYA_CAPTION, audit_caption, class_caption, class_rows, html_methods_table
    from .intervals import vs_laya_rows

    doc = {m: s.to_dict() for m, s in result.methods.items()}
    parts = [html_methods_table(doc, {})] if doc else []
    header, body = vs_laya_rows(doc)
    if body:
        caption = f'<p class="sub">{html.escape(VS_LAYA_CAPTION)}</p>'
        parts += ["<h4>Paired difference from laya</h4>", cells_table(header, body), caption]
    for key, _, title in CLASS_TABLES if result.by_class else ():
        header = ["class", "n", "accuracy", *result.methods]
        parts += [f"<h4>{html.escape(title)}</h4>", cells_table(header, class_rows(result, key))]
    if result.by_class and (caption := class_caption(result)):
        parts.append(f'<p class="sub">{html.escape(caption)}</p>')
    picture = result.class_layer()
    if picture is not None:
        matrix, names, what = picture
        parts.append(heatmap_img(matrix, names, result.layers, f"{what} by true class and layer", what))
    return page("laya audit", audit_caption(result), parts, result.notes)


# --------------------------------------------------------------------------- laya depth


def depth_text(doc: dict, kind: str = "layers") -> str:
    """A depth result's tables as plain text; ``kind``: what they hold (``DepthResult.kind``: layers, or tokens)."""
    return {"layers": _layer_depth_text, "tokens": _token_depth_text}[kind](doc)


def depth_html(doc: dict, kind: str = "layers") -> str:
    return {"layers": _layer_depth_html, "tokens": _token_depth_html}[kind](doc)


def _layer_depth_text(doc: dict) -> str:
    from .depth import depth_caption, depth_rich_tables

    return plain_text(f"DepthResult · {depth_caption(doc)}", depth_rich_tables(doc), doc.get("notes", []))


def _token_depth_text(doc: dict) -> str:
    """A language model's early exit per token: the terminal's tables, the lens note."""
    from .lm import exit_rich_tables

    notes = [doc["lens_note"]] if doc.get("lens_note") else []
    return plain_text(f"DepthResult · early exit per token · {doc['tokens']:,} positions", exit_rich_tables(doc), notes)


def _token_depth_html(doc: dict) -> str:
    """A language model's early exit per token: its tables (the terminal's, as text) under the caption."""
    from .lm import exit_caption

    return page("laya depth", exit_caption(doc), [f"<pre>{html.escape(_token_depth_text(doc))}</pre>"])


def _layer_depth_html(doc: dict) -> str:
    from .depth import depth_section
    from .figures import plot_depth

    figure = png_img(lambda p: plot_depth(doc, p), "accuracy against compute per depth")
    return page("laya depth", f"{doc.get('n_samples', 0):,} samples", [depth_section(doc, figure)])


# --------------------------------------------------------------------------- laya diff


def diff_text(doc: dict, kind: str = "classes") -> str:
    """A diff's tables as plain text; ``kind``: what they hold (``DiffResult.kind``: classes, or tokens)."""
    from .diff import diff_rich_tables, lm_diff_rich_tables

    tables = {"classes": diff_rich_tables, "tokens": lm_diff_rich_tables}[kind]
    return plain_text("DiffResult", tables(doc))


def diff_html(doc: dict, kind: str = "classes") -> str:
    return {"classes": _class_diff_html, "tokens": _token_diff_html}[kind](doc)


def _token_diff_html(doc: dict) -> str:
    """Two language models' diff: its tables (the terminal's, as text: per method, layer and position)."""
    from html import escape

    from .diff import lm_summary_line

    return page("laya diff", lm_summary_line(doc), [f"<pre>{escape(diff_text(doc, 'tokens'))}</pre>"])


def _class_diff_html(doc: dict) -> str:
    import numpy as np

    from .diff import CLASS_HEADER, LAYER_HEADER, class_rows, layer_rows, summary_line

    parts = [
        "<h4>Layer usage by class</h4>",
        cells_table(CLASS_HEADER, class_rows(doc)),
        "<h4>Per layer, all samples (B − A)</h4>",
        cells_table(LAYER_HEADER, layer_rows(doc["overall"]["layers"])),
    ]
    key = "alpha_change" if doc.get("profile") == "alpha" else "delta_change"
    names = list(doc["classes"])
    matrix = np.array(
        [[np.nan if r.get(key) is None else r[key] for r in doc["classes"][c]["layers"]] for c in names], float
    )
    if matrix.size and np.isfinite(matrix).any():
        top = float(np.nanmax(np.abs(matrix))) or 1.0
        what = "Δ mean α (B − A)" if key == "alpha_change" else "Δ mean LOLO effect (B − A)"
        parts.append(
            heatmap_img(matrix, names, doc["layers"], f"{what} by true class and layer", what, cmap="RdBu_r",
                        vmin=-top, vmax=top, fmt="{:+.2f}")
        )  # fmt: skip
    return page("laya diff", summary_line(doc), parts)


# --------------------------------------------------------------------------- laya export


def export_text(exp) -> str:
    """An export's summary line and table as plain text; what the table holds follows ``exp.kind`` (classes, or
    tokens)."""
    return {"classes": _class_export_text, "tokens": _token_export_text}[exp.kind](exp)


def export_html(exp) -> str:
    return {"classes": _class_export_html, "tokens": _token_export_html}[exp.kind](exp)


def _token_caption(exp) -> str:
    return (
        f"{exp.n:,} tokens in {exp.n_blocks:,} blocks · LAYA next-token accuracy {fmt(exp.accuracy, '{:.4f}')} · "
        f"{len(exp.layers)} layers" + (f" · written to {exp.out}" if exp.out else "")
    )


def _token_export_text(exp) -> str:
    """A language model's export: the caption and the mean α per layer."""
    from rich.text import Text

    from .cells import rich_table

    table = rich_table("mean α per layer")
    for column in ("layer", "mean α"):
        table.add_column(column, justify="right" if column == "mean α" else "left")
    for name, mean in zip(exp.layers, exp.mean_alpha):
        table.add_row(Text(name), fmt(mean, "{:.3f}"))  # a layer's name is text, never markup
    return plain_text(f"Export · {_token_caption(exp)}", [table], exp.notes)


def _token_export_html(exp) -> str:
    rows = [[html.escape(name), fmt(mean, "{:.3f}")] for name, mean in zip(exp.layers, exp.mean_alpha)]
    parts = ["<h4>Mean α per layer</h4>", html_table(["layer", "mean α"], rows, "lr")]
    return page("laya export", _token_caption(exp), parts, exp.notes)


def _class_export_text(exp) -> str:
    from .export import shift_table

    title = f"Export · {exp.n:,} samples · accuracy {fmt(exp.accuracy, '{:.4f}')} · {len(exp.layers)} layers"
    return plain_text(title + (f" · written to {exp.out}" if exp.out else ""), [shift_table(exp, 10)], exp.notes)


def _class_export_html(exp) -> str:
    from .html import _global_table, _shift_table

    parts = []
    if exp.profiles is not None and exp.has_alpha:
        names = [f"{c} (n={int(n):,})" for c, n in zip(exp.classes, exp.counts("all"))]
        parts.append(
            heatmap_img(exp.matrix("all"), names, exp.layers, "Mean layer attention α by true class", "mean α")
        )
    if exp.global_profile is not None and exp.has_alpha:
        parts += ["<h4>Mean α per layer</h4>", _global_table(exp)]
    if exp.shift is not None:
        parts += ["<h4>Attention shift: correct vs incorrect predictions</h4>", _shift_table(exp)]
    caption = f"{exp.n:,} samples · accuracy {fmt(exp.accuracy, '{:.4f}')} · {len(exp.layers)} layers"
    return page("laya export", caption + (f" · {exp.out}" if exp.out else ""), parts, exp.notes)
