"""Tables of ``--task lm`` figures: per layer, the logit and tuned lenses' KL to the model's final next-token
distribution and cross-entropy (bits per token, the tuned lens paper's measures), LAYA's mean α; then the heads."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .cells import align_of, justify, md_table, plain_row, rich_table
from .inert import md_text, rich_text
from .info import training_text
from .notes import docs_page, labelled

HEADER = ("layer", "logit lens KL", "logit lens CE", "tuned lens KL", "tuned lens CE", "laya mean α")


def number(value, spec: str) -> str:
    """``value`` in ``spec``, never a negative zero ('-0.0000': a KL of 0 rounded from below)."""
    text = spec.format(value)
    return text[1:] if text.startswith("-") and float(text) == 0 else text


LENS_FIGURES = ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce")


def _lens_cell(r: dict, k: str, value) -> str:
    """A lens figure of one layer: "—" where it was not measured (``--lens logit|none``); its 95 % half-width over
    the sampled positions beside it where there is one (``laya train``; bench passes its own intervals)."""
    if r.get(k) is None:
        return "—"
    if value is number and r.get(f"{k}_ci") is not None:
        return f"{number(r[k], '{:.4f}')} ± {r[f'{k}_ci']:.4f}"
    return value(r[k], "{:.4f}")


def lm_rows(metrics: dict, layers: Sequence[str], value: Callable[[object, str], str] = number) -> list[list[str]]:
    """Per layer, then the LAYA head and the model; ``value`` formats each figure (a number; ``laya bench --task
    lm`` passes its mean and interval over seeds)."""
    rows = [
        [f"{i + 1} {name}"] + [_lens_cell(r, k, value) for k in LENS_FIGURES] + [value(r["alpha"], "{:.3f}")]
        for i, (name, r) in enumerate(zip(layers, metrics["layers"]))
    ]
    heads = metrics["heads"]
    rows.append(["laya (head)", value(heads["laya"]["kl"], "{:.4f}"), value(heads["laya"]["ce"], "{:.4f}"), "", "",
                 "1.000"])  # fmt: skip
    rows.append(["last (the model)", "0.0000", value(heads["last"]["ce"], "{:.4f}"), "", "", ""])
    return rows


def caption(metrics: dict) -> str:
    asked, tokens = metrics.get("tokens_asked"), metrics["tokens"]  # --eval-tokens: read in whole batches
    why = ""
    if asked and asked < tokens:
        why = f" (--eval-tokens {asked:,}, rounded up to whole batches)"
    elif asked and asked > tokens:  # the held-out text ran out first (issue 71: it said 'rounded up')
        why = f" (all the held-out text holds; --eval-tokens {asked:,})"
    text = f"held-out, {tokens:,} positions{why}; KL to the model's final distribution and CE, bits per token"
    lens = metrics.get("lens") or {}
    if lens.get("kind") == "none":
        return text + "; no lens measured (--lens none)"
    if lens.get("positions") and lens.get("tokens", 0) < tokens:
        share = (
            f", spread over --eval-tokens {asked:,}: this text's {tokens:,} got their share" if asked and asked > tokens
            else ""
        )  # fmt: skip
        text += (
            f"; lenses on {lens['tokens']:,} sampled positions (--lens-tokens {lens['positions']:,}{share}), "
            "± 95 % interval"
        )
    return text + ("; logit lens only (--lens logit)" if lens.get("kind") == "logit" else "")


def _terminal(title: str, header: Sequence[str], rows, caption: str | None = None, left: Sequence[int] = (0,)):
    """One rich table of ``rows`` under ``header``: the ``left`` columns text, the others numbers."""
    table = rich_table(title, caption=caption)
    for name, align in zip(header, align_of(header, left)):
        table.add_column(name, justify=justify(align))
    for row in rows:
        table.add_row(*plain_row(row))
    return table


def lm_layers_table(metrics: dict, layers: Sequence[str]):
    return _terminal("language model: layers and heads", HEADER, lm_rows(metrics, layers), caption(metrics))


def lm_markdown(metrics: dict, layers: Sequence[str]) -> str:
    rows = [[md_text(c) for c in r] for r in lm_rows(metrics, layers)]
    return "\n".join([md_text(caption(metrics)), ""] + md_table(HEADER, rows)) + "\n"


def _lens_words(summary: dict) -> str:
    kind = ((summary.get("metrics") or {}).get("lens") or {}).get("kind", "tuned")
    return {"tuned": "; tuned lens", "logit": "; logit lens (no tuned lens: --lens logit)"}.get(kind, "; no lens")


LM_SHOWN = ("backbone", "dataset", "out")  # the training options laya info shows in rows of their own


def lm_info_panel(summary: dict, path):
    """``laya info`` of a ``--task lm`` checkpoint: what it was trained on, then the layers-and-heads table."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    b, d, h = summary["backbone"], summary["dataset"], summary["head"]
    text = b.get("text") or {}
    rows = [
        ("task", f"language model (next token at every position), objective {d.get('objective')}"),
        ("backbone", f"{b['name']} (frozen; SHA-256 {(b.get('weights_sha256') or '')[:16]}…)"),
        ("layers", f"{len(summary['layers'])}: " + ", ".join(summary["layers"])),
        ("heads", f"{h['kind']}  " + "  ".join(f"{k}={v}" for k, v in h["config"].items()) + _lens_words(summary)),
        ("text", f"{d['name']}, blocks of {d.get('block_size')} tokens, tokenizer: {text.get('source')}"),
        ("epochs", str(summary["epochs"])),
        *(
            [("training", t)]
            if (t := training_text(summary.get("train_config"), LM_SHOWN, {"block_size": d.get("block_size")}))
            else []
        ),
    ]
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/]", rich_text(value))
    return Panel(Group(grid, lm_layers_table(summary["metrics"], summary["layers"])), title=rich_text(path))


