"""``laya audit``'s tables: methods as rows, metrics as columns, for the terminal, Markdown and report.html.

One column model (``AUDIT_COLUMNS``, the ``--metrics`` groups, a ``--baseline``'s value and change beside each
compared metric) and one cell builder (``method_cells``) serve all three forms. Also here: the per-class
tables (--by-class), the captions and the verdict line the command ends with.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from rich.table import Table

from .cells import (
    EXCLUDES_0_LEGEND,
    MD_MARKS,
    RICH_MARKS,
    Cell,
    Column,
    best,
    fmt,
    html_marked,
    html_table,
    marked,
    md_table,
    rich_table,
)
from .collapse import collapse_text
from .inert import md_text
from .intervals import ci_cell, ci_header, ci_text, interval_columns, vs_laya_rows
from .notes import docs_page, labelled

AUDIT_COLUMNS = [
    Column("faithfulness", "faithfulness", best=True),
    Column("± std", "faithfulness_std"),
    Column("undef.", "undefined", "{:d}"),
    Column("deletion@1", "deletion@1", best=True),
    Column("oracle", "deletion@1_oracle"),
    Column("random", "deletion@1_random"),
    Column("normalised", "deletion@1_normalised", best=True),
]

# ``--metrics`` groups: extra columns of the audit table (the JSON always has them all).
AUDIT_EXTRA_COLUMNS = {
    "aopc": [Column("aopc", "aopc", best=True)],
    "sufficiency": [
        Column("suff@1", "sufficiency@1", best=True),
        Column("suff. norm.", "sufficiency@1_normalised", best=True),
    ],
    "completeness": [Column("completeness", "completeness", flag="completeness_flagged")],
    "randomisation": [Column("randomisation", "randomisation", flag="randomisation_flagged")],
}

VS_LAYA_CAPTION = (
    f"method − laya on the same resampled samples (paired bootstrap); {EXCLUDES_0_LEGEND} (a difference, better or "
    f"worse) · {docs_page('metrics.md')}"
)

CLASS_TABLES = (  # --by-class: (metric, terminal title, Markdown title)
    ("faithfulness", "faithfulness by class", "Faithfulness by class"),
    ("deletion@1", "deletion@1 by class", "Deletion@1 by class"),
)


def ig_steps_text(settings: dict) -> str:
    """IG's steps as the caption states them: at most ``--steps``, each sample's from ``--ig-tol`` (docs/metrics.md)."""
    steps, tol = settings.get("steps"), settings.get("ig_tol") or 0  # an older audit JSON has no ig_tol
    return f"IG steps ≤ {steps} (--ig-tol {tol:g})" if tol else f"IG steps {steps}"


def extra_columns(metrics: Sequence[str]) -> list[Column]:
    return [c for g in metrics for c in AUDIT_EXTRA_COLUMNS[g]]


def compared_columns(columns: Sequence[Column], compared: dict | None) -> list[Column]:
    """``columns``, each metric that ``compared`` (a comparison's methods: method -> metric -> its baseline
    value, change and --max-drop outcome) holds followed by the baseline's value and the change."""
    held = {k for per in (compared or {}).values() for k in per}
    out = []
    for c in columns:
        out.append(c)
        if c.key in held and c.kind == "value":
            out += [
                Column("baseline", c.key, c.spec, kind="base", short="base"),
                Column("Δ", c.key, "{:+.3f}", kind="delta"),
            ]
    return out


def method_rows(methods: dict, ranking: dict | None = None) -> dict[str, dict]:
    """Method -> its scores as a dict (``MethodScores`` or already the JSON's dicts); where the scope's ``ranking``
    is undetermined (``auditing.metrics.ranking_block``), its faithfulness as ``scored_rows`` shows it."""
    return scored_rows({m: (v.to_dict() if hasattr(v, "to_dict") else v) for m, v in methods.items()}, ranking)


UNDETERMINED = "undetermined"


