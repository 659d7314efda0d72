"""``laya diff``'s tables (a ``DiffResult.to_dict()``): per class (size, accuracy A → B, the Jensen–Shannon
divergence of the layer profiles, its permutation p-value raw and corrected, changed or not) and per layer (mean
α, Δ and contrib under A and B, and the change), for the terminal and as Markdown for a pull-request comment."""

from __future__ import annotations

from rich.table import Table

from .cells import (
    EXCLUDES_0,
    EXCLUDES_0_LEGEND,
    MD_MARKS,
    RICH_MARKS,
    Cell,
    column_format,
    excludes_zero,
    fmt,
    interval_format,
    marked,
    md_table,
    p_clause,
    p_text,
    plain_row,
    rich_table,
)
from .inert import md_text

CLASS_HEADER = ["class", "n", "acc. A", "acc. B", "JS (bits)", "p", "p adj.", "changed"]
LAYER_HEADER = ["layer", "α A", "α B", "Δα", "LOLO Δ A", "LOLO Δ B", "change", "contrib A", "contrib B", "change"]


def changed_text(c: dict) -> str:
    """'yes'; 'small' for a significant change under the practical size (--min-js); 'no'."""
    if c["changed"]:
        return "yes"
    return "small" if c.get("significant", c["changed"]) else "no"


def class_rows(doc: dict) -> list[list[Cell]]:
    rows = []
    for name, c in doc["classes"].items():
        mark = "flag" if c["changed"] else None
        rows.append(
            [
                Cell(name),
                Cell(str(c["n"])),
                Cell(fmt(c["accuracy_a"])),
                Cell(fmt(c["accuracy_b"])),
                Cell(fmt(c["js"], "{:.4f}")),
                Cell(p_text(c["p_value"])),
                Cell(p_text(c["p_adjusted"])),
                Cell(changed_text(c), mark),
            ]
        )
    return rows


def layer_rows(layers: list[dict]) -> list[list[Cell]]:
    rows = []
    for r in layers:
        cells = [Cell(r["layer"])]
        for q in ("alpha", "delta", "contrib"):
            cells += [Cell(fmt(r[f"{q}_a"])), Cell(fmt(r[f"{q}_b"])), Cell(fmt(r[f"{q}_change"], "{:+.3f}"))]
        rows.append(cells)
    return rows


def summary_line(doc: dict) -> str:
    s, acc = doc["settings"], doc["accuracy"]
    changed = doc["changed_classes"]
    return (
        f"{s['model_a']} → {s['model_b']} · {doc['n_samples']:,} samples of {s.get('dataset')} · accuracy "
        f"{acc['a']:.4f} → {acc['b']:.4f} ({acc['change']:+.4f}; McNemar exact {p_clause(acc['p_value'])}, "
        f"{acc['a_only']} right only under A, {acc['b_only']} only under B) · layer profile ({doc['profile']}) "
        f"JS {doc['overall']['js']:.4f} bits, permutation {p_clause(doc['overall']['p_value'])} · "
        f"LOLO Δ at {s.get('scope', 'head')} scope ({s.get('ablation', 'mean')} removal) · "
        f"{len(changed)} of {len(doc['classes'])} classes changed their layer usage: "
        f"{s['correction']}-corrected p below {s['alpha']:g} ({s['permutations']} permutations){_size_rule(s)}"
    )


def _size_rule(s: dict) -> str:
    """' and JS at least 0.01 bits (--min-js; "small": significant, under it)'; '' for a diff from before the
    practical size (its JSON has no min_js) or with --min-js 0."""
    if not s.get("min_js"):
        return ""
    return f" and JS at least {s['min_js']:g} bits (--min-js; small: significant, but under it)"


def diff_rich_tables(doc: dict) -> list[Table]:
    classes = rich_table("laya diff: layer usage by class", caption=summary_line(doc), caption_justify="left")
    for i, h in enumerate(CLASS_HEADER):
        classes.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in class_rows(doc):
        classes.add_row(*marked(row, RICH_MARKS))
    layers = rich_table("laya diff: per layer, all samples (B − A)")
    for i, h in enumerate(LAYER_HEADER):
        layers.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in layer_rows(doc["overall"]["layers"]):
        layers.add_row(*marked(row, RICH_MARKS))
    return [classes, layers]


