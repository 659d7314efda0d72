"""``laya audit --scope network|both``: the network-scope method table (total effects) and, for ``both``, how
each method's layer ranking moves between the scopes and each layer's direct ÷ total effect (a ratio); for
the terminal, Markdown and report.html (docs/metrics.md, "Two scopes").
"""

from __future__ import annotations

import html

from rich.table import Table

from .audit import (
    AUDIT_COLUMNS,
    audit_caption,
    baseline_caption,
    closing_lines,
    compared_methods,
    html_methods_table,
    md_methods_table,
    method_rows,
)
from .cells import fmt, html_table, md_table, plain_row, rich_table
from .inert import md_text

NETWORK_TITLE = "laya audit · network scope (total effects)"
HEAD_TITLE = "laya audit · head scope (direct effects)"
SCOPE_LOLO = "lolo_effects"  # the comparison's row for the effects themselves
NETWORK = "network:"  # a comparison keys the network-scope methods ``network:METHOD``

SCOPE_METHOD_HEADER = ["method", "ρ(head, network)", "± std", "undef."]
# Under the ρ(head, network) table: why laya, contrib and random are not in it
SCOPE_METHOD_CAPTION = (
    "methods with an attribution of their own at network scope; laya, contrib and random score the same at both "
    "scopes (ρ = 1 by construction) and are left out"
)
SCOPE_LAYER_HEADER = ["layer", "mean Δ head", "mean Δ network", "direct ÷ total"]
# The per-layer table: a ratio of means, not a share (above 1 or below 0 where later layers offset the direct effect)
SCOPE_LAYER_TITLE = "direct ÷ total effect of each layer (ratio of the means; > 1 or < 0: later layers offset it)"


# What a network-scope audit puts in place of a removed layer's output, per --ablation (in words, for the tables).
NETWORK_REMOVALS = {
    "mean": "its training-mean activation",
    "zero": "zeros",
    "bypass": "its input (the block skipped)",
    "mean-update": "its input + the training mean of its update",
}


def network_methods(compared: dict) -> dict:
    """The network-scope part of a comparison's methods, keyed by method as the network table's rows."""
    return {m[len(NETWORK) :]: v for m, v in compared.items() if m.startswith(NETWORK)}


def network_comparison(comparison: dict | None) -> dict | None:
    """The network-scope part of a ``--baseline`` comparison, keyed by method as the network table's rows
    (the comparison keys them ``network:METHOD``); None when there is none."""
    if not comparison:
        return None
    methods = network_methods(comparison.get("methods", {}))
    return {**comparison, "methods": methods} if methods else None


def network_caption(result, comparison: dict | None = None) -> str:
    """The network table's caption (with the baseline line under it when ``comparison`` holds network results)."""
    net = result.network
    how = (
        "prefix-cached: only the layers after the patched one run"
        if net.patched == "prefix"
        else "full passes with a replacing hook"
    )
    return (
        (
            f"{audit_caption(result, net.ties, network=True)} · layer patched inside the backbone with "
            f"{NETWORK_REMOVALS.get(net.reference, net.reference)}"
        )
        + f" · {how}"
        + (f"\n{baseline_caption(comparison)}" if network_comparison(comparison) else "")
    )


def scope_method_rows(methods: dict) -> list[list[str]]:
    """Per method (and the LOLO effects themselves), Spearman between its head- and network-scope scores."""
    return [
        [
            ("Δ (LOLO effects)" if m == SCOPE_LOLO else m),
            fmt(v.get("spearman")),
            fmt(v.get("spearman_std")),
            fmt(v.get("undefined"), "{:d}"),
        ]
        for m, v in methods.items()
    ]


def scope_layer_rows(layers: dict) -> list[list[str]]:
    """Per layer, the mean effects at both scopes and their ratio (mean Δ_head / mean Δ_network)."""
    return [
        [name, fmt(v.get("delta_head"), "{:.4f}"), fmt(v.get("delta_network"), "{:.4f}"), fmt(v.get("direct_share"))]
        for name, v in layers.items()
    ]


