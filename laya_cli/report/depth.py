"""``laya depth``'s tables, for the terminal, Markdown and report.html: accuracy and compute when the model is
cut after each tap, the early-exit operating points and the minimal sufficient depth per class.

Each table is built once, as its header and rows of text, from the JSON dict of
``depthing.analysis.DepthResult.to_dict()`` (so export's report can show an attached ``laya depth --json``), and
written in the three forms with the same text columns left-aligned. ``truncate_line`` is what ``--truncate K`` prints.
"""

from __future__ import annotations

import html

from rich.table import Table

from .cells import align_of, fmt, html_table, justify, md_table, plain_row, rich_table
from .inert import md_text
from .notes import docs_page, labelled

TRUNCATION_LEFT, EXIT_LEFT = (1,), (0, 1)  # the text columns: the layer; the operating point and the policy


def human_flops(f) -> str:
    if f is None:
        return "n/a"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if f >= div:
            return f"{f / div:.3g} {unit}"
    return f"{f:.0f}"


def _pct(v, spec: str = "{:.1f} %") -> str:
    return fmt(None if v is None else 100 * v, spec)


def _pp(v) -> str:
    return fmt(None if v is None else 100 * v, "{:+.2f}")


def seconds_per_image(v) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1e6:.1f} µs" if v < 1e-3 else f"{v * 1e3:.2f} ms"


def seconds_text(v, interval=None) -> str:
    """A median time per image with its interval over the rounds: '14.4 µs (12.1–20.3)'; the median alone without
    one (under 3 rounds)."""
    text = seconds_per_image(v)
    if v is None or not interval:
        return text
    scale, unit = (1e6, "µs") if v < 1e-3 else (1e3, "ms")
    digits = 1 if unit == "µs" else 2
    return f"{text} ({interval[0] * scale:.{digits}f}–{interval[1] * scale:.{digits}f})"


def _short_pct(v: float) -> str:
    return f"{100 * v:.1f}" if 100 * v < 10 else f"{100 * v:.0f}"


def fraction_text(value, interval=None) -> str:
    """A time fraction of the whole model, median over the rounds with its interval: '62.1 % (58.0–66.3)'; where the
    interval is too wide to tell (``value`` None, the rounds' ``interval`` kept) 'noisy (33–158 %)'."""
    if value is None:
        return f"noisy ({_short_pct(interval[0])}–{_short_pct(interval[1])} %)" if interval else "n/a"
    text = _pct(value)
    return f"{text} ({100 * interval[0]:.1f}–{100 * interval[1]:.1f})" if interval else text


def depth_table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the truncation table (one row per depth k)."""
    refit = any("refit_accuracy" in r for r in doc["truncation"])
    timed = doc["compute"].get("seconds_per_image") is not None
    header = ["k", "layer", "accuracy", "Δ pp", "macro-F1", "FLOPs/img", "block FLOPs", "FLOPs %"]
    header += ["time/img", "time %"] if timed else []
    header += ["refit acc.", "refit Δ pp"] if refit else []
    rows = []
    for r in doc["truncation"]:
        row = [
            str(r["k"]),
            r["layer"],
            fmt(r["accuracy"], "{:.4f}"),
            _pp(r["delta"]),
            fmt(r["macro_f1"], "{:.4f}"),
            human_flops(r["flops"]),
            human_flops(r["flops_block"]),
            _pct(r["flops_fraction"]),
        ]
        if timed:
            row += [
                seconds_text(r["seconds_per_image"], r.get("seconds_range")),
                fraction_text(r["time_fraction"], r.get("time_fraction_range")),
            ]
        if refit:
            row += [fmt(r.get("refit_accuracy"), "{:.4f}"), _pp(r.get("refit_delta"))]
        rows.append(row)
    return header, rows


EXIT_HEADER = [
    "operating point",
    "policy",
    "threshold",
    "accuracy",
    "Δ pp",
    "mean depth",
    "FLOPs %",
    "FLOPs saved",
    "time %",
]


def _exit_row(point: str, policy: str, threshold: str, p: dict) -> list[str]:
    return [
        point,
        policy,
        threshold,
        f"{p['accuracy']:.4f}",
        _pp(p["delta"]),
        f"{p['mean_depth']:.2f}",
        _pct(p["flops_fraction"]),
        _pct(1 - p["flops_fraction"]),
        _pct(p["time_fraction"]),
    ]


def depth_exit_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The early-exit operating points (cheapest within 1 pp and 0.5 pp, per policy) and the oracle."""
    rows = []
    ops = (doc.get("early_exit") or {}).get("operating_points", {})
    for name, op in ops.items():
        for policy, p in op["by_policy"].items():
            if p is None:
                rows.append([f"within {name}", policy, "none", "", "", "", "", "", ""])
                continue
            mark = " (best)" if op["best"] is not None and p == op["best"] else ""
            rows.append(_exit_row(f"within {name}{mark}", policy, f"{p['threshold']:g}", p))
    o = doc["oracle"]  # every sample exits where its prediction first equals the full model's: its accuracy
    oracle = {**o, "accuracy": doc["full"]["accuracy"], "delta": 0.0}
    rows.append(_exit_row("oracle (minimal sufficient depth)", o["source"], "—", oracle))
    if doc["compute"].get("time_noisy"):  # the times were too noisy for a fraction: say so, not "n/a"
        rows = [[*r[:-1], "noisy" if r[-1] == "n/a" else r[-1]] for r in rows]
    return EXIT_HEADER, rows


