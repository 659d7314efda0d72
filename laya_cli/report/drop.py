"""``laya depth --drop K``: the drop table (test accuracy per order and number of layers dropped), the chosen
order's measured cost, the goals line and the written checkpoint's line, from the drop JSON (docs/depth.md)."""

from __future__ import annotations

from .cells import align_of, fmt, md_table
from .depth import human_flops, rows_table, seconds_text
from .inert import md_text
from .notes import labelled

TIMING_LEFT = (1,)  # the text column: the dropped layers


def _order_left(header) -> tuple[int, ...]:
    return (0, len(header) - 1)  # the text columns: the order and the layers it drops first


def drop_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """One row per order: accuracy [Wilson 95 %] at k = 0..K, then the layers it drops first."""
    by: dict[str, list[dict]] = {}
    for r in doc["rows"]:
        by.setdefault(r["order"], []).append(r)
    K = max(r["k"] for r in doc["rows"])
    header = ["order", *[f"k={k}" for k in range(K + 1)], "dropped first"]
    rows = []
    for order, rs in by.items():
        cells = [f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" for r in rs]
        rows.append([order, *cells, ", ".join(doc["layers"][i] for i in doc["orders"][order][:K])])
    return header, rows


def drop_timing_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The chosen order at k = 0..K: what is dropped, FLOPs, measured time and the two speed-ups."""
    header = ["k", "dropped", "FLOPs %", "time/img", "speed-up", "FLOPs speed-up"]
    rows = [
        [
            str(t["k"]),
            ", ".join(t["dropped_layers"]) or "—",
            fmt(100 * t["flops_fraction"], "{:.1f} %"),
            seconds_text(t["seconds_per_image"], t.get("seconds_range")),
            "1 (itself)" if t["k"] == 0 else speedup_cell(t),
            fmt(t["flops_speedup"], "{:.2f}×"),
        ]
        for t in doc["timing"]
    ]
    return header, rows


def _rounds(t: dict) -> int | None:
    return t.get("rounds", t.get("timing_rounds"))


def _interval(t: dict) -> list[float] | None:
    """A timing's interval of the speed-up (``speedup_spread``: a table or checkpoint from before issue 64)."""
    return t.get("speedup_interval") or t.get("speedup_spread")


def _verdict(t: dict) -> str:
    """What a timing's rounds say (``timing.speedup_verdict``); read off the interval where it was not recorded."""
    if t.get("speedup_verdict"):
        return t["speedup_verdict"]
    iv, n = _interval(t), _rounds(t)
    if iv is None or not n or n < 3:
        return "single"
    from ..stats.timing import speedup_verdict

    wide = iv[1] - iv[0] > 0.2 * max(1.0, t.get("speedup") or 1.0)
    return speedup_verdict({"value": t.get("speedup"), "interval": iv, "noisy": wide})


def speedup_cell(t: dict) -> str:
    """A speed-up as the rounds measured it: '1.97× (1.85–2.10)' where the interval excludes 1, 'none (0.97–1.04)'
    where it holds 1 and is narrow, 'noisy (0.28–4.09)' where it is too wide to tell, '1.97×, 1 round' (no
    interval: not a measurement)."""
    verdict, iv, n = _verdict(t), _interval(t), _rounds(t)
    if t.get("speedup") is None:
        return "n/a"
    if verdict == "single":
        return f"{t['speedup']:.2f}×, {n} round{'s' if n != 1 else ''}"
    span = f"({iv[0]:.2f}–{iv[1]:.2f})"
    if verdict in ("faster", "slower"):
        return f"{t['speedup']:.2f}× {span}"
    if verdict.endswith(", noisy"):  # the direction is measured, one number for its size is not
        return f"{verdict.split(',')[0]} {span}"
    return f"{'noisy' if verdict == 'noisy' else 'none'} {span}"


def drop_caption(doc: dict) -> str:
    s = doc["settings"]
    return (
        f"orders chosen on {doc['n_val']:,} validation samples, accuracy on {doc['n_samples']:,} test samples "
        f"[Wilson 95 %]; a dropped layer is bypassed (its output := its input); the last tap is never dropped; "
        f"full backbone {human_flops(s['full_flops'])} FLOPs/input"
    )


def timing_caption(doc: dict) -> str:
    s = doc["settings"]
    n = s["time_repeats"]
    rounds = f"median of {n} rounds" if n > 1 else "a single timing round"
    caveat = (
        "; speed-up = full ÷ dropped round by round, its median (interval over the rounds): a number only where the "
        "interval excludes 1 and is within 20 % of it; faster/slower: it excludes 1 but is too wide for one number; "
        "none: it holds 1 and is narrow; noisy: it holds 1 and is too wide to tell on this machine"
        if n >= 3
        else " (under 3 rounds the times are single timings, not a measured speed-up)"
    )
    return (
        f"the {s['drop_order']} order: the model without those layers, {rounds} of {s['time_batch']} inputs on "
        f"{s['device']}, timed side by side{caveat}"
    )


def speed_text(w: dict) -> str:
    """What a written drop's timing says: a measured speed-up (its interval over 3 or more rounds excludes 1) with
    that interval; where it holds 1, that the machine was too noisy to tell, or that no speed-up was measured; under
    3 rounds, the FLOPs ratio and the timing as what it is; '' without a timing."""
    if not w.get("speedup"):
        return ""
    rounds, verdict, iv = _rounds(w), _verdict(w), _interval(w)
    if verdict.endswith(", noisy"):  # measured faster (or slower), but too wide for one number
        word = verdict.split(",")[0]
        return (
            f", {word} measured, too noisy for one ratio: full ÷ dropped {iv[0]:.2f}–{iv[1]:.2f}× over {rounds} "
            f"rounds (FLOPs {w.get('flops_speedup') or 1 / w['flops_fraction']:.2f}×)"
        )
    if verdict in ("faster", "slower"):
        factor = w["speedup"] if verdict == "faster" else 1 / w["speedup"]
        return (
            f", {factor:.2f}× {verdict} measured (median of {rounds} rounds; full ÷ dropped {iv[0]:.2f}–{iv[1]:.2f}×)"
        )
    flops = w.get("flops_speedup") or (1 / w["flops_fraction"] if w.get("flops_fraction") else None)
    ratio = f", {flops:.2f}× fewer FLOPs" if flops else ""
    if verdict == "noisy":
        return f"{ratio}; speed-up not measured: too noisy to tell ({iv[0]:.2f}–{iv[1]:.2f}× over {rounds} rounds)"
    if verdict == "same":
        return f"{ratio}; no measured speed-up ({iv[0]:.2f}–{iv[1]:.2f}× over {rounds} rounds holds 1)"
    timed = (
        "a single timing round"
        if rounds == 1
        else f"{rounds} timing rounds"
        if rounds
        else "timing rounds not recorded"
    )
    return f"{ratio} ({timed}: {w['speedup']:.2f}×, not a measured speed-up; --time-repeats 3 or more for one)"


def drop_lines(doc: dict) -> list[str]:
    """The goals at 25 % of the layers dropped, and what --out wrote."""
    lines = []
    if g := doc.get("goals"):
        near = "within 1 pp of" if g["within_1pp_of_greedy"] else "more than 1 pp below"
        ahead = "ahead of" if g["ahead_of_block_influence"] else "not ahead of"
        line = (
            f"at k={g['k']} (25 % of the layers): alpha {g['alpha']:.3f}, {near} greedy ({g['greedy']:.3f}), "
            f"{ahead} block influence ({g['block_influence']:.3f})"
        )
        if g.get("reverse") is not None:  # tables written before the reverse order have none
            line += f", {'no worse than' if g['no_worse_than_reverse'] else 'below'} reverse ({g['reverse']:.3f})"
        lines.append(line)
    if w := doc.get("written"):
        speed = speed_text(w)
        lines.append(
            f"dropped {', '.join(w['layers'])} ({w['order']} order): accuracy {w['test_accuracy']:.4f} "
            f"(full {w['full_test_accuracy']:.4f}, {100 * (w['test_accuracy'] - w['full_test_accuracy']):+.2f} pp), "
            f"backbone {w['parameters']:,} of {w['parameters_full']:,} parameters, "
            f"{100 * w['flops_fraction']:.1f} % of its FLOPs{speed} -> {w['out']}"
        )
    return lines


def drop_rich_tables(doc: dict) -> list:
    header, rows = drop_rows(doc)
    out = [rows_table("laya depth --drop: test accuracy", header, rows, _order_left(header), caption=drop_caption(doc))]
    if doc.get("timing"):
        header, rows = drop_timing_rows(doc)
        out.append(rows_table("laya depth --drop: cost", header, rows, TIMING_LEFT, caption=timing_caption(doc)))
    return out


def drop_markdown(doc: dict, title: str = "laya depth --drop") -> str:
    header, rows = drop_rows(doc)
    lines = [f"## {title}", "", drop_caption(doc) + ".", ""]
    lines += md_table(header, rows, align_of(header, _order_left(header)))
    if doc.get("timing"):
        header, rows = drop_timing_rows(doc)
        lines += ["", f"### Cost ({timing_caption(doc)})", "", *md_table(header, rows, align_of(header, TIMING_LEFT))]
    lines += [f"\n{line}" for line in drop_lines(doc)]
    for note in doc.get("notes", []):
        lines += ["", f"> {md_text(labelled(note))}"]
    return "\n".join(lines) + "\n"