# --------------------------------------------------------------------------- laya depth on a language model

POLICY_NAMES = {
    "alpha_mass": "α mass",
    "p_max": "p_max (CALM)",
    "tuned_p_max": "tuned lens p_max",
    "oracle": "oracle (argmax agreement)",
}


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.2f} %"


def exit_sweep_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """One row per threshold: each policy's layer computations saved and cross-entropy increase."""
    policies = [p for p in POLICY_NAMES if p != "oracle"]
    header = ["threshold"] + [f"{POLICY_NAMES[p]} {what}" for p in policies for what in ("saved", "ΔCE")]
    by = {(p["policy"], p["threshold"]): p for p in result["points"]}
    thresholds = sorted({p["threshold"] for p in result["points"] if p["threshold"] is not None})
    rows = [
        [f"{t:g}"] + [c for p in policies for c in (f"{100 * by[p, t]['saving']:.1f} %", _pct(by[p, t]["ce_increase"]))]
        for t in thresholds
    ]
    return header, rows


def exit_best_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """Each policy's best point within 1 % of the model's cross-entropy (what the goals read), beside its best
    within 1 % of its own full-depth prediction; and the oracle."""
    header = ["policy", "threshold", "CE bits", "ΔCE vs the model", "ΔCE vs its full depth", "mean layers",
              "layers saved", "saved within 1 % of its own full depth"]  # fmt: skip
    own = {**result["best"], "oracle": result["oracle"]}
    rows = []
    for policy, point in [*result["best_vs_model"].items(), ("oracle", result["oracle"])]:
        own_saving = "" if own[policy] is None else f"{100 * own[policy]['saving']:.1f} %"
        if point is None:
            rows.append([POLICY_NAMES[policy], "none within 1 %", "", "", "", "", "", own_saving])
            continue
        t = "" if point["threshold"] is None else f"{point['threshold']:g}"
        layers = f"{point['mean_layers']:.2f} of {len(result['layers'])}"
        saved = f"{100 * point['saving']:.1f} %"
        rows.append([POLICY_NAMES[policy], t, f"{point['ce_bits']:.4f}", _pct(point["ce_over_model"]),
                     _pct(point["ce_increase"]), layers, saved, own_saving])  # fmt: skip
    return header, rows


def exit_caption(result: dict) -> str:
    g = result["goals"]
    return (
        f"{result['tokens']:,} held-out positions; the model {result['model_ce_bits']:.4f} bits, laya "
        f"{result['laya_ce_bits']:.4f} bits per token. α-guided exit saves {100 * g['alpha_saving']:.1f} % of layer "
        f"computations within 1 % of the model's CE ({100 * g['alpha_saving_own']:.1f} % within 1 % of the head's "
        f"own full-depth CE), the oracle (each token stops where the truncated head's argmax first agrees with the "
        f"full head's: a reference, not a bound on CE) {100 * g['oracle_saving']:.1f} %. laya's own design goals "
        f"for α-guided exit ({docs_page('lm.md')}; a yardstick of the method, not a verdict on this model): "
        f"≥ 20 % saved, {'reached' if g['alpha_saves_20pc_within_1pc'] else 'not reached'}; ≥ 80 % of the oracle's "
        f"saving, {'reached' if g['alpha_reaches_80pc_of_oracle'] else 'not reached'}"
    )


