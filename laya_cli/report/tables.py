"""Rendering results for people: rich tables for the terminal, Markdown for CI summaries.

Every table laya prints is built here (audit, bench, export's attention shift, the info
panel); the library computes, this module only formats. In both forms the best value of a
"higher is better" column is highlighted (bold green in the terminal, **bold** in Markdown)
and undefined values read "n/a".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rich import box
from rich.table import Table


def best(values: Iterable) -> float | None:
    """The largest defined number (None and NaN ignored), or None."""
    vals = [v for v in values if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))]
    return max(vals) if vals else None


def md_table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    """A GitHub-flavoured Markdown table; ``align`` per column, 'l' or 'r' (default: first left, rest right)."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    marks = {"l": ":---", "r": "---:"}
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(marks[a] for a in align) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _simple_table(title: str, **kw) -> Table:
    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, **kw)


# --------------------------------------------------------------------------- audit
# Methods as rows, metrics as columns.

AUDIT_COLUMNS = [  # (header, key in MethodScores.to_dict(), format, highlight the best)
    ("faithfulness", "faithfulness", "{:.3f}", True),
    ("± std", "faithfulness_std", "{:.3f}", False),
    ("undef.", "undefined", "{:d}", False),
    ("deletion@1", "deletion@1", "{:.3f}", True),
    ("oracle", "deletion@1_oracle", "{:.3f}", False),
    ("random", "deletion@1_random", "{:.3f}", False),
    ("normalised", "deletion@1_normalised", "{:.3f}", True),
]


# ``--metrics`` groups: extra columns of the audit table (the JSON always has them all). The fifth
# field names the JSON flag that marks a value (yellow and "!" on the terminal, "!" in Markdown).
AUDIT_EXTRA_COLUMNS = {
    "aopc": [("aopc", "aopc", "{:.3f}", True, None)],
    "sufficiency": [
        ("suff@1", "sufficiency@1", "{:.3f}", True, None),
        ("suff. norm.", "sufficiency@1_normalised", "{:.3f}", True, None),
    ],
    "completeness": [("completeness", "completeness", "{:.3f}", False, "completeness_flagged")],
    "randomisation": [("randomisation", "randomisation", "{:.3f}", False, "randomisation_flagged")],
}


def _default_columns() -> list[tuple]:
    return [(*c, None) for c in AUDIT_COLUMNS]


def _extra_columns(metrics: Sequence[str]) -> list[tuple]:
    return [c for g in metrics for c in AUDIT_EXTRA_COLUMNS[g]]


def _audit_columns(columns: list[tuple], comparison: dict | None = None) -> list[tuple]:
    """``columns`` as (header, key, format, best, flag, kind): each metric a ``comparison`` holds is followed
    by its baseline value and the change (kind base/delta)."""
    compared = {k for per in (comparison or {}).get("methods", {}).values() for k in per}
    out = []
    for header, key, spec, hi, flag in columns:
        out.append((header, key, spec, hi, flag, "value"))
        if key in compared:
            out += [("base", key, spec, False, None, "base"), ("Δ", key, spec, False, None, "delta")]
    return out


RICH_MARKS = {"best": "[bold green]{}[/]", "flag": "[yellow]{} ![/]", "failed": "[bold red]{} ✗[/]"}
MD_MARKS = {"best": "**{}**", "flag": "{} !", "failed": "**{} ✗**"}


def _row_cells(
    name: str, row: dict, columns: list[tuple], best: dict, comparison: dict | None, marks: dict
) -> list[str]:
    """One method's cells: the best value of a higher-is-better column marked, flagged values and
    failed --max-drop changes too (``marks``: RICH_MARKS or MD_MARKS)."""
    cells = []
    for _, key, spec, hi, flag, kind in columns:
        if kind != "value":
            text, failed = _baseline_cell(comparison, name, key, kind)
            cells.append(marks["failed"].format(text) if failed else text)
            continue
        text = _fmt(row.get(key), spec)
        if hi and row.get("available", True) and best.get(key) is not None and row.get(key) == best[key]:
            text = marks["best"].format(text)
        elif flag and row.get(flag):
            text = marks["flag"].format(text)
        cells.append(text)
    return cells


def _bests(rows: dict[str, dict], columns: list[tuple]) -> dict:
    return {key: _best(rows, key) for _, key, _, hi, _, kind in columns if hi and kind == "value"}


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return spec.format(value)


def _best(rows: dict[str, dict], key: str) -> float | None:
    return best(r.get(key) for r in rows.values() if r.get("available", True))


