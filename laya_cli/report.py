"""Rendering results for people: rich tables for the terminal, Markdown for CI summaries."""

from __future__ import annotations

import math

from rich import box
from rich.table import Table

# --- audit
# Methods as rows, metrics as columns; the best value of each "higher is better" column is
# highlighted (bold green in the terminal, **bold** in Markdown). Undefined values read "n/a".

AUDIT_COLUMNS = [  # (header, key in MethodScores.to_dict(), format, highlight the best)
    ("faithfulness", "faithfulness", "{:.3f}", True),
    ("± std", "faithfulness_std", "{:.3f}", False),
    ("undef.", "undefined", "{:d}", False),
    ("deletion@1", "deletion@1", "{:.3f}", True),
    ("oracle", "deletion@1_oracle", "{:.3f}", False),
    ("random", "deletion@1_random", "{:.3f}", False),
    ("normalised", "deletion@1_normalised", "{:.3f}", True),
]


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return spec.format(value)


def _best(rows: dict[str, dict], key: str) -> float | None:
    values = [r[key] for r in rows.values() if r.get("available", True) and isinstance(r.get(key), (int, float))
              and not math.isnan(r[key])]
    return max(values) if values else None


def audit_caption(result) -> str:
    s = result.settings
    parts = [
        f"{result.n_samples} samples" + (f" of {s['dataset']}" if s.get("dataset") else ""),
        f"accuracy {_fmt(result.accuracy, '{:.4f}')}",
        f"{s.get('head', '?')} head, {len(result.layers)} layers",
        f"target {s['target']}", f"ablation {s['ablation']}", f"reduce {s['reduce']}", f"IG steps {s['steps']}",
    ]
    if s.get("internal_batch_size"):
        parts.append(f"IG internal batch {s['internal_batch_size']}")
    if s.get("model"):
        parts.insert(0, str(s["model"]))
    return " · ".join(parts)


def _method_rows(methods: dict) -> dict[str, dict]:
    return {m: (v.to_dict() if hasattr(v, "to_dict") else v) for m, v in methods.items()}


def audit_rich_table(result, title: str = "laya audit", methods: dict | None = None, caption: str | None = None) -> Table:
    """The audit table for the terminal (``methods`` overrides the rows, e.g. one class)."""
    rows = _method_rows(methods if methods is not None else result.methods)
    table = Table(title=title, caption=caption if caption is not None else audit_caption(result),
                  caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("method", style="bold", no_wrap=True)
    for header, *_ in AUDIT_COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    best = {key: _best(rows, key) for _, key, _, hi in AUDIT_COLUMNS if hi}
    for name, row in rows.items():
        cells = []
        for _, key, spec, hi in AUDIT_COLUMNS:
            text = _fmt(row.get(key), spec)
            if hi and row.get("available", True) and best.get(key) is not None and row.get(key) == best[key]:
                text = f"[bold green]{text}[/]"
            cells.append(text)
        table.add_row(name if row.get("available", True) else f"[dim]{name}[/]", *cells)
    return table


def audit_class_tables(result) -> list[Table]:
    """--by-class: faithfulness and Deletion@1 per class (classes as rows, methods as columns)."""
    if not result.by_class:
        return []
    methods = list(result.methods)
    tables = []
    for title, key in (("faithfulness by class", "faithfulness"), ("deletion@1 by class", "deletion@1")):
        table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        table.add_column("class", style="bold")
        table.add_column("n", justify="right", no_wrap=True)
        table.add_column("acc.", justify="right", no_wrap=True)
        for m in methods:
            table.add_column(m, justify="right", no_wrap=True)
        for name, cls in result.by_class.items():
            rows = _method_rows(cls.methods)
            best = _best(rows, key)
            cells = []
            for m in methods:
                text = _fmt(rows[m].get(key), "{:.3f}")
                if rows[m].get("available", True) and best is not None and rows[m].get(key) == best:
                    text = f"[bold green]{text}[/]"
                cells.append(text)
            table.add_row(name, str(cls.n), _fmt(cls.accuracy, "{:.3f}"), *cells)
        tables.append(table)
    return tables


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    marks = {"l": ":---", "r": "---:"}
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(marks[a] for a in align) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


def audit_markdown(result, misses: list[str] | None = None, title: str = "laya audit") -> str:
    """The same table as Markdown (GitHub-flavoured), e.g. for ``$GITHUB_STEP_SUMMARY``."""
    rows = _method_rows(result.methods)
    best = {key: _best(rows, key) for _, key, _, hi in AUDIT_COLUMNS if hi}
    body = []
    for name, row in rows.items():
        cells = [f"`{name}`"]
        for _, key, spec, hi in AUDIT_COLUMNS:
            text = _fmt(row.get(key), spec)
            if hi and row.get("available", True) and best.get(key) is not None and row.get(key) == best[key]:
                text = f"**{text}**"
            cells.append(text)
        body.append(cells)
    lines = [f"### {title}", "", *_md_table(["method", *(h for h, *_ in AUDIT_COLUMNS)], body,
                                            ["l"] + ["r"] * len(AUDIT_COLUMNS)), "", f"_{audit_caption(result)}_"]
    if result.by_class:
        methods = list(result.methods)
        for title_, key in (("Faithfulness by class", "faithfulness"), ("Deletion@1 by class", "deletion@1")):
            crow = []
            for name, cls in result.by_class.items():
                r = _method_rows(cls.methods)
                crow.append([name, str(cls.n), _fmt(cls.accuracy, "{:.3f}"),
                             *(_fmt(r[m].get(key), "{:.3f}") for m in methods)])
            lines += ["", f"#### {title_}", "",
                      *_md_table(["class", "n", "accuracy", *methods], crow, ["l"] + ["r"] * (2 + len(methods)))]
    if result.notes:
        lines += ["", *(f"- note: {n}" for n in result.notes)]
    if misses is not None:
        lines += ["", "**fail-under: missed**" if misses else "fail-under: all thresholds met"]
        lines += [f"- {m}" for m in misses]
    return "\n".join(lines) + "\n"