def exit_rich_tables(result: dict) -> list:
    return [
        _terminal("early exit per token: the threshold sweep", *exit_sweep_rows(result)),
        _terminal(
            "early exit per token: within 1 % of the model's cross-entropy",
            *exit_best_rows(result),
            exit_caption(result),
        ),  # fmt: skip
    ]


def exit_markdown(result: dict) -> str:
    sweep, best = exit_sweep_rows(result), exit_best_rows(result)
    lines = ["# laya depth: early exit per token", "", exit_caption(result), ""]
    lines += md_table(*best) + ["", "## The threshold sweep", ""] + md_table(*sweep)
    for note in result.get("notes", []):  # the flags, as a classifier's depth page writes its notes
        lines += ["", f"> {md_text(labelled(note))}"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- laya audit on a language model


def by_position_rows(by_position: dict) -> tuple[list[str], list[list[str]]]:
    """Faithfulness (and Deletion@1) per method and scope in ranges of the position in the block."""
    first = next(iter(by_position.values()))
    header = ["scope", "method"] + [f"t {p} ({n:,} positions)" for p, n in zip(first["positions"], first["n"])]
    rows = []
    for scope, block in by_position.items():
        for method, values in block["methods"].items():
            defined = values.get("defined") or [None] * len(values["faithfulness"])  # an audit from before: none
            cells = [
                "n/a" if v is None or v != v else f"{v:.3f}" + ("" if k is None else f" ({k:,})")
                for v, k in zip(values["faithfulness"], defined)
            ]
            rows.append([scope, method, *cells])
    return header, rows


def by_position_table(by_position: dict):
    caption = (
        "mean Spearman ρ over the positions in range where it is defined (in brackets: how many; the header: all the "
        "range's positions; ρ is undefined where the effects or the scores do not vary)"
    )
    return _terminal("faithfulness by position in the block", *by_position_rows(by_position), caption, left=(0, 1))


# --------------------------------------------------------------------------- laya bench --task lm


def mean_interval(stats: dict, spec: str) -> str:
    """A figure over seeds: its mean ± the half-width of its 95 % t-interval (the mean alone with one seed)."""
    m, lo, hi = stats.get("mean"), stats.get("ci_low"), stats.get("ci_high")
    if m is None:
        return "n/a"
    return spec.format(m) + ("" if lo is None or hi is None else " ± " + spec.format((hi - lo) / 2))


AUDIT_HEADER = ("method", "faithfulness", "Deletion@1", "Deletion@1 norm.")


def bench_audit_rows(entry: dict) -> list[list[str]]:
    audit = entry.get("audit") or {}
    keys = ("faithfulness", "deletion@1", "deletion@1_normalised")
    return [[m] + [mean_interval(v[k], "{:.3f}") for k in keys] for m, v in audit.items()]


def bench_caption(doc: dict, objective: str) -> str:
    e = doc["objectives"][objective]
    return (
        f"--objective {objective}: {e['runs']} seed{'s' if e['runs'] != 1 else ''} "
        f"({', '.join(map(str, e['seeds']))}); held-out, {e['tokens']:,} positions; bits per token; mean ± half-width "
        "of the 95 % t-interval over seeds (the logit lens and the model are not trained: the same in every run)"
    )


def lm_bench_tables(doc: dict) -> list:
    tables = []
    for objective, entry in doc["objectives"].items():
        rows = lm_rows(entry, doc["bench"]["layers"], mean_interval)
        tables.append(_terminal(f"laya bench --task lm: layers and heads ({objective})", HEADER, rows,
                                bench_caption(doc, objective)))  # fmt: skip
        if entry.get("audit"):
            caption = f"per-token audit at head scope, {entry['audit_samples']:,} held-out positions per run"
            tables.append(_terminal(f"laya bench --task lm: audit ({objective})", AUDIT_HEADER,
                                    bench_audit_rows(entry), caption))  # fmt: skip
    return tables


def lm_bench_markdown(doc: dict) -> str:
    b = doc["bench"]
    lines = [f"# laya bench --task lm: {md_text(b['backbone'])} on {md_text(b['dataset'])}", ""]
    for objective, entry in doc["objectives"].items():
        lines += [f"## --objective {objective}", "", bench_caption(doc, objective), ""]
        lines += md_table(HEADER, lm_rows(entry, b["layers"], mean_interval))
        if entry.get("audit"):
            lines += ["", f"Per-token audit at head scope, {entry['audit_samples']:,} positions per run:", ""]
            lines += md_table(AUDIT_HEADER, bench_audit_rows(entry))
        lines.append("")
    return "\n".join(lines)