def scored_rows(rows: dict[str, dict], ranking: dict | None) -> dict[str, dict]:
    """``rows`` as a scope's table shows them: where its layers' effects are near-equal on most samples (``ranking``
    not determined), faithfulness — a ranking of near-equal effects — reads 'undetermined', with no std, interval or
    difference from laya; Deletion@1 stays. Determined (or no ranking block: an audit from before): as they are."""
    if not ranking or ranking.get("determined", True):
        return rows
    out = {}
    for name, row in rows.items():
        cut = lambda block: {k: v for k, v in (block or {}).items() if k != "faithfulness"}  # noqa: E731
        out[name] = {**row, "faithfulness": UNDETERMINED, "faithfulness_std": None, "ci": cut(row.get("ci")),
                     "vs_laya": cut(row.get("vs_laya"))}  # fmt: skip
    return out


def method_cells(rows: dict[str, dict], columns: Sequence[Column], compared: dict | None) -> dict[str, list[Cell]]:
    """Each method's cells: the best value of a higher-is-better column among the available methods marked,
    flagged values and changes that failed their --max-drop too."""
    bests = {
        c.key: best(r.get(c.key) for r in rows.values() if r.get("available", True))
        for c in columns
        if c.best and c.kind == "value"
    }
    return {name: [_method_cell(name, row, c, bests, compared or {}) for c in columns] for name, row in rows.items()}


def _method_cell(name: str, row: dict, column: Column, bests: dict, compared: dict) -> Cell:
    if column.kind == "ci":
        return ci_cell(row, column)
    if column.kind != "value":  # '—' where the baseline has no such value
        pair = compared.get(name, {}).get(column.key)
        if pair is None:
            return Cell("—")
        if column.kind == "base":
            return Cell(fmt(pair.get("baseline"), column.spec))
        return Cell(fmt(pair.get("change"), column.spec), "failed" if pair.get("failed") else None)
    value = row.get(column.key)
    text = fmt(value, column.spec)
    if column.best and row.get("available", True) and bests.get(column.key) is not None and value == bests[column.key]:
        return Cell(text, "best")
    if column.flag and row.get(column.flag):
        return Cell(text, "flag")
    return Cell(text)


def compared_methods(comparison: dict | None) -> dict:
    """A --baseline comparison's (``regression.Comparison.to_dict()``) methods; {} without one."""
    return (comparison or {}).get("methods", {})


# --------------------------------------------------------------------------- the terminal


def audit_rich_table(
    result,
    title: str = "laya audit",
    methods: dict | None = None,
    caption: str | None = None,
    comparison: dict | None = None,
    ranking: dict | None = None,
) -> Table:
    """The audit table for the terminal (``methods`` overrides the rows, e.g. one class or the network scope's, with
    that scope's ``ranking``; without them, the head scope's rows and ranking).

    ``comparison`` (``regression.Comparison.to_dict()``): a baseline and a change column beside each metric.
    """
    if caption is None:
        caption = audit_caption(result) + (f"\n{baseline_caption(comparison)}" if comparison else "")
    if methods is None:
        methods, ranking = result.methods, getattr(result, "ranking", None)
    rows = method_rows(methods, ranking)
    return rich_methods_table(rows, AUDIT_COLUMNS, title, caption, compared_methods(comparison))


def audit_deeper_table(
    result, metrics: Sequence[str], title: str = "deeper metrics", comparison: dict | None = None
) -> Table | None:
    """``--metrics``: the asked-for column groups, as a second table under the audit table (one 80-column
    terminal cannot hold them all beside the default columns); None when none is asked for."""
    if not metrics:
        return None
    caption = f"! flagged · {docs_page('metrics.md')}"
    return rich_methods_table(
        method_rows(result.methods), extra_columns(metrics), title, caption, compared_methods(comparison)
    )