def audit_caption(result) -> str:
    s = result.settings
    parts = [
        f"{result.n_samples} samples" + (f" of {s['dataset']}" if s.get("dataset") else ""),
        f"accuracy {_fmt(result.accuracy, '{:.4f}')}",
        f"{s.get('head', '?')} head, {len(result.layers)} layers",
        f"target {s['target']}",
        f"ablation {s['ablation']}",
        f"reduce {s['reduce']}",
    ]
    if "ig" in s.get("methods", ["ig"]):  # IG's settings only when IG ran
        parts.append(f"IG steps {s['steps']}")
        if s.get("internal_batch_size"):
            parts.append(f"IG internal batch {s['internal_batch_size']}")
    if s.get("model"):
        parts.insert(0, str(s["model"]))
    return " · ".join(parts)


def _method_rows(methods: dict) -> dict[str, dict]:
    return {m: (v.to_dict() if hasattr(v, "to_dict") else v) for m, v in methods.items()}


def audit_rich_table(
    result,
    title: str = "laya audit",
    methods: dict | None = None,
    caption: str | None = None,
    comparison: dict | None = None,
) -> Table:
    """The audit table for the terminal (``methods`` overrides the rows, e.g. one class).

    ``comparison`` (``regression.Comparison.to_dict()``): a baseline and a change column beside each metric.
    """
    if caption is None:
        caption = audit_caption(result) + (f"\n{baseline_caption(comparison)}" if comparison else "")
    rows = _method_rows(methods if methods is not None else result.methods)
    return _rich_audit_table(rows, _audit_columns(_default_columns(), comparison), title, caption, comparison)


def audit_deeper_table(
    result, metrics: Sequence[str], title: str = "deeper metrics", comparison: dict | None = None
) -> Table | None:
    """``--metrics``: the asked-for column groups, as a second table under the audit table (one 80-column
    terminal cannot hold them all beside the default columns); None when none is asked for."""
    columns = _audit_columns(_extra_columns(metrics), comparison)
    if not columns:
        return None
    caption = "! flagged · docs/metrics.md"
    return _rich_audit_table(_method_rows(result.methods), columns, title, caption, comparison)


def _rich_audit_table(
    rows: dict[str, dict], columns: list[tuple], title: str, caption: str, comparison: dict | None = None
) -> Table:
    table = _simple_table(title, caption=caption, caption_justify="left")
    table.add_column("method", style="bold", no_wrap=True)
    for header, *_ in columns:
        table.add_column(header, justify="right", no_wrap=True)
    best = _bests(rows, columns)
    for name, row in rows.items():
        cells = _row_cells(name, row, columns, best, comparison, RICH_MARKS)
        table.add_row(name if row.get("available", True) else f"[dim]{name}[/]", *cells)
    return table


def _baseline_cell(comparison: dict, method: str, key: str, kind: str) -> tuple[str, bool]:
    """(text, failed a --max-drop) of a baseline or change cell; '—' where the baseline has no such value."""
    pair = comparison.get("methods", {}).get(method, {}).get(key)
    if pair is None:
        return "—", False
    if kind == "base":
        return _fmt(pair["baseline"], "{:.3f}"), False
    return _fmt(pair["change"], "{:+.3f}"), bool(pair.get("failed"))


def baseline_caption(comparison: dict) -> str:
    """One line under the table: which baseline, its accuracy and the change, and settings allowed to differ."""
    acc = comparison.get("accuracy", {})
    text = (
        f"baseline {comparison.get('path') or '(given)'} · accuracy {_fmt(acc.get('baseline'), '{:.4f}')} "
        f"→ {_fmt(acc.get('current'), '{:.4f}')} (Δ {_fmt(acc.get('change'), '{:+.4f}')})"
    )
    if comparison.get("settings_changed"):
        text += " · settings changed (allowed): " + "; ".join(comparison["settings_changed"])
    return text


def audit_class_tables(result) -> list[Table]:
    """--by-class: faithfulness and Deletion@1 per class (classes as rows, methods as columns)."""
    if not result.by_class:
        return []
    methods = list(result.methods)
    tables = []
    for title, key in (("faithfulness by class", "faithfulness"), ("deletion@1 by class", "deletion@1")):
        table = _simple_table(title)
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
    rows = _method_rows(result.methods)
    columns = _audit_columns(_default_columns() + _extra_columns(metrics), comparison)
    best = _bests(rows, columns)
    body = [[f"`{name}`", *_row_cells(name, row, columns, best, comparison, MD_MARKS)] for name, row in rows.items()]
    headers = [{"base": "baseline"}.get(kind, h) for h, _, _, _, _, kind in columns]
    lines = [
        f"### {title}",
        "",
        *md_table(["method", *headers], body, ["l"] + ["r"] * len(columns)),
        "",
        f"_{audit_caption(result)}_",
    ]
    if comparison:
        lines += ["", f"_{baseline_caption(comparison)}_"]
    if result.by_class:
        methods = list(result.methods)
        for title_, key in (("Faithfulness by class", "faithfulness"), ("Deletion@1 by class", "deletion@1")):
            crow = []
            for name, cls in result.by_class.items():
                r = _method_rows(cls.methods)
                crow.append(
                    [name, str(cls.n), _fmt(cls.accuracy, "{:.3f}"), *(_fmt(r[m].get(key), "{:.3f}") for m in methods)]
                )
            lines += [
                "",
                f"#### {title_}",
                "",
                *md_table(["class", "n", "accuracy", *methods], crow, ["l"] + ["r"] * (2 + len(methods))),
            ]
    return "\n".join(lines + _closing_lines(result.notes, misses, drop_misses)) + "\n"