def diff_markdown(doc: dict) -> str:
    lines = [
        "### laya diff",
        "",
        f"_{md_text(summary_line(doc))}_",
        "",
        *md_table(CLASS_HEADER, [marked(r, MD_MARKS) for r in class_rows(doc)]),
        "",
        "#### Per layer, all samples",
        "",
        *md_table(LAYER_HEADER, [marked(r, MD_MARKS) for r in layer_rows(doc["overall"]["layers"])]),
    ]
    changed = doc["changed_classes"]
    if changed:
        lines += ["", "<details><summary>Per layer, for each class that changed</summary>", ""]
        for name in changed:
            body = [marked(r, MD_MARKS) for r in layer_rows(doc["classes"][name]["layers"])]
            lines += [f"**{name}**", "", *md_table(LAYER_HEADER, body), ""]
        lines += ["</details>"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- two language models (--task lm)

LM_METRICS = (("faithfulness", "faithfulness"), ("deletion@1", "Deletion@1"), ("deletion@1_normalised", "D@1 norm."))
LM_METHOD_HEADER = ["scope", "method"] + [f"{t} {w}" for _, t in LM_METRICS for w in ("A", "B", "B − A")]
LM_LAYER_HEADER = ["scope", "layer", "α A", "α B", "Δα", "LOLO Δ A", "LOLO Δ B", "change"]


def _change(block: dict | None, spec: str | None = None) -> str:
    """A change with its paired interval: +0.012 [−0.004, +0.027], led by a star where the interval excludes 0
    ("* +0.027 [+0.004, +0.051]"); ``spec``: the column's format (default: sized on this change alone)."""
    if block is None or block.get("change") is None:
        return "n/a"
    low, high = block.get("ci_low"), block.get("ci_high")
    if low is None or high is None:
        return fmt(block["change"], spec or "{:+.3f}")
    spec = spec or interval_format(block["change"], low, high)
    star = f"{EXCLUDES_0} " if excludes_zero(low, high) else ""
    return f"{star}{spec.format(block['change'])} [{spec.format(low)}, {spec.format(high)}]"


def lm_method_rows(doc: dict) -> list[list[str]]:
    """Per scope and method, each metric under A and B and the change with its interval; each change column in one
    format (``column_format`` over every row's change and bounds)."""
    listed = [(scope, method, metrics) for scope, block in doc["scopes"].items() for method, metrics in
              block["methods"].items()]  # fmt: skip
    specs = {
        key: column_format(
            (m.get("change"), m.get("ci_low"), m.get("ci_high")) for _, _, ms in listed if (m := ms.get(key))
        )
        for key, _ in LM_METRICS
    }
    rows = []
    for scope, method, metrics in listed:
        row = [scope, method]
        for key, _ in LM_METRICS:
            m = metrics.get(key)
            row += [fmt(None if m is None else m["a"]), fmt(None if m is None else m["b"]), _change(m, specs[key])]
        rows.append(row)
    return rows


def lm_layer_rows(doc: dict) -> list[list[str]]:
    rows = []
    for scope, block in doc["scopes"].items():
        for r in block["layers"]:
            row = [scope, r["layer"]]
            for q in ("alpha", "delta"):
                row += [fmt(r[f"{q}_a"]), fmt(r[f"{q}_b"]), fmt(r[f"{q}_change"], "{:+.3f}")]
            rows.append(row)
    return rows


def lm_position_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The change of mean faithfulness per method and scope in ranges of the position in the block."""
    first = next(iter(doc["by_position"].values()))
    header = ["scope", "method"] + [f"t {p} ({n:,} positions)" for p, n in zip(first["positions"], first["n"])]
    rows = [
        [scope, m] + [fmt(v, "{:+.3f}") for v in values]  # the means over the positions whose ρ is defined
        for scope, block in doc["by_position"].items()
        for m, values in block["methods"].items()
    ]
    return header, rows


def lm_summary_line(doc: dict) -> str:
    s, acc = doc["settings"], doc["accuracy"]
    model = "the same model" if s.get("same_model") else "different model weights"
    return (
        f"{s['model_a']} → {s['model_b']} ({model}) · {doc['n_samples']:,} held-out positions of {s['dataset']}, "
        f"each a sample in both · top-1 next-token accuracy {acc['a']:.4f} → {acc['b']:.4f} ({acc['change']:+.4f}; "
        f"McNemar exact {p_clause(acc['p_value'])}) · B − A with its paired {100 * s['ci']:g} % bootstrap interval "
        f"over the positions ({s['bootstrap']} resamples); {EXCLUDES_0_LEGEND}"
    )


def _lm_table(title: str, header: list[str], rows: list[list[str]], caption: str | None = None) -> Table:
    table = rich_table(title, caption=caption, caption_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*plain_row(row))
    return table


def lm_diff_rich_tables(doc: dict) -> list[Table]:
    return [
        _lm_table(
            "laya diff: per-token faithfulness (B − A)", LM_METHOD_HEADER, lm_method_rows(doc), lm_summary_line(doc)
        ),  # fmt: skip
        _lm_table("laya diff: per layer (B − A)", LM_LAYER_HEADER, lm_layer_rows(doc)),
        _lm_table("laya diff: faithfulness change by position in the block", *lm_position_rows(doc)),
    ]


def lm_diff_markdown(doc: dict) -> str:
    lines = ["### laya diff (language models)", "", f"_{md_text(lm_summary_line(doc))}_", ""]
    lines += md_table(LM_METHOD_HEADER, lm_method_rows(doc))
    lines += ["", "#### Per layer", "", *md_table(LM_LAYER_HEADER, lm_layer_rows(doc))]
    lines += ["", "#### Faithfulness change by position in the block", "", *md_table(*lm_position_rows(doc))]
    return "\n".join(lines) + "\n"
