"""``laya bench``'s tables, for the terminal and Markdown: accuracy per head, then faithfulness and Deletion@1
per method and head (mean ± std over seeds; the best of each column marked)."""

from __future__ import annotations

from .cells import EXCLUDES_0_LEGEND, MD_MARKS, RICH_MARKS, Cell, best, difference_cell, marked, md_table, rich_table
from .inert import md_text
from .notes import labelled

BENCH_ACC_HEADERS = ["test accuracy", "macro-F1", "epochs", "train time", "runs"]
BENCH_METRICS = {  # metric -> (terminal title, Markdown title)
    "faithfulness": ("faithfulness (Spearman ρ with LOLO effects)", "Faithfulness (Spearman ρ with the LOLO effects)"),
    "deletion@1": ("Deletion@1 (drop in p_ŷ when the top-ranked layer is removed)", "Deletion@1"),
}
# Deletion@1's reference rows: they depend only on Δ, so they come from the random method, always available.
DELETION_REFERENCES = (("oracle", "deletion@1_oracle"), ("random exp.", "deletion@1_random"))


def _pm(stats: dict, spec: str = "{:.4f}", interval: bool = True) -> str:
    """mean ± std, and the 95 % t-interval over seeds in brackets where there is one (two or more seeds)."""
    m, s = stats.get("mean"), stats.get("std")
    if m is None:
        return "n/a"
    text = spec.format(m) + ("" if s is None else " ± " + spec.format(s))
    lo, hi = stats.get("ci_low"), stats.get("ci_high")
    if interval and lo is not None and hi is not None:
        text += f" [{spec.format(lo)}, {spec.format(hi)}]"
    return text


def _seconds(stats: dict) -> str:
    m = stats.get("mean")
    return "n/a" if m is None else _pm(stats, "{:.1f}" if m < 10 else "{:.0f}", interval=False) + " s"


def _best_if(text: str, is_best: bool) -> Cell:
    return Cell(text, "best" if is_best else "dim" if text == "n/a" else None)


def bench_accuracy_rows(result) -> list[dict]:
    """Per head: accuracy and macro-F1 (the best of each marked), epochs, train time and runs."""
    heads = result.heads
    top = {k: best(e[k]["mean"] for e in heads.values()) for k in ("test_accuracy", "test_macro_f1")}
    return [
        {
            "head": h,
            "cells": [
                Cell(_pm(e["test_accuracy"]), "best" if e["test_accuracy"]["mean"] == top["test_accuracy"] else None),
                Cell(_pm(e["test_macro_f1"]), "best" if e["test_macro_f1"]["mean"] == top["test_macro_f1"] else None),
                Cell(_pm(e["epochs_run"], "{:.1f}", interval=False)),
                Cell(_seconds(e["train_seconds"])),
                Cell(str(e["runs"])),
            ],
        }
        for h, e in heads.items()
    ]


def bench_metric_rows(result, key: str) -> list[dict]:
    """Per method, ``key`` on each head (the best method of a head marked, random aside; n/a dimmed);
    Deletion@1 adds its oracle and random-expectation rows (``dim``: rows that are references, not methods)."""
    heads, methods = result.heads, result.request.methods()
    top = {
        h: best(e["methods"][m][key]["mean"] for m in methods if m != "random" and e["methods"][m]["available"])
        for h, e in heads.items()
    }
    rows = []
    for m in methods:
        cells = []
        for h, e in heads.items():
            s = e["methods"][m]
            if not s["available"]:
                cells.append(Cell("n/a", "dim"))
                continue
            mean = s[key]["mean"]
            cells.append(_best_if(_pm(s[key], "{:.3f}"), m != "random" and mean is not None and mean == top[h]))
        rows.append({"method": m, "cells": cells, "dim": False})
    if key == "deletion@1":
        for label, k in DELETION_REFERENCES:
            cells = [_best_if(_pm(e["methods"]["random"][k], "{:.3f}"), False) for e in heads.values()]
            rows.append({"method": label, "cells": cells, "dim": True})
    return rows


def bench_table_rows(result) -> dict:
    """The cells of the three tables (the rich and Markdown renderers write them)."""
    return {"accuracy": bench_accuracy_rows(result), **{k: bench_metric_rows(result, k) for k in BENCH_METRICS}}


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
        + " · mean ± std over seeds (std: n−1) [95 % t-interval over seeds]"
    )


def bench_counts(result) -> str:
    """What a bench run did with each of its runs: '6 runs: 2 trained, 4 re-audited (checkpoint reused), 0 reused'."""
    n = len(result.runs)
    trained = n - result.reused - result.reaudited
    return (
        f"{n} run{'s' if n != 1 else ''}: {trained} trained, {result.reaudited} re-audited (checkpoint reused), "
        f"{result.reused} reused (training and audit)"
    )