def _closing_lines(notes, misses: list[str] | None, drop_misses: list[str] | None) -> list[str]:
    """The end of an audit's Markdown: its notes, then the --fail-under and --max-drop outcomes (when gated)."""
    lines = ["", *(f"- note: {n}" for n in notes)] if notes else []
    if misses is not None:
        lines += ["", "**fail-under: missed**" if misses else "fail-under: all thresholds met"]
        lines += [f"- {m}" for m in misses]
    if drop_misses is not None:
        lines += [
            "",
            "**max-drop: dropped too far**" if drop_misses else "max-drop: no metric dropped more than allowed",
        ]
        lines += [f"- {m}" for m in drop_misses]
    return lines


def verdict_line(verdict, n_samples: int, model=None) -> str:
    """The one line ``laya audit`` ends with (all that ``--quiet`` prints): PASS or FAIL, and why."""
    where = f"{model} · " if model else ""
    checks, failures, skipped = len(verdict.checks), verdict.failures, verdict.skipped
    extra = f", {len(skipped)} skipped" if skipped else ""
    if not checks:
        return f"laya audit: PASS · {where}{n_samples:,} samples audited · no gate checks"
    if not failures:
        return (
            f"laya audit: PASS · {where}{checks - len(skipped)} of {checks} gate checks passed{extra} · "
            f"{n_samples:,} samples"
        )
    return f"laya audit: FAIL · {where}{len(failures)} of {checks} gate checks failed{extra}: " + "; ".join(
        c.message for c in failures
    )


# --------------------------------------------------------------------------- bench


def _pm(stats: dict, spec: str = "{:.4f}") -> str:
    m, s = stats.get("mean"), stats.get("std")
    if m is None:
        return "n/a"
    return spec.format(m) + ("" if s is None else " ± " + spec.format(s))


def _seconds(stats: dict) -> str:
    m = stats.get("mean")
    return "n/a" if m is None else _pm(stats, "{:.1f}" if m < 10 else "{:.0f}") + " s"


def bench_table_rows(result) -> dict:
    """Plain cells for the three tables (used by the rich and Markdown renderers)."""
    heads = result.heads
    methods = result.request.methods()
    acc_best = {k: best(e[k]["mean"] for e in heads.values()) for k in ("test_accuracy", "test_macro_f1")}
    accuracy = []
    for h, e in heads.items():
        accuracy.append(
            {
                "head": h,
                "cells": [
                    (_pm(e["test_accuracy"]), e["test_accuracy"]["mean"] == acc_best["test_accuracy"]),
                    (_pm(e["test_macro_f1"]), e["test_macro_f1"]["mean"] == acc_best["test_macro_f1"]),
                    (_pm(e["epochs_run"], "{:.1f}"), False),
                    (_seconds(e["train_seconds"]), False),
                    (str(e["runs"]), False),
                ],
            }
        )
    per_metric = {}
    for key in ("faithfulness", "deletion@1"):
        rows = []
        col_best = {
            h: best(e["methods"][m][key]["mean"] for m in methods if m != "random" and e["methods"][m]["available"])
            for h, e in heads.items()
        }
        for m in methods:
            cells = []
            for h, e in heads.items():
                s = e["methods"][m]
                if not s["available"]:
                    cells.append(("n/a", False))
                else:
                    cells.append(
                        (
                            _pm(s[key], "{:.3f}"),
                            m != "random" and s[key]["mean"] is not None and s[key]["mean"] == col_best[h],
                        )
                    )
            rows.append({"method": m, "cells": cells, "dim": False})
        if key == "deletion@1":
            for label, k in (("oracle", "deletion@1_oracle"), ("random exp.", "deletion@1_random")):
                cells = []
                for _head, e in heads.items():
                    # Oracle/random depend only on Δ: take them from the random method, always available.
                    s = e["methods"]["random"][k]
                    cells.append((_pm(s, "{:.3f}"), False))
                rows.append({"method": label, "cells": cells, "dim": True})
        per_metric[key] = rows
    return {"accuracy": accuracy, "faithfulness": per_metric["faithfulness"], "deletion@1": per_metric["deletion@1"]}


BENCH_ACC_HEADERS = ["test accuracy", "macro-F1", "epochs", "train time", "runs"]