def rich_methods_table(
    rows: dict[str, dict], columns: Sequence[Column], title: str, caption: str, compared: dict | None
) -> Table:
    """Methods as rows (an unavailable one dimmed), ``columns`` with their intervals and the compared ones'
    baseline and change."""
    columns = compared_columns(interval_columns(columns, rows), compared)
    table = rich_table(title, caption=caption, caption_justify="left")
    table.add_column("method", style="bold", no_wrap=True)
    for c in columns:
        table.add_column(c.short or c.header, justify="right", no_wrap=True)
    for name, cells in method_cells(rows, columns, compared).items():
        table.add_row(name if rows[name].get("available", True) else f"[dim]{name}[/]", *marked(cells, RICH_MARKS))
    return table


def class_rows(result, key: str) -> list[list[Cell]]:
    """--by-class: per class, its size, accuracy and each method's ``key`` (the best of the class marked)."""
    out = []
    for name, cls in result.by_class.items():
        rows = method_rows(cls.methods)
        top = best(r.get(key) for r in rows.values() if r.get("available", True))
        cells = [
            Cell(
                with_ci(r, key), "best" if r.get("available", True) and top is not None and r.get(key) == top else None
            )
            for r in (rows[m] for m in result.methods)
        ]
        out.append([Cell(name), Cell(str(cls.n)), Cell(fmt(cls.accuracy)), *cells])
    return out


def with_ci(row: dict, key: str) -> str:
    """A class table's value, followed by its interval when the audit computed one (``0.812 [0.771, 0.850]``)."""
    block = (row.get("ci") or {}).get(key)
    return fmt(row.get(key)) + (f" {ci_text(block)}" if block and block.get("ci_low") is not None else "")


def class_caption(result) -> str | None:
    """Under the class tables: the intervals' level, when they have any."""
    cls = result.by_class.values()
    level = next((i.level for c in cls for s in c.methods.values() for i in s.intervals.values()), None)
    return f"value [{ci_header(level)}], bootstrap over the class's samples" if level else None


def audit_class_tables(result) -> list[Table]:
    """--by-class: faithfulness and Deletion@1 per class (classes as rows, methods as columns)."""
    if not result.by_class:
        return []
    tables = []
    for key, title, _ in CLASS_TABLES:
        table = rich_table(title, caption=class_caption(result), caption_justify="left")
        table.add_column("class", style="bold")
        for header in ("n", "acc.", *result.methods):  # a value wraps before its interval rather than being cut
            table.add_column(header, justify="right", no_wrap=header in ("n", "acc."))
        for row in class_rows(result, key):
            table.add_row(*marked(row, RICH_MARKS))
        tables.append(table)
    return tables


# --------------------------------------------------------------------------- Markdown


def md_methods_table(rows: dict[str, dict], columns: Sequence[Column], compared: dict | None) -> list[str]:
    columns = compared_columns(interval_columns(columns, rows), compared)
    body = [[f"`{name}`", *marked(cells, MD_MARKS)] for name, cells in method_cells(rows, columns, compared).items()]
    return md_table(["method", *(c.header for c in columns)], body)


def audit_markdown(
    result,
    misses: list[str] | None = None,
    title: str = "laya audit",
    metrics: Sequence[str] = (),
    comparison: dict | None = None,
    drop_misses: list[str] | None = None,
) -> str:
    """The same table as Markdown (GitHub-flavoured), e.g. for ``$GITHUB_STEP_SUMMARY``.

    ``metrics``: the ``--metrics`` column groups; ``comparison``: baseline and change columns beside each
    metric; ``drop_misses``: the --max-drop outcome.
    """
    columns = AUDIT_COLUMNS + extra_columns(metrics)
    lines = [
        f"### {title}",
        "",
        *md_methods_table(
            method_rows(result.methods, getattr(result, "ranking", None)), columns, compared_methods(comparison)
        ),
        "",
        f"_{md_text(audit_caption(result))}_",
    ]
    if comparison:
        lines += ["", f"_{md_text(baseline_caption(comparison))}_"]
    lines += vs_laya_markdown(method_rows(result.methods, getattr(result, "ranking", None)), metrics)
    if result.by_class:
        header = ["class", "n", "accuracy", *result.methods]
        for key, _, title_ in CLASS_TABLES:  # unmarked: the class tables' Markdown has never marked the best
            body = [[md_text(c.text) for c in row] for row in class_rows(result, key)]
            lines += ["", f"#### {title_}", "", *md_table(header, body)]
        if (caption := class_caption(result)) is not None:
            lines += ["", f"_{md_text(caption)}_"]
    return "\n".join(lines + closing_lines(result.notes, misses, drop_misses)) + "\n"


