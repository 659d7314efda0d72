"""Tables of ``--task lm`` figures: per layer, the logit and tuned lenses' KL to the model's final next-token
distribution and cross-entropy (bits per token, the tuned lens paper's measures), LAYA's mean α; then the heads."""

from __future__ import annotations

from collections.abc import Sequence

from .cells import md_table, rich_table

HEADER = ("layer", "logit lens KL", "logit lens CE", "tuned lens KL", "tuned lens CE", "laya mean α")


def lm_rows(metrics: dict, layers: Sequence[str]) -> list[list[str]]:
    rows = [
        [f"{i + 1} {name}"]
        + [f"{r[k]:.4f}" for k in ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce")]
        + [f"{r['alpha']:.3f}"]
        for i, (name, r) in enumerate(zip(layers, metrics["layers"]))
    ]
    heads = metrics["heads"]
    rows.append(["laya (head)", f"{heads['laya']['kl']:.4f}", f"{heads['laya']['ce']:.4f}", "", "", "1.000"])
    rows.append(["last (the model)", "0.0000", f"{heads['last']['ce']:.4f}", "", "", ""])
    return rows


def caption(metrics: dict) -> str:
    return f"held-out, {metrics['tokens']:,} positions; KL to the model's final distribution and CE, bits per token"


def lm_layers_table(metrics: dict, layers: Sequence[str]):
    table = rich_table("language model: layers and heads", caption=caption(metrics))
    for i, name in enumerate(HEADER):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in lm_rows(metrics, layers):
        table.add_row(*row)
    return table


def lm_markdown(metrics: dict, layers: Sequence[str]) -> str:
    return "\n".join([caption(metrics), ""] + md_table(HEADER, lm_rows(metrics, layers))) + "\n"


def lm_info_panel(summary: dict, path):
    """``laya info`` of a ``--task lm`` checkpoint: what it was trained on, then the layers-and-heads table."""
    from rich.console import Group
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    b, d, h = summary["backbone"], summary["dataset"], summary["head"]
    text = b.get("text") or {}
    rows = [
        ("task", f"language model (next token at every position), objective {d.get('objective')}"),
        ("backbone", f"{b['name']}  sha256 {(b.get('weights_sha256') or '')[:16]} (frozen)"),
        ("layers", f"{len(summary['layers'])}: " + ", ".join(summary["layers"])),
        ("heads", f"{h['kind']}  " + "  ".join(f"{k}={v}" for k, v in h["config"].items()) + "; tuned lens"),
        ("text", f"{d['name']}, blocks of {d.get('block_size')} tokens, tokenizer: {text.get('source')}"),
        ("epochs", str(summary["epochs"])),
    ]
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/]", escape(str(value)))
    return Panel(Group(grid, lm_layers_table(summary["metrics"], summary["layers"])), title=escape(str(path)))
