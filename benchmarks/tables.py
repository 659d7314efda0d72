"""The speed benchmarks' tables for the terminal: ``python -m benchmarks`` (every ratio side by side, then peak
memory per benchmark process), ``python -m benchmarks.data_scale`` and ``python -m benchmarks.depth``.
"""

from __future__ import annotations

from rich.table import Table

from laya_cli.report.cells import rich_table
from laya_cli.report.depth import seconds_per_image


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
    """``python -m benchmarks``: every ratio side by side, then peak memory per benchmark process."""
    from rich.console import Group

    t = rich_table("laya speed benchmarks" + (" (--quick: smoke sizes, not a measurement)" if summary["quick"] else ""))
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
    m = rich_table("peak memory per benchmark process (MiB)")
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
    """(what, ratio, target) of ``benchmarks.data_scale``: streamed peak RSS largest / smallest size, and
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
    """``python -m benchmarks.data_scale``: every cell side by side, then the target ratios."""
    from rich.console import Group

    t = rich_table("extraction and head training on WebDataset shards: streamed vs in memory")
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
    r = rich_table("ratios")
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


def depth_speed_table(rows: list[dict]) -> Table:
    """``python -m benchmarks.depth``: inference of the full vs the truncated model, side by side."""
    t = rich_table(
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
            f"{seconds_per_image(s['full'])} ({seconds_per_image(m['full'])})",
            f"{seconds_per_image(s['truncated'])} ({seconds_per_image(m['truncated'])})",
            f"{r['ratio']:.2f}× ({r['median_ratio']:.2f}×)",
            f"{r['flops_ratio']:.2f}×",
            f"{100 * r['parameters'] / r['parameters_full']:.1f} %",
            f"{100 * r['agreement']:.1f} %",
        )
    return t