def bench_caption(result) -> str:
    b = result.request
    t = b.train
    cfg = t.head_config
    samples = next(iter(result.heads.values()))["audit_samples"] if result.heads else None
    seeds = b.seed_values
    seed_text = f"seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return (
        f"{b.dataset} · {b.backbone} · {len(seeds)} {'seeds' if len(seeds) != 1 else 'seed'} ({seed_text}) · "
        f"d*={cfg.d_star} τ={cfg.tau:g} ψ={cfg.psi} score_hidden={cfg.score_hidden} · lr {t.train.lr:g} batch "
        f"{t.train.batch_size} ≤{t.train.epochs} epochs patience {t.train.patience} · audit {samples} test samples, "
        f"ablation {b.audit.ablation}, target {b.audit.target}"
        + (f", IG steps {b.audit.steps}" if "ig" in b.methods() else "")
        + " · mean ± std over seeds (std: n−1)"
    )


def bench_counts(result) -> str:
    """What a bench run did with each of its runs: '6 runs: 2 trained, 4 re-audited (checkpoint reused), 0 reused'."""
    n = len(result.runs)
    trained = n - result.reused - result.reaudited
    return (
        f"{n} run{'s' if n != 1 else ''}: {trained} trained, {result.reaudited} re-audited (checkpoint reused), "
        f"{result.reused} reused (training and audit)"
    )


def bench_rich_tables(result) -> list:
    rows = bench_table_rows(result)
    heads = list(result.heads)
    style = lambda text, is_best: f"[bold green]{text}[/]" if is_best else text
    t1 = _simple_table("laya bench: accuracy")
    t1.add_column("head", style="bold", no_wrap=True)
    for h in BENCH_ACC_HEADERS:
        t1.add_column(h, justify="right", no_wrap=True)
    for r in rows["accuracy"]:
        t1.add_row(r["head"], *(style(t, b) for t, b in r["cells"]))
    tables = [t1]
    for key, title in (
        ("faithfulness", "faithfulness (Spearman ρ with LOLO effects)"),
        ("deletion@1", "Deletion@1 (drop in p_ŷ when the top-ranked layer is removed)"),
    ):
        t = _simple_table(f"laya bench: {title}")
        t.add_column("method", style="bold", no_wrap=True)
        for h in heads:
            t.add_column(f"{h} head", justify="right", no_wrap=True)
        for r in rows[key]:
            name = f"[dim]{r['method']}[/]" if r["dim"] else r["method"]
            t.add_row(name, *(style(f"[dim]{c}[/]" if c == "n/a" else c, b) for c, b in r["cells"]))
        tables.append(t)
    return tables


