"""``laya export``'s table for the terminal: the classes whose attention shifts most between correct and
incorrect predictions (report.html has the full ranking)."""

from __future__ import annotations

from rich.table import Table

from .html import js_text, rank_text
from .inert import rich_text


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
            rank_text(r.rank),
            rich_text(r.class_name),
            js_text(r.js_divergence),
            str(r.n_correct),
            str(r.n_incorrect),
            f"{rich_text(r.most_shifted_layer)} ({r.shift:+.3f})" if defined else "—",
        )
    ranked_from = getattr(exp, "shift_ranked_from", 0.0)
    caption = [f"ranked from {ranked_from:g} bits (about 12 % of the attention moved between two layers); — below"]
    if exp.shift is not None and len(exp.shift) > limit:
        caption.append(f"… {len(exp.shift) - limit} more classes in attention_shift.csv")
    table.caption = " · ".join(caption) if ranked_from else " · ".join(caption[1:]) or None
    return table
