"""``report.html``: one self-contained page (no external request) with every table and plot of an export.

The page embeds the PNGs that ``figures.py`` drew as base64 data URIs, so it can be kept as a
single CI artifact or mailed around and opened offline. Besides the tables and figures it holds:

- the per-sample **explorer** (``explorer.py``): every exported sample, filterable and sortable.
- a section per **attached result** (``exp.results``, e.g. ``laya export --audit audit.json``),
  rendered by ``RESULT_SECTIONS``: the audit (``--audit``) and the depth analysis (``--depth``,
  ``laya depth --json``, with its accuracy-vs-compute plot). An attached result without a renderer
  is shown as its raw JSON (collapsed), so nothing attached is ever dropped silently. Their tables come
  from the command's own module (``audit``, ``network``, ``depth``), which writes them for the terminal
  and Markdown from the same cells.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from .audit import html_methods_table, ig_steps_text, ties_text, verdict_lines
from .cells import fmt, html_table
from .collapse import collapse_text
from .depth import depth_section
from .explorer import EXPLORER_CSS, explorer_section
from .network import network_html
from .notes import docs_page

_CSS = (
    """
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1.5em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.1em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; } .grid { display: flex; flex-wrap: wrap; gap: 1em; }
.grid figure { flex: 1 1 480px; } .note { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.5em 0.8em; }
.warning { background: #fdecea; border-left: 4px solid #c62828; padding: 0.5em 0.8em; }
code { background: #f4f4f4; padding: 0 0.25em; border-radius: 3px; } footer { color: #888; margin-top: 3em; }
nav.toc { font-size: 0.92em; color: #555; } nav.toc a { margin-right: 1em; }
.pass { color: #2a7d34; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
td.bad { color: #c62828; font-weight: bold; } .best { font-weight: bold; color: #2a7d34; }
details pre { background: #f7f7f7; padding: 0.6em; overflow: auto; max-height: 30em; font-size: 0.85em; }
"""
    + EXPLORER_CSS
)

_CAPTIONS = {
    "global": "Mean α per layer over all exported samples (bars, ± 1 std) with the means over correct and "
    "incorrect predictions (markers); the dashed line is the uniform weighting 1/L = {uniform}. A bar twice that "
    "high takes twice a uniform share of the attention; 0.05 between two bars is 5 % of it.",
    "heatmap_all": "Mean α per true class and layer, all predictions. Colour from 0 to {top} (the larger of the "
    "largest mean α and 2/L), the uniform 1/L = {uniform} marked on the bar: two cells 0.05 apart differ by 5 % of "
    "the attention.",
    "heatmap_correct": "Mean α per true class and layer, correct predictions only (the same colour scale).",
    "heatmap_incorrect": "Mean α per true class and layer, incorrect predictions only (the same colour scale; grey: no "
    "errors).",
    "heatmap_shift": "Mean α(incorrect) − mean α(correct) per true class and layer. +0.05: the wrong predictions put "
    "5 % more of their attention on that layer than the right ones; the colour saturates at ±max(largest |Δ|, "
    "{shift_from}), so a shift under 0.01 stays near white.",
    "shift_ranking": "Jensen–Shannon divergence (base 2, bits) between the mean α of correct and of incorrect "
    "predictions, per true class. Ranked and drawn in colour only from {js_from} bits on (the dashed line): about "
    "12 % of the attention moved between two equally used layers; below it the two profiles are the same to a "
    "reader. The axis spans at least {js_axis} bits, so a tiny divergence draws a tiny bar.",
    "strip": "Exported samples by class (a correct and a wrong one of each class where there are) with their "
    "prediction and layer attention.",
    "depth": "Accuracy against mean backbone FLOPs (% of the full model): the model cut after each tap (α masked "
    "above k), heads refitted on the taps ≤ k, the early-exit threshold sweeps and the oracle.",
}


def caption(key: str, exp) -> str:
    """A figure's caption with the numbers its picture is drawn to (1/L, the colour scale's top, the sizes)."""
    from .figures import SHIFT_COLOUR_FROM, alpha_scale

    L = max(len(getattr(exp, "layers", None) or ()), 1)
    js_from = getattr(exp, "shift_ranked_from", 0.0) or 0.0
    numbers = {"uniform": f"{1 / L:.3f}", "shift_from": f"{SHIFT_COLOUR_FROM:g}", "js_from": f"{js_from:g}",
               "js_axis": f"{4 * js_from:g}", "top": f"{2 / L:.2f}"}  # fmt: skip
    if key.startswith("heatmap_") and getattr(exp, "has_alpha", False):
        mats = [exp.matrix(s) for s in ("all", "correct", "incorrect")]
        numbers["top"] = f"{alpha_scale(mats, L)[1]:.2f}"
    return _CAPTIONS[key].format(**numbers)


_LOADERS = {".csv": "pandas.read_csv", ".parquet": "pandas.read_parquet", ".npz": "numpy.load"}


def _num(v, spec: str = "{:.4f}") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return html.escape(str(v))
    return "n/a" if math.isnan(f) else spec.format(f)


def _img(folder: Path, name: str, alt: str) -> str:
    data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def render_html(
    exp, root: Path, pngs: dict[str, str], samples_file: str, plots: bool, thumbs: Sequence[str] | None = None
) -> str:
    """One self-contained page: model info, attached results, tables, every PNG embedded as base64 (no
    external links) and the per-sample explorer (``thumbs``: one base64 PNG per sample, or None)."""
    e = html.escape

    def figure(key: str) -> str:
        if key not in pngs:
            return ""
        text = caption(key, exp)
        return f"<figure>{_img(root / 'plots', pngs[key], text)}<figcaption>{e(text)}</figcaption></figure>"

    results = result_sections(getattr(exp, "results", None) or {}, {"depth": figure("depth")})
    toc = [("model", "Model"), *((anchor, title.split(":")[0]) for anchor, title, _ in results)]
    if exp.has_alpha:
        toc += [("global", "Global attention"), ("class-layer", "Class × layer"), ("shift", "Attention shift")]
    toc.append(("explorer", "Samples explorer"))
    parts = [
        *_page_head(exp),
        '<nav class="toc">' + "".join(f'<a href="#{a}">{e(t)}</a>' for a, t in toc) + "</nav>",
        '<h2 id="model">Model</h2>',
        _model_table(exp),
        *(part for anchor, title, body in results for part in (f'<h2 id="{anchor}">{e(title)}</h2>', body)),
        *(f'<p class="note">{e(note)}</p>' for note in exp.notes),
        *([] if plots else ['<p class="note">plots were skipped (--no-plots).</p>']),
        *(_attention_sections(exp, figure) if exp.has_alpha else []),
        *(["<h2>Samples</h2>", figure("strip")] if "strip" in pngs else []),
        explorer_section(exp, thumbs),
        *_files_section(exp, samples_file),
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _page_head(exp) -> list[str]:
    e, info = html.escape, exp.info
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>laya export — {e(str(info.get('backbone', '')))} / {e(str(info.get('head', '')))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>laya export: layer attention report</h1>",
        f'<p class="sub">{e(str(info.get("checkpoint", "")))} · {e(str(info.get("dataset", "")))} · '
        f"{exp.n:,} samples</p>",
    ]


def _model_table(exp) -> str:
    e, info, classes = html.escape, exp.info, exp.classes
    class_text = ", ".join(classes[:30]) + (f" … ({len(classes)} in all)" if len(classes) > 30 else "")
    ckpt_acc = info.get("checkpoint_test_accuracy")
    sample_note = (
        f"{exp.n:,} (seeded subset of the test split, --samples {info['samples']}, --seed {info.get('seed')})"
        if info.get("samples")
        else f"{exp.n:,} (the whole test split)"
    )
    rows = [
        ("checkpoint", e(str(info.get("checkpoint", "")))),
        ("backbone", e(str(info.get("backbone", "")))),
        ("head", e(str(info.get("head", "")))),
        ("layers", e(f"{len(exp.layers)}: " + ", ".join(exp.layers))),
        ("classes", e(f"{len(classes)}: {class_text}")),
        ("dataset", e(str(info.get("dataset", "")))),
        ("samples exported", e(sample_note)),
        ("accuracy on these samples", _num(exp.accuracy)),
        ("checkpoint test accuracy", _num(ckpt_acc) if ckpt_acc is not None else "n/a"),
    ]
    return html_table(None, [(f"<b>{k}</b>", v) for k, v in rows])


def rank_text(rank) -> str:
    """A class's rank in the attention shift; '—' where it is not ranked (below the practical size, or n/a)."""
    try:
        return str(int(rank))
    except (TypeError, ValueError):  # None, pandas' NA, NaN
        return "—"


def js_text(v) -> str:
    """A JS divergence in bits: 4 decimals, or 2 significant digits below 0.001 (never a 0.0000 that is not 0)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "n/a"
    if math.isnan(f):
        return "n/a"
    return f"{f:.4f}" if f >= 1e-3 or f == 0 else f"{f:.1e}"


def _attention_sections(exp, figure: Callable[[str], str]) -> list[str]:
    """A head with α: the global layer attention, per class × layer, and the attention shift per class."""
    parts = ['<h2 id="global">Global layer attention</h2>', *_collapse_parts(exp), figure("global"), _global_table(exp)]
    parts.append('<h2 id="class-layer">Class × layer attention</h2>')
    if exp.counts("incorrect").sum() == 0:
        parts.append('<p class="note">no incorrect predictions among the exported samples.</p>')
    heatmaps = ("heatmap_all", "heatmap_correct", "heatmap_incorrect", "heatmap_shift")
    parts.append('<div class="grid">' + "".join(figure(k) for k in heatmaps) + "</div>")
    parts += [
        '<h2 id="shift">Attention shift: correct vs incorrect</h2>',
        "<p>Per true class, the Jensen–Shannon divergence (base 2, in [0, 1]) between the mean α of its "
        "correctly and of its incorrectly predicted samples. Note that scipy's <code>jensenshannon</code> "
        "returns the JS <em>distance</em>, the square root of this divergence (also given below). A class is "
        f"ranked only from {getattr(exp, 'shift_ranked_from', 0.0):g} bits on (about 12 % of the attention moved "
        "between two layers); "
        "below that its rank is — (the shift is too small to mean anything). Classes with no incorrect (or no "
        "correct) predictions have no divergence (n/a) and come last.</p>",
        figure("shift_ranking"),
        _shift_table(exp),
    ]
    return parts


def _collapse_parts(exp) -> list[str]:
    """How much of the depth α uses over the exported samples, and the warning when it has collapsed onto one layer
    (docs/metrics.md, "α collapse")."""
    text = collapse_text(getattr(exp, "alpha_collapse", None), exp.layers, "<b>{}</b>", html.escape)
    if text is None:
        return []
    parts = [f'<p class="collapse">α over these samples: {text}.</p>']
    if warning := getattr(exp, "collapse_warning", None):
        if exp.alpha_collapse.get("finding"):  # trained against the network's effects: a finding, not an alarm
            parts.append(f'<p class="note"><b>note:</b> {html.escape(warning)}</p>')
        else:
            parts.append(f'<p class="warning" role="alert"><b>warning:</b> {html.escape(warning)}</p>')
    return parts


def _global_table(exp) -> str:
    """Per layer, α's mean ± std over all, the correct and the incorrect predictions (and contrib's over all)."""
    g = exp.global_profile
    subsets = ("all", "correct", "incorrect")
    header = ["layer"]
    for s in subsets:
        n = int(g[(g["quantity"] == "alpha") & (g["subset"] == s)]["n"].iloc[0])
        header.append(f"α {s} (n={n:,}) mean ± std")
    if exp.has_contrib:
        header.append("contrib all, mean ± std")
    rows = []
    for i, layer in enumerate(exp.layers):
        row = [html.escape(layer)]
        for s in subsets:
            r = g[(g["quantity"] == "alpha") & (g["subset"] == s) & (g["layer_index"] == i)].iloc[0]
            row.append(f"{_num(r['mean'])} ± {_num(r['std'])}")
        if exp.has_contrib:
            r = g[(g["quantity"] == "contrib") & (g["subset"] == "all") & (g["layer_index"] == i)].iloc[0]
            row.append(f"{_num(r['mean'], '{:+.4f}')} ± {_num(r['std'])}")
        rows.append(row)
    return html_table(header, rows, "l" + "r" * (len(header) - 1))


SHIFT_HEADER = [
    "rank",
    "class",
    "JS divergence",
    "JS distance",
    "n correct",
    "n incorrect",
    "most shifted layer",
    "Δ mean α there (incorrect − correct)",
]


def _shift_table(exp) -> str:
    """Every class ranked by the JS divergence between the mean α of its correct and incorrect predictions."""
    e = html.escape
    rows = []
    for r in exp.shift.itertuples(index=False):
        defined = r.js_divergence == r.js_divergence
        rows.append(
            [
                rank_text(r.rank),
                e(str(r.class_name)),
                js_text(r.js_divergence),
                _num(r.js_distance),
                str(r.n_correct),
                str(r.n_incorrect),
                e(str(r.most_shifted_layer)) if defined else "—",
                _num(r.shift, "{:+.4f}") if defined else "—",
            ]
        )
    return html_table(SHIFT_HEADER, rows, "rlrrrrlr")


def _files_section(exp, samples_file: str) -> list[str]:
    from .. import __version__

    e = html.escape
    files = "".join(f"<li><code>{e(f)}</code></li>" for f in exp.files)
    loader = f'{_LOADERS[Path(samples_file).suffix]}("{samples_file}")'
    return [
        "<h2>Files in this export</h2>",
        f"<ul>{files}</ul>",
        f"<p>Per-sample table: <code>{e(samples_file)}</code>, loaded with "
        f"<code>{e(loader)}</code>; columns are described in "
        f"{e(docs_page('export.md'))}.</p>",
        f"<footer>generated by laya {e(__version__)} on "
        f"{_dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}</footer>",
        "</body></html>",
    ]


# --------------------------------------------------------------------------- attached results (audit, depth)


def audit_section(doc: dict) -> str:
    """A ``laya audit --json`` document: the method table (with the baseline and the change, when the
    audit was compared with one), the network scope when audited, its settings, and the outcome of its gates."""
    e = html.escape
    s, methods = doc.get("settings", {}), doc.get("methods", {})
    base = doc.get("baseline") or {}
    compared = base.get("methods", {})
    caption = (
        f"{e(str(s.get('model', '')))} · {e(str(doc.get('n_samples', '?')))} samples of "
        f"{e(str(s.get('dataset', '')))} · "
        f"accuracy {e(fmt(doc.get('accuracy'), '{:.4f}'))} · {e(str(s.get('head', '?')))} head, "
        f"{len(doc.get('layers', []))} layers · target {e(str(s.get('target')))} · ablation "
        f"{e(str(s.get('ablation')))} · reduce {e(str(s.get('reduce')))} · {e(ig_steps_text(s))}"
    )
    tied = ties_text(s, doc.get("ties"))
    caption += f" · {e(tied)}" if tied else ""
    alpha = collapse_text(doc.get("alpha_collapse"), doc.get("layers"), escape=e)
    caption += f" · α {alpha}" if alpha else ""
    parts = [
        "<p>Faithfulness = Spearman ρ between a method's layer ranking and the true leave-one-layer-out effects "
        "on p_ŷ; Deletion@1 = the confidence lost when the method's top layer is removed "
        f"({e(docs_page('metrics.md'))}).</p>",
        *(f"<p><strong>{e(line)}</strong></p>" for line in verdict_lines(doc)),  # the question, verdict and flags
        *([html_methods_table(methods, compared, doc.get("ranking"))] if methods or not doc.get("network") else []),
        f'<p class="sub">{caption}</p>',
        *network_html(doc, compared),
    ]
    if base:
        acc = base.get("accuracy", {})
        parts.append(
            f"<p>Compared with the baseline <code>{e(str(base.get('path', '')))}</code>: accuracy "
            f"{e(fmt(acc.get('baseline'), '{:.4f}'))} → {e(fmt(acc.get('current'), '{:.4f}'))} "
            f"(Δ {e(fmt(acc.get('change'), '{:+.4f}'))}).</p>"
        )
        if base.get("settings_changed"):
            parts.append(
                f'<p class="note">settings differ from the baseline (allowed): '
                f"{e('; '.join(map(str, base['settings_changed'])))}</p>"
            )
    checks = [("fail-under", m) for m in (doc.get("fail_under") or {}).get("misses", [])]
    checks += [
        ("max-drop", str(c.get("message")))
        for c in base.get("checks", [])
        if isinstance(c, dict) and not c.get("passed") and not c.get("skipped")
    ]
    verdict = doc.get("verdict")
    if verdict:
        word = "PASS" if verdict.get("passed") else "FAIL"
        parts.append(
            f'<p>Gate: <span class="{word.lower()}">{word}</span> — {e(str(verdict.get("checks", 0)))} check(s), '
            f"{e(str(verdict.get('failed', 0)))} failed, {e(str(verdict.get('skipped', 0)))} skipped.</p>"
        )
    if checks:
        parts.append("<ul>" + "".join(f"<li><b>{e(g)}</b>: {e(str(msg))}</li>" for g, msg in checks) + "</ul>")
    for note in doc.get("notes", []):
        parts.append(f'<p class="note">{e(str(note))}</p>')
    return "\n".join(parts)


def result_sections(results: dict, figures: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(anchor, title, html) for every attached result; a result without a renderer shows as raw JSON.
    ``figures``: the embedded figure of a result that has one (the depth plot), by result key."""
    out = []
    for key, doc in results.items():
        anchor = "result-" + "".join(ch if ch.isalnum() else "-" for ch in key)
        if key in RESULT_SECTIONS:
            title, render = RESULT_SECTIONS[key]
            figure_html = (figures or {}).get(key)
            out.append((anchor, title, render(doc, figure_html) if figure_html else render(doc)))
        else:
            raw = html.escape(json.dumps(doc, indent=2, allow_nan=False, default=str))
            out.append(
                (
                    anchor,
                    f"{key} results",
                    f"<p>No dedicated view for <code>{html.escape(key)}</code> results yet; the document "
                    f"as attached:</p><details><summary>{html.escape(key)} (JSON)</summary><pre>{raw}</pre></details>",
                )
            )
    return out


# Attached results: key in ``exp.results`` -> (section title, renderer(doc[, figure html])).
RESULT_SECTIONS = {
    "audit": ("Audit: are the layer attributions faithful?", audit_section),
    "depth": ("Depth: how deep must the model be? (laya depth)", depth_section),
}