def bench_markdown(result, title: str = "laya bench") -> str:
    rows = bench_table_rows(result)
    heads = list(result.heads)
    bold = lambda t, b: f"**{t}**" if b else t
    lines = [
        f"### {title}: {result.request.dataset}, {result.request.backbone}",
        "",
        *md_table(
            ["head", *BENCH_ACC_HEADERS],
            [[f"`{r['head']}`", *(bold(t, b) for t, b in r["cells"])] for r in rows["accuracy"]],
        ),
    ]
    for key, name in (
        ("faithfulness", "Faithfulness (Spearman ρ with the LOLO effects)"),
        ("deletion@1", "Deletion@1"),
    ):
        body = [
            [(f"_{r['method']}_" if r["dim"] else f"`{r['method']}`"), *(bold(t, b) for t, b in r["cells"])]
            for r in rows[key]
        ]
        lines += ["", f"#### {name}", "", *md_table(["method", *(f"{h} head" for h in heads)], body)]
    lines += ["", f"_{bench_caption(result)}_"]
    notes = []
    for h, e in result.heads.items():
        for n in e["notes"]:
            notes.append(f"{h} head: {n}")
    if notes:
        lines += ["", *(f"- note: {n}" for n in notes)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- export


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


# --------------------------------------------------------------------------- speed


def memory_rows(summary: dict) -> list[tuple[str, str, str, str]]:
    runs, base = summary["runs"], summary["runs"].get("baseline", {}).get("peak_rss_mb")
    out = []
    for name, r in runs.items():
        if name == "audit_memory":  # its memory is measured in its own child processes (its rows above)
            continue
        above = "" if base is None or name == "baseline" else f"{r['peak_rss_mb'] - base:+.0f}"
        cuda = f"{r['peak_cuda_mb']:.0f}" if "peak_cuda_mb" in r else "–"
        cpu = f"{r['cpu_s']:.1f}" if "cpu_s" in r else "–"
        out.append((name, f"{r['peak_rss_mb']:.0f}", above, cuda, f"{r['wall_s']:.1f}", cpu))
    return out


def speed_tables(summary: dict):
    """``laya bench speed``: every ratio side by side, then peak memory per benchmark process."""
    from rich.console import Group

    t = _simple_table(
        "laya speed benchmarks" + (" (--quick: smoke sizes, not a measurement)" if summary["quick"] else "")
    )
    for col, just in (
        ("", "right"),
        ("ratio", "left"),
        ("", "right"),
        ("", "right"),
        ("×", "right"),
        ("target", "left"),
    ):
        t.add_column(col, justify=just, no_wrap=True)
    notes = []
    for i, r in enumerate(summary["ratios"], 1):
        x = r["ratio"]
        t.add_row(
            f"({i})",
            r["what"],
            r["num"],
            r["den"],
            "n/a" if x != x else (f"{x:.2f}×" if x < 10 else f"{x:.0f}×"),
            r["target"],
        )
        notes.append(f"({i}) {r['note']}")
    m = _simple_table("peak memory per benchmark process (MiB)")
    for col in ("process", "peak RSS", "above baseline", "peak CUDA", "wall s", "CPU s"):
        m.add_column(col, justify="left" if col == "process" else "right")
    for row in memory_rows(summary):
        m.add_row(*row)
    foot = (
        f"{summary['device']}, {summary['torch_threads']} torch threads, {summary['cpu_count']} CPUs · "
        f"total {summary['wall_s']:.0f} s · "
        + (
            "--quick: every benchmark in one shared process (peak memory is its running peak)"
            if summary["quick"]
            else "each benchmark in a fresh process"
        )
    )
    for name, why in summary.get("skipped", {}).items():
        foot += f"\nskipped {name}: {why}"
    return Group(t, "\n".join(notes), "", m, foot)


# --------------------------------------------------------------------------- data scale


def data_scale_ratios(result: dict) -> list[tuple[str, float, str]]:
    """(what, ratio, target) of ``laya_cli.speed.data_scale``: streamed peak RSS largest / smallest size, and
    streamed / in-memory throughput at the smallest size, per rank count."""
    cells = {(c["mode"], c["ranks"], c["size"]): c for c in result["cells"]}
    lo, hi = min(result["sizes"]), max(result["sizes"])
    out = []
    for k in result["ranks"]:
        a, b = cells.get(("streamed", k, lo)), cells.get(("streamed", k, hi))
        if a and b and hi != lo:
            out.append(
                (
                    f"streamed peak RSS, {hi:,} / {lo:,} images, {k} rank(s)",
                    b["peak_rss_mb"] / a["peak_rss_mb"],
                    "≤ 1.2×",
                )
            )
        m = cells.get(("in-memory", k, hi))
        if b and m:
            out.append(
                (
                    f"peak RSS at {hi:,} images, streamed / in-memory, {k} rank(s)",
                    b["peak_rss_mb"] / m["peak_rss_mb"],
                    "",
                )
            )
        s, m = cells.get(("streamed", k, lo)), cells.get(("in-memory", k, lo))
        if s and m:
            out.append(
                (
                    f"extraction images/s at {lo:,}, streamed / in-memory, {k} rank(s)",
                    s["extract_ips"] / m["extract_ips"],
                    "≥ 0.9×",
                )
            )
            out.append(
                (
                    f"training rows/s at {lo:,}, streamed / in-memory, {k} rank(s)",
                    s["train_ips"] / m["train_ips"],
                    "≥ 0.9×",
                )
            )
    return out


def data_scale_table(result: dict):
    """``python -m laya_cli.speed.data_scale``: every cell side by side, then the target ratios."""
    from rich.console import Group

    t = _simple_table("extraction and head training on WebDataset shards: streamed vs in memory")
    for col in (
        "images",
        "ranks",
        "mode",
        "extract s",
        "extract img/s",
        "train s",
        "train rows/s",
        "peak RSS MiB",
        "per rank",
        "test acc",
    ):
        t.add_column(col, justify="left" if col == "mode" else "right", no_wrap=True)
    for c in sorted(result["cells"], key=lambda c: (c["size"], c["ranks"], c["mode"])):
        t.add_row(
            f"{c['size']:,}",
            str(c["ranks"]),
            c["mode"],
            f"{c['extract_s']:.1f}",
            f"{c['extract_ips']:,.0f}",
            f"{c['train_s']:.1f}",
            f"{c['train_ips']:,.0f}",
            f"{c['peak_rss_mb']:,.0f}",
            " / ".join(f"{x:,.0f}" for x in c["rss_per_rank"]),
            f"{c['test_accuracy']:.3f}",
        )
    r = _simple_table("ratios")
    for col in ("", "×", "target"):
        r.add_column(col, justify="left" if col != "×" else "right", no_wrap=True)
    for what, x, target in data_scale_ratios(result):
        r.add_row(what, f"{x:.2f}×", target)
    load = result.get("load_avg")
    foot = (
        f"{result['cpu_count']} CPUs{f', load average {load[0]:.1f} at the end' if load else ''} · "
        f"{result['epochs']} head epochs · {', '.join(f'{k}={v}' for k, v in result['settings'].items())} · "
        f"total {result['wall_s']:.0f} s · each cell a fresh torchrun job with a cold cache"
    )
    return Group(t, r, foot)


# --------------------------------------------------------------------------- info


def _maybe(value, missing: str = "not measured (no test split: trained with laya_cli.fit)") -> str:
    return missing if value is None else f"{value:.4f}"


def info_panel(summary: dict, path):
    """``laya info``: what a checkpoint holds (``summary``: ``checkpoint.checkpoint_summary``)."""
    from rich.panel import Panel

    table = Table.grid(padding=(0, 2))
    b, h, m = summary["backbone"], summary["head"], summary["metrics"]
    rows = [
        ("backbone", f"{b['name']} ({'fine-tuned' if b['finetune'] else 'frozen'}, pool {b['pool']})"),
        ("layers", f"{len(summary['layers'])}: " + ", ".join(summary["layers"])),
        ("head", f"{h['kind']}  " + "  ".join(f"{k}={v}" for k, v in h["config"].items())),
        (
            "classes",
            f"{len(summary['classes'])}: "
            + ", ".join(summary["classes"][:12])
            + (" …" if len(summary["classes"]) > 12 else ""),
        ),
        (
            "dataset",
            summary["dataset"]["name"]
            + (f" ({summary['dataset']['source']})" if summary["dataset"].get("source") else ""),
        ),
        *(
            [("unmatched", f"{len(u)} artist folder(s) match no row of artists.csv: " + ", ".join(u))]
            if (u := summary["dataset"].get("unmatched"))
            else []
        ),
        *(
            [("weights", f"{b['weights_source']}  sha256 {(b['weights_sha256'] or '')[:16]}")]
            if b.get("weights_source")
            else []
        ),
        *([("parameters", f"{b['parameters']:,} in the backbone")] if b.get("parameters") is not None else []),
        *(
            [
                (
                    "truncated",
                    f"after {t['layer']} (tap {t['depth']} of {t['of']}, {t['head']} head; "
                    f"{t['parameters']:,} of {t['parameters_full']:,} backbone parameters, "
                    f"{100 * t['flops_fraction']:.1f} % of its FLOPs)",
                )
            ]
            if (t := summary.get("truncated"))
            else []
        ),
        ("test accuracy", _maybe(m.get("test_accuracy"))),
        ("test macro-F1", _maybe(m.get("test_macro_f1"))),
        ("epochs", f"{m['epochs_run']} (best {m['best_epoch']})"),
        ("versions", "  ".join(f"{k} {v}" for k, v in summary["versions"].items())),
    ]
    for k, v in rows:
        table.add_row(f"[bold]{k}[/]", v)
    return Panel(table, title=f"laya checkpoint {path}", expand=False)


# --------------------------------------------------------------------------- depth
# Works on the JSON dict of ``depthing.DepthResult.to_dict()`` (so export's report can reuse it).


def human_flops(f) -> str:
    if f is None:
        return "n/a"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if f >= div:
            return f"{f / div:.3g} {unit}"
    return f"{f:.0f}"


def _pct(v, spec: str = "{:.1f} %") -> str:
    return _fmt(None if v is None else 100 * v, spec)


def _pp(v) -> str:
    return _fmt(None if v is None else 100 * v, "{:+.2f}")


def _seconds_img(v) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1e6:.1f} µs" if v < 1e-3 else f"{v * 1e3:.2f} ms"