def scope_tables(result) -> list[Table]:
    """--scope both: per method, Spearman between its head- and network-scope scores; per layer,
    the mean effects at both scopes and their ratio (mean Δ_head / mean Δ_network)."""
    if result.network is None or result.network.comparison is None:
        return []
    comp = result.network.comparison
    tables = []
    for title, header, rows, caption in (
        (
            "head vs network scope: how each method's layer ranking moves",
            SCOPE_METHOD_HEADER,
            scope_method_rows(comp.methods),
            SCOPE_METHOD_CAPTION,
        ),
        (SCOPE_LAYER_TITLE, SCOPE_LAYER_HEADER, scope_layer_rows(comp.layers), None),
    ):
        table = rich_table(title, caption=caption, caption_justify="left")
        table.add_column(header[0], style="bold", no_wrap=True)
        for h in header[1:]:
            table.add_column(h, justify="right", no_wrap=True)
        for row in rows:
            table.add_row(*plain_row(row))
        tables.append(table)
    return tables


def network_markdown(
    result, misses: list[str] | None = None, comparison: dict | None = None, drop_misses: list[str] | None = None
) -> str:
    """The network-scope table (and, for --scope both, the comparison tables) as Markdown; ``comparison``:
    a ``--baseline`` comparison (its network-scope part adds baseline and change columns); with ``misses``
    and ``drop_misses`` (a --scope network run, which has no head-scope section), the gates' outcome."""
    comparison = network_comparison(comparison)
    rows = method_rows(result.network.methods, result.network.ranking)  # the default columns: what it computes
    lines = [
        f"### {NETWORK_TITLE}",
        "",
        *md_methods_table(rows, AUDIT_COLUMNS, compared_methods(comparison)),
        "",
        f"_{md_text(network_caption(result))}_",
    ]
    if comparison:
        lines += ["", f"_{md_text(baseline_caption(comparison))}_"]
    if (comp := result.network.comparison) is not None:
        lines += [
            "",
            "#### Head vs network scope",
            "",
            *md_table(SCOPE_METHOD_HEADER, scope_method_rows(comp.methods)),
            "",
            f"_{SCOPE_METHOD_CAPTION}_",
            "",
            f"#### {SCOPE_LAYER_TITLE[0].upper()}{SCOPE_LAYER_TITLE[1:]}",
            "",
            *md_table(SCOPE_LAYER_HEADER, [[md_text(c) for c in r] for r in scope_layer_rows(comp.layers)]),
        ]
    return "\n".join(lines + closing_lines(result.network.notes, misses, drop_misses)) + "\n"


def network_html(doc: dict, compared: dict) -> list[str]:
    """report.html's part of a ``laya audit --scope network|both --json``: the network-scope table and, for
    ``both``, each layer's direct ÷ total effect; [] for a head-scope audit."""
    net = doc.get("network")
    if not isinstance(net, dict) or not isinstance(net.get("methods"), dict):
        return []
    e = html.escape
    how = (
        "only the layers after the patched one ran"
        if net.get("patched") == "prefix"
        else "full passes with a replacing hook"
    )
    parts = [
        "<h3>Network scope (total effects)</h3>",
        "<p>Each layer's output replaced inside the backbone by "
        f"{e(NETWORK_REMOVALS.get(net.get('reference'), str(net.get('reference'))))}, every later layer "
        f"run on it ({e(how)}): faithfulness and Deletion@1 against these total effects.</p>",
        html_methods_table(net["methods"], network_methods(compared), net.get("ranking")),
    ]
    layers = (net.get("scopes") or {}).get("layers") or {}
    if layers:
        rows = [[f"<code>{e(name)}</code>", *map(e, cells)] for name, *cells in scope_layer_rows(layers)]
        parts += [
            f"<h3>{html.escape(SCOPE_LAYER_TITLE[0].upper() + SCOPE_LAYER_TITLE[1:])}</h3>",
            html_table(SCOPE_LAYER_HEADER, rows, "lrrr"),
        ]
    return parts
