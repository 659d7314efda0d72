"""``laya export``'s table for the terminal: the classes whose attention shifts most between correct and
incorrect predictions (report.html has the full ranking)."""

from __future__ import annotations

from rich.table import Table


def shift_table(exp, limit: int = 20) -> Table:
    """A rich table of the JS ranking (the top ``limit`` classes)."""
    table = Table(
        title="Attention shift: correct vs incorrect predictions (JS divergence, base 2)", title_justify="left"
    )
    for col, kw in (
        ("rank", {"justify": "right"}),
        ("class", {}),
        ("JS div", {"justify": "right"}),
        ("n correct", {"justify": "right"}),
        ("n incorrect", {"justify": "right"}),
        ("most shifted layer (Δ mean α)", {}),
    ):
        table.add_column(col, **kw)
    shown = exp.shift.head(limit) if exp.shift is not None else []
    for r in shown.itertuples(index=False) if len(shown) else []:
        defined = r.js_divergence == r.js_divergence
        table.add_row(
            str(r.rank),
            str(r.class_name),
            f"{r.js_divergence:.4f}" if defined else "n/a",
            str(r.n_correct),
            str(r.n_incorrect),
            f"{r.most_shifted_layer} ({r.shift:+.3f})" if defined else "—",
        )
    if exp.shift is not None and len(exp.shift) > limit:
        table.caption = f"… {len(exp.shift) - limit} more classes in attention_shift.csv"
    return table