def depth_table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the truncation table (one row per depth k)."""
    refit = any("refit_accuracy" in r for r in doc["truncation"])
    timed = doc["compute"].get("time_fraction") is not None
    header = ["k", "layer", "accuracy", "Δ pp", "macro-F1", "FLOPs/img", "block FLOPs", "FLOPs %"]
    header += ["time/img", "time %"] if timed else []
    header += ["refit acc.", "refit Δ pp"] if refit else []
    rows = []
    for r in doc["truncation"]:
        row = [
            str(r["k"]),
            r["layer"],
            _fmt(r["accuracy"], "{:.4f}"),
            _pp(r["delta"]),
            _fmt(r["macro_f1"], "{:.4f}"),
            human_flops(r["flops"]),
            human_flops(r["flops_block"]),
            _pct(r["flops_fraction"]),
        ]
        if timed:
            row += [_seconds_img(r["seconds_per_image"]), _pct(r["time_fraction"])]
        if refit:
            row += [_fmt(r.get("refit_accuracy"), "{:.4f}"), _pp(r.get("refit_delta"))]
        rows.append(row)
    return header, rows


def depth_exit_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The early-exit operating points (cheapest within 1 pp and 0.5 pp, per policy) and the oracle."""
    header = [
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
    rows = []
    ops = (doc.get("early_exit") or {}).get("operating_points", {})
    for name, op in ops.items():
        for policy, p in op["by_policy"].items():
            mark = " (best)" if op["best"] is not None and p is not None and p == op["best"] else ""
            if p is None:
                rows.append([f"within {name}", policy, "none", "", "", "", "", "", ""])
                continue
            rows.append(
                [
                    f"within {name}{mark}",
                    policy,
                    f"{p['threshold']:g}",
                    f"{p['accuracy']:.4f}",
                    _pp(p["delta"]),
                    f"{p['mean_depth']:.2f}",
                    _pct(p["flops_fraction"]),
                    _pct(1 - p["flops_fraction"]),
                    _pct(p["time_fraction"]),
                ]
            )
    o = doc["oracle"]
    rows.append(
        [
            "oracle (minimal sufficient depth)",
            o["source"],
            "—",
            f"{doc['full']['accuracy']:.4f}",
            _pp(0.0),
            f"{o['mean_depth']:.2f}",
            _pct(o["flops_fraction"]),
            _pct(1 - o["flops_fraction"]),
            _pct(o["time_fraction"]),
        ]
    )
    return header, rows


def depth_caption(doc: dict) -> str:
    c = doc["compute"]
    timed = (
        (
            f"; time: fastest of {c['time_repeats']} rounds of {c['time_batch']} images on {c['device']}, "
            f"full model {_seconds_img(c['seconds_full_model'])}/img"
        )
        if c.get("time_fraction")
        else ""
    )
    return (
        f"{doc['n_samples']:,} samples, {doc['head']} head, full model accuracy {doc['full']['accuracy']:.4f}; "
        f"accuracy at k: α masked above k and renormalised; FLOPs % and time % of the whole backbone "
        f"({human_flops(c['flops_full_model'])} FLOPs/img){timed}"
    )


def depth_rich_tables(doc: dict) -> list:
    header, rows = depth_table_rows(doc)
    t = _simple_table("laya depth: truncation", caption=depth_caption(doc))
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 1 else "right")
    for r in rows:
        t.add_row(*r)
    out = [t]
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        e = _simple_table(
            f"laya depth: early exit ({doc['early_exit']['source']} predictions; "
            f"cheapest operating points of the threshold sweep)"
        )
        for i, h in enumerate(header):
            e.add_column(h, justify="left" if i < 2 else "right")
        for r in rows:
            e.add_row(*r)
        out.append(e)
    return out


