"""Bootstrap intervals in the audit's tables (docs/metrics.md, "Intervals"): a ``95% CI`` column after each
higher-is-better metric that has one, and the table of each method's paired difference from ``laya``.

Rows are the JSON's method dicts: ``ci_level``, ``ci`` (metric -> ci_low, ci_high, n_defined) and ``vs_laya``
(metric -> difference, ci_low, ci_high, n_defined).
"""

from __future__ import annotations

from collections.abc import Sequence

from .cells import Cell, Column, column_format, difference_cell, fmt

# the metrics of the paired-difference table, with their short headers
VS_LAYA = {
    "faithfulness": "faithfulness",
    "deletion@1": "deletion@1",
    "deletion@1_normalised": "normalised",
    "aopc": "aopc",
    "sufficiency@1": "suff@1",
}


def level_of(rows: dict[str, dict]) -> float | None:
    return next((r["ci_level"] for r in rows.values() if r.get("ci_level")), None)


def ci_header(level: float) -> str:
    return f"{level * 100:g}% CI"


def interval_columns(columns: Sequence[Column], rows: dict[str, dict]) -> list[Column]:
    """``columns``, each higher-is-better one that some row has an interval of followed by its CI column."""
    level = level_of(rows)
    if level is None:
        return list(columns)
    held = {k for r in rows.values() for k in (r.get("ci") or {})}
    out = []
    for c in columns:
        out.append(c)
        if c.best and c.kind == "value" and c.key in held:
            out.append(Column(ci_header(level), c.key, c.spec, kind="ci"))
    return out


def ci_text(block: dict | None, spec: str = "{:.3f}") -> str:
    """'[low, high]', or '—' without an interval."""
    if not block or block.get("ci_low") is None or block.get("ci_high") is None:
        return "—"
    return f"[{fmt(block['ci_low'], spec)}, {fmt(block['ci_high'], spec)}]"


def ci_cell(row: dict, column: Column) -> Cell:
    return Cell(ci_text((row.get("ci") or {}).get(column.key), column.spec))


# the metrics of the default table, and those each ``--metrics`` group adds
SHOWN = ("faithfulness", "deletion@1", "deletion@1_normalised")
GROUPS = {"aopc": ("aopc",), "sufficiency": ("sufficiency@1",)}


def vs_laya_rows(rows: dict[str, dict], groups: Sequence[str] = ()) -> tuple[list[str], list[list[Cell]]]:
    """The paired differences from ``laya`` of the metrics shown (the default ones and those of the ``--metrics``
    ``groups``): a header (difference and CI per metric) and one row per method that has them; a difference
    whose interval excludes 0 is marked (``sig``: a leading star, never a colour). Each metric's numbers share one
    format, sized on every method's difference and bounds (``column_format``)."""
    shown = {*SHOWN, *(m for g in groups for m in GROUPS.get(g, ()))}
    metrics = [m for m in VS_LAYA if m in shown and any(m in (r.get("vs_laya") or {}) for r in rows.values())]
    level = level_of(rows) or 0.95
    header = ["method"] + [h for m in metrics for h in (f"Δ {VS_LAYA[m]}", ci_header(level))]
    # a reference (the effect computed another way: auditing/verdict.py) is a check of the audit, not a rival
    listed = {name: row["vs_laya"] for name, row in rows.items() if row.get("vs_laya") and not row.get("reference")}
    specs = {
        m: column_format(
            ((vs.get(m) or {}).get("difference"), (vs.get(m) or {}).get("ci_low"), (vs.get(m) or {}).get("ci_high"))
            for vs in listed.values()
        )
        for m in metrics
    }
    body = []
    for name, vs in listed.items():
        cells = [Cell(name)]
        for m in metrics:
            b, spec = vs.get(m) or {}, specs[m]
            cells += [difference_cell(fmt(b.get("difference"), spec), b.get("ci_low"), b.get("ci_high"))]
            cells.append(Cell(ci_text(b, spec)))
        body.append(cells)
    return header, body