def depth_class_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Per true class (then all), how many samples' prediction first equals the full model's at depth k."""
    o = doc["oracle"]
    header = ["class", *[f"k={k}" for k in range(1, len(doc["layers"]) + 1)]]
    rows = [[c, *map(str, h)] for c, h in o["by_class"].items()] + [["all", *map(str, o["histogram"])]]
    return header, rows


def md_rows(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """A table of plain texts (class names among them) as Markdown cells."""
    return header, [[md_text(c) for c in r] for r in rows]


def depth_caption(doc: dict) -> str:
    c = doc["compute"]
    return (
        f"{doc['n_samples']:,} samples, {doc['head']} head, full model accuracy {doc['full']['accuracy']:.4f}; "
        f"accuracy at k: α masked above k and renormalised; FLOPs % of the whole backbone "
        f"({human_flops(c['flops_full_model'])} FLOPs/img){timing_caption(c)}"
    )


def timing_caption(c: dict) -> str:
    """How the times were measured, the one measurement the time % divides by, and whether they say anything."""
    if c.get("seconds_per_image") is None:
        return ""
    n = c["time_repeats"]
    whole = seconds_text(c["seconds_full_model"], c.get("seconds_full_model_range"))
    spread = "(interval of the median over the rounds)" if n >= 3 else "(under 3 rounds: single timings, no interval)"
    text = (
        f"; time: median of {n} rounds of {c['time_batch']} images on {c['device']} {spread}, each round timing "
        f"every depth and the whole backbone in turn; time % = a depth's time ÷ the whole backbone's in the same "
        f"round, median over the rounds (the whole backbone: {whole} per image)"
    )
    if c.get("time_noisy"):
        text += (
            "; 'noisy': that depth's time % is too noisy to tell on this machine (its interval is wider than 20 "
            "points), so no ratio is given: rerun on an idle machine or with more --time-repeats"
        )
    return text


def exit_title(doc: dict) -> str:
    return f"Early exit ({doc['early_exit']['source']} predictions)"


def rows_table(title: str, header: list[str], rows: list[list[str]], left, **kw) -> Table:
    table = rich_table(title, **kw)
    for h, a in zip(header, align_of(header, left)):
        table.add_column(h, justify=justify(a))
    for r in rows:
        table.add_row(*plain_row(r))
    return table


def depth_rich_tables(doc: dict) -> list:
    out = [rows_table("laya depth: truncation", *depth_table_rows(doc), TRUNCATION_LEFT, caption=depth_caption(doc))]
    if doc.get("early_exit"):
        title = (
            f"laya depth: early exit ({doc['early_exit']['source']} predictions; "
            f"cheapest operating points of the threshold sweep)"
        )
        out.append(rows_table(title, *depth_exit_rows(doc), EXIT_LEFT))
    return out


def depth_markdown(doc: dict, title: str = "laya depth") -> str:
    header, rows = depth_table_rows(doc)
    lines = [
        f"## {title}",
        "",
        depth_caption(doc) + ".",
        "",
        *md_table(header, rows, align_of(header, TRUNCATION_LEFT)),
    ]
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        lines += ["", f"### {exit_title(doc)}", "", *md_table(header, rows, align_of(header, EXIT_LEFT))]
    lines += [
        "",
        "### Minimal sufficient depth per class (samples whose prediction first equals the full model's at k)",
        "",
        *md_table(*md_rows(*depth_class_rows(doc))),
    ]
    for note in doc.get("notes", []):
        lines += ["", f"> {md_text(labelled(note))}"]
    return "\n".join(lines) + "\n"


def depth_section(doc: dict, figure_html: str = "") -> str:
    """The ``laya depth`` section of report.html, from the depth JSON (docs/depth.md)."""
    e = html.escape
    parts = [f'<p class="sub">{e(depth_caption(doc))}. Definitions: {e(docs_page("depth.md"))}.</p>', figure_html]
    header, rows = depth_table_rows(doc)
    parts.append(html_table(header, [[e(c) for c in r] for r in rows], align_of(header, TRUNCATION_LEFT)))
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        parts.append(f"<h3>{e(exit_title(doc))}: the cheapest operating points of the threshold sweep</h3>")
        parts.append(html_table(header, [[e(c) for c in r] for r in rows], align_of(header, EXIT_LEFT)))
    header, rows = depth_class_rows(doc)
    parts.append(
        "<h3>Minimal sufficient depth per class</h3><p>Samples whose prediction first equals the full "
        "model's at depth k, per true class.</p>"
    )
    body = [[e(c) for c in r] for r in rows[:-1]] + [["<b>all</b>", *map(e, rows[-1][1:])]]
    parts.append(html_table(header, body, align_of(header)))
    for note in doc.get("notes", []):
        parts.append(f'<p class="note">{e(str(note))}</p>')
    return "\n".join(p for p in parts if p)


def truncate_line(res) -> str:
    return (
        f"truncated after {res.layer} (tap {res.k}, {res.head} head): accuracy {res.accuracy:.4f} "
        f"(full {res.full_accuracy:.4f}, {100 * (res.accuracy - res.full_accuracy):+.2f} pp), backbone "
        f"{res.parameters:,} of {res.parameters_full:,} parameters, {100 * res.flops_fraction:.1f} % of its FLOPs "
        f"-> {res.out}"
    )