def depth_markdown(doc: dict, title: str = "laya depth") -> str:
    header, rows = depth_table_rows(doc)
    lines = [
        f"## {title}",
        "",
        depth_caption(doc) + ".",
        "",
        *md_table(header, rows, ["r", "l"] + ["r"] * (len(header) - 2)),
    ]
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        lines += [
            "",
            f"### Early exit ({doc['early_exit']['source']} predictions)",
            "",
            *md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2)),
        ]
    o = doc["oracle"]
    lines += [
        "",
        "### Minimal sufficient depth per class (samples whose prediction first equals the full model's at k)",
        "",
        *md_table(
            ["class", *[f"k={k}" for k in range(1, len(doc["layers"]) + 1)]],
            [[c, *map(str, h)] for c, h in o["by_class"].items()] + [["all", *map(str, o["histogram"])]],
        ),
    ]
    for note in doc.get("notes", []):
        lines += ["", f"> note: {note}"]
    return "\n".join(lines) + "\n"


def truncate_line(res) -> str:
    return (
        f"truncated after {res.layer} (tap {res.k}, {res.head} head): accuracy {res.accuracy:.4f} "
        f"(full {res.full_accuracy:.4f}, {100 * (res.accuracy - res.full_accuracy):+.2f} pp), backbone "
        f"{res.parameters:,} of {res.parameters_full:,} parameters, {100 * res.flops_fraction:.1f} % of its FLOPs "
        f"-> {res.out}"
    )


def depth_speed_table(rows: list[dict]) -> Table:
    """``python -m benchmarks.depth``: inference of the full vs the truncated model, side by side."""
    t = _simple_table(
        "inference: full model vs cut after tap K (measured side by side in one run)",
        caption="per image: fastest round (median round); time ratio = full / truncated of the fastest rounds "
        "(median of the per-round ratios)",
    )
    for h in (
        "model",
        "K",
        "layer",
        "images",
        "full",
        "truncated",
        "time ratio",
        "FLOPs ratio",
        "params kept",
        "same prediction",
    ):
        t.add_column(h, justify="left" if h in ("model", "layer") else "right")
    for r in rows:
        s, m = r["seconds_per_image"], r["median_seconds_per_image"]
        t.add_row(
            r["model"].rsplit("/", 1)[-1],
            f"{r['k']} of {r['layers']}",
            r["layer"],
            f"{r['images']:,}",
            f"{_seconds_img(s['full'])} ({_seconds_img(m['full'])})",
            f"{_seconds_img(s['truncated'])} ({_seconds_img(m['truncated'])})",
            f"{r['ratio']:.2f}× ({r['median_ratio']:.2f}×)",
            f"{r['flops_ratio']:.2f}×",
            f"{100 * r['parameters'] / r['parameters_full']:.1f} %",
            f"{100 * r['agreement']:.1f} %",
        )
    return t