PAIRED_HEADER = ["on head", "difference", "Δ faithfulness", "Δ deletion@1", "Δ normalised"]
PAIRED_CAPTION = (
    "paired by run: a method − the laya method on the same head and seed, or a head − the laya head on the same "
    f"seed (its test accuracy, then each method); mean [95 % t-interval over seeds]; {EXCLUDES_0_LEGEND}"
)


def _diff(block: dict | None, spec: str = "{:+.3f}") -> Cell:
    if not block or block.get("mean") is None:
        return Cell("n/a", "dim")
    text = spec.format(block["mean"])
    lo, hi = block.get("ci_low"), block.get("ci_high")
    if lo is not None and hi is not None:
        text += f" [{spec.format(lo)}, {spec.format(hi)}]"
    return difference_cell(text, lo, hi)


def bench_paired_rows(result) -> list[list[Cell]]:
    """The paired differences against laya (training/bench_stats.py), one row per (head, method) pair."""
    rows = []
    for h, e in result.heads.items():
        for m, block in e["methods"].items():
            if "vs_laya" in block:
                vs = block["vs_laya"]
                rows.append([Cell(h), Cell(f"{m} − laya"), *(_diff(vs.get(k)) for k in PAIRED_KEYS)])
        head_vs = e.get("vs_laya_head") or {}
        if head_vs:
            acc = _diff(head_vs.get("test_accuracy"), "{:+.4f}")
            rows.append([Cell(h), Cell("accuracy − laya head"), acc, Cell(""), Cell("")])
            for m, vs in head_vs.items():
                if m != "test_accuracy":
                    rows.append([Cell(h), Cell(f"{m}: − laya head"), *(_diff(vs.get(k)) for k in PAIRED_KEYS)])
    return rows


PAIRED_KEYS = ("faithfulness", "deletion@1", "deletion@1_normalised")


def bench_rich_tables(result) -> list:
    rows = bench_table_rows(result)
    t1 = rich_table("laya bench: accuracy")
    t1.add_column("head", style="bold", no_wrap=True)
    for h in BENCH_ACC_HEADERS:
        t1.add_column(h, justify="right", no_wrap=True)
    for r in rows["accuracy"]:
        t1.add_row(r["head"], *marked(r["cells"], RICH_MARKS))
    tables = [t1]
    for key, (title, _) in BENCH_METRICS.items():
        t = rich_table(f"laya bench: {title}")
        t.add_column("method", style="bold", no_wrap=True)
        for h in result.heads:
            t.add_column(f"{h} head", justify="right", no_wrap=True)
        for r in rows[key]:
            t.add_row(f"[dim]{r['method']}[/]" if r["dim"] else r["method"], *marked(r["cells"], RICH_MARKS))
        tables.append(t)
    if paired := bench_paired_rows(result):
        t = rich_table("laya bench: paired differences against laya", caption=PAIRED_CAPTION, caption_justify="left")
        for i, h in enumerate(PAIRED_HEADER):
            t.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
        for r in paired:
            t.add_row(*marked(r, RICH_MARKS))
        tables.append(t)
    return tables


def bench_markdown(result, title: str = "laya bench") -> str:
    rows = bench_table_rows(result)
    lines = [
        f"### {title}: {md_text(result.request.dataset)}, {md_text(result.request.backbone)}",
        "",
        *md_table(
            ["head", *BENCH_ACC_HEADERS], [[f"`{r['head']}`", *marked(r["cells"], MD_MARKS)] for r in rows["accuracy"]]
        ),
    ]
    for key, (_, name) in BENCH_METRICS.items():
        body = [
            [(f"_{r['method']}_" if r["dim"] else f"`{r['method']}`"), *marked(r["cells"], MD_MARKS)] for r in rows[key]
        ]
        lines += ["", f"#### {name}", "", *md_table(["method", *(f"{h} head" for h in result.heads)], body)]
    if paired := bench_paired_rows(result):
        body = [marked(r, MD_MARKS) for r in paired]
        lines += ["", "#### Paired differences against `laya`", "", *md_table(PAIRED_HEADER, body, "llrrr")]
        lines += ["", f"_{PAIRED_CAPTION}_"]
    lines += ["", f"_{md_text(bench_caption(result))}_"]
    notes = [f"{h} head: {n}" for h, e in result.heads.items() for n in e["notes"]]
    if notes:
        lines += ["", *(f"- {md_text(labelled(n))}" for n in notes)]
    return "\n".join(lines) + "\n"