def vs_laya_markdown(rows: dict[str, dict], metrics: Sequence[str] = ()) -> list[str]:
    """The paired differences from ``laya`` (with --ci), as Markdown lines; none without intervals."""
    header, body = vs_laya_rows(rows, metrics)
    if not body:
        return []
    return [
        "",
        "#### Paired difference from `laya`",
        "",
        *md_table(header, [marked(r, MD_MARKS) for r in body]),
        "",
        f"_{VS_LAYA_CAPTION}_",
    ]


def vs_laya_rich_table(result, metrics: Sequence[str] = ()) -> Table | None:
    """The paired differences from ``laya`` for the terminal (``metrics``: the --metrics groups shown); None
    without intervals."""
    header, body = vs_laya_rows(method_rows(result.methods, getattr(result, "ranking", None)), metrics)
    if not body:
        return None
    table = rich_table("paired difference from laya", caption=VS_LAYA_CAPTION, caption_justify="left")
    table.add_column(header[0], style="bold", no_wrap=True)
    for h in header[1:]:
        table.add_column(h, justify="right", no_wrap=True)
    for row in body:
        table.add_row(*marked(row, RICH_MARKS))
    return table


def closing_lines(notes, misses: list[str] | None, drop_misses: list[str] | None) -> list[str]:
    """The end of an audit's Markdown: its notes, then the --fail-under and --max-drop outcomes (when gated)."""
    lines = ["", *(f"- {md_text(labelled(n))}" for n in notes)] if notes else []
    if misses is not None:
        lines += ["", "**fail-under: missed**" if misses else "fail-under: all thresholds met"]
        lines += [f"- {md_text(m)}" for m in misses]
    if drop_misses is not None:
        lines += [
            "",
            "**max-drop: dropped too far**" if drop_misses else "max-drop: no metric dropped more than allowed",
        ]
        lines += [f"- {md_text(m)}" for m in drop_misses]
    return lines


# --------------------------------------------------------------------------- report.html


def html_methods_table(methods: dict, compared: dict, ranking: dict | None = None) -> str:
    """The default metrics of the methods of a ``laya audit --json`` (with the baseline and the change where
    ``compared`` holds them, keyed like ``methods``; ``ranking``: the scope's, faithfulness 'undetermined' where it
    is)."""
    methods = scored_rows(methods, ranking)
    columns = compared_columns(interval_columns(AUDIT_COLUMNS, methods), compared)
    body = [
        [f"<code>{html.escape(name)}</code>", *html_marked(cells)]
        for name, cells in method_cells(methods, columns, compared).items()
    ]
    return html_table(["method", *(c.header for c in columns)], body, "l" + "r" * len(columns))


# --------------------------------------------------------------------------- captions, the verdict line


def ties_text(settings: dict, ties: dict | None) -> str | None:
    """The tie tolerance as the caption states it, with the samples it left undefined (docs/metrics.md, "Ties");
    None for an audit from before the tolerance."""
    tol = settings.get("tie_tol")
    if tol is None:
        return None
    text = f"ties within {tol:g}" if tol else "exact ties only"
    by_ties = (ties or {}).get("degenerate_by_ties")
    return text + (f" ({by_ties} samples undefined by ties)" if by_ties else "")