# --------------------------------------------------------------------------- network scope (--scope network|both)

NETWORK_TITLE = "laya audit · network scope (total effects)"
HEAD_TITLE = "laya audit · head scope (direct effects)"
SCOPE_LOLO = "lolo_effects"  # the comparison's row for the effects themselves


def network_comparison(comparison: dict | None) -> dict | None:
    """The network-scope part of a ``--baseline`` comparison, keyed by method as the network table's rows
    (the comparison keys them ``network:METHOD``); None when there is none."""
    if not comparison:
        return None
    methods = {m[len("network:") :]: v for m, v in comparison.get("methods", {}).items() if m.startswith("network:")}
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
            f"{audit_caption(result)} · layer patched inside the backbone with its training-mean activation"
            if net.reference == "mean"
            else f"{audit_caption(result)} · layer patched inside the backbone with zeros"
        )
        + f" · {how}"
        + (f"\n{baseline_caption(comparison)}" if network_comparison(comparison) else "")
    )


def _scope_rows(result) -> tuple[list[list[str]], list[list[str]]]:
    comp = result.network.comparison
    methods = [
        [
            ("Δ (LOLO effects)" if m == SCOPE_LOLO else m),
            _fmt(v.get("spearman"), "{:.3f}"),
            _fmt(v.get("spearman_std"), "{:.3f}"),
            _fmt(v.get("undefined"), "{:d}"),
        ]
        for m, v in comp.methods.items()
    ]
    layers = [
        [
            name,
            _fmt(v.get("delta_head"), "{:.4f}"),
            _fmt(v.get("delta_network"), "{:.4f}"),
            _fmt(v.get("direct_share"), "{:.3f}"),
        ]
        for name, v in comp.layers.items()
    ]
    return methods, layers


SCOPE_METHOD_HEADER = ["method", "ρ(head, network)", "± std", "undef."]
SCOPE_LAYER_HEADER = ["layer", "mean Δ head", "mean Δ network", "direct share"]


def scope_tables(result) -> list[Table]:
    """--scope both: per method, Spearman between its head- and network-scope scores; per layer,
    the mean effects at both scopes and the direct share (mean Δ_head / mean Δ_network)."""
    if result.network is None or result.network.comparison is None:
        return []
    methods, layers = _scope_rows(result)
    tables = []
    for title, header, rows in (
        ("head vs network scope: how each method's layer ranking moves", SCOPE_METHOD_HEADER, methods),
        ("direct share of each layer's total effect", SCOPE_LAYER_HEADER, layers),
    ):
        table = _simple_table(title)
        table.add_column(header[0], style="bold", no_wrap=True)
        for h in header[1:]:
            table.add_column(h, justify="right", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        tables.append(table)
    return tables


def network_markdown(
    result, misses: list[str] | None = None, comparison: dict | None = None, drop_misses: list[str] | None = None
) -> str:
    """The network-scope table (and, for --scope both, the comparison tables) as Markdown; ``comparison``:
    a ``--baseline`` comparison (its network-scope part adds baseline and change columns); with ``misses``
    and ``drop_misses`` (a --scope network run, which has no head-scope section), the gates' outcome."""
    rows = _method_rows(result.network.methods)
    comparison = network_comparison(comparison)
    columns = _audit_columns(_default_columns(), comparison)  # what the network scope computes (docs/metrics.md)
    best = _bests(rows, columns)
    body = [[f"`{name}`", *_row_cells(name, row, columns, best, comparison, MD_MARKS)] for name, row in rows.items()]
    headers = [{"base": "baseline"}.get(kind, h) for h, _, _, _, _, kind in columns]
    lines = [f"### {NETWORK_TITLE}", "", *md_table(["method", *headers], body), "", f"_{network_caption(result)}_"]
    if comparison:
        lines += ["", f"_{baseline_caption(comparison)}_"]
    if result.network.comparison is not None:
        methods, layers = _scope_rows(result)
        lines += [
            "",
            "#### Head vs network scope",
            "",
            *md_table(SCOPE_METHOD_HEADER, methods),
            "",
            "#### Direct share of each layer's total effect",
            "",
            *md_table(SCOPE_LAYER_HEADER, layers),
        ]
    return "\n".join(lines + _closing_lines(result.network.notes, misses, drop_misses)) + "\n"