def audit_caption(result, ties: dict | None = None, network: bool = False) -> str:
    """The table's caption: the audit's settings; ``ties``: the tie block of the scope shown (default: the head's).
    ``network``: the network table's, which names its own removal (``network_caption``), not the head scope's
    ablation."""
    s = result.settings
    parts = [
        f"{result.n_samples} samples" + (f" of {s['dataset']}" if s.get("dataset") else ""),
        f"accuracy {fmt(result.accuracy, '{:.4f}')}",
        f"{s.get('head', '?')} head, {len(result.layers)} layers",
        f"target {s['target']}",
        *([] if network else [_head_ablation_text(result)]),
        f"reduce {s['reduce']}",
    ]
    if "ig" in s.get("methods", ["ig"]):  # IG's settings only when IG ran
        parts.append(ig_steps_text(s))
        if s.get("internal_batch_size"):
            parts.append(f"IG internal batch {s['internal_batch_size']}")
    tied = ties_text(s, ties if ties is not None else getattr(result, "ties", None))
    if tied:
        parts.append(tied)
    if (alpha := collapse_text(getattr(result, "alpha_collapse", None), result.layers)) is not None:
        parts.append(f"α {alpha}")  # how much of the depth α uses (docs/metrics.md, "α collapse")
    if s.get("model"):
        parts.insert(0, str(s["model"]))
    return " · ".join(parts)


def _head_ablation_text(result) -> str:
    """'ablation mean'; 'head-scope ablation mean' where the network scope removed layers otherwise (bypass)."""
    ablation = result.settings["ablation"]
    net = getattr(result, "network", None)
    other = net is not None and getattr(net, "reference", ablation) != ablation
    return f"{'head-scope ' if other else ''}ablation {ablation}"


def baseline_caption(comparison: dict) -> str:
    """One line under the table: which baseline, its accuracy and the change, and settings allowed to differ."""
    acc = comparison.get("accuracy", {})
    text = (
        f"baseline {comparison.get('path') or '(given)'} · accuracy {fmt(acc.get('baseline'), '{:.4f}')} "
        f"→ {fmt(acc.get('current'), '{:.4f}')} (Δ {fmt(acc.get('change'), '{:+.4f}')})"
    )
    if comparison.get("settings_changed"):
        text += " · settings changed (allowed): " + "; ".join(comparison["settings_changed"])
    return text


def verdict_lines(doc: dict) -> list[str]:
    """What an audit says before its tables (an audit JSON's ``question``, ``verdict`` and ``flags``): the question
    α was trained on, the verdict in words, each flag; none that the JSON does not hold (an older audit)."""
    question = (doc.get("question") or {}).get("sentence")
    verdict = doc.get("verdict_text")
    return [line for line in (question and f"question: {question}.", verdict and f"verdict: {verdict}") if line] + [
        *(doc.get("flags") or [])
    ]


def verdict_line(verdict, n_samples: int, model=None) -> str:
    """The one line ``laya audit`` ends with (all that ``--quiet`` prints): PASS or FAIL, and why."""
    where = f"{model} · " if model else ""
    checks, failures, skipped = len(verdict.checks), verdict.failures, verdict.skipped
    extra = f", {len(skipped)} skipped" if skipped else ""
    if not checks:
        return f"laya audit: PASS · {where}{n_samples:,} samples audited · no gate checks"
    undecided = getattr(verdict, "inconclusive", [])
    if not failures and undecided:
        return (
            f"laya audit: INCONCLUSIVE · {where}{len(undecided)} of {checks} gate checks inconclusive (interval "
            f"straddles the bar){extra} · {n_samples:,} samples: " + "; ".join(c.message for c in undecided)
        )
    if not failures:
        return (
            f"laya audit: PASS · {where}{checks - len(skipped)} of {checks} gate checks passed{extra} · "
            f"{n_samples:,} samples"
        )
    also = f", {len(undecided)} inconclusive" if undecided else ""
    return f"laya audit: FAIL · {where}{len(failures)} of {checks} gate checks failed{also}{extra}: " + "; ".join(
        c.message for c in failures
    )
