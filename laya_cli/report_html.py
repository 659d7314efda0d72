"""``report.html``: one self-contained page (no external request) with every table and plot of an export.

The page embeds the PNGs that ``figures.py`` drew as base64 data URIs, so it can be kept as a
single CI artifact or mailed around and opened offline.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import math
from pathlib import Path
from typing import Sequence

_CSS = """
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
code { background: #f4f4f4; padding: 0 0.25em; border-radius: 3px; } footer { color: #888; margin-top: 3em; }
"""

_CAPTIONS = {
    "global": "Mean α per layer over all exported samples (bars, ± 1 std) with the means over correct and "
              "incorrect predictions (markers); the dashed line is the uniform weighting 1/L.",
    "heatmap_all": "Mean α per true class and layer, all predictions.",
    "heatmap_correct": "Mean α per true class and layer, correct predictions only.",
    "heatmap_incorrect": "Mean α per true class and layer, incorrect predictions only (grey: no errors).",
    "heatmap_shift": "Mean α(incorrect) − mean α(correct) per true class and layer.",
    "shift_ranking": "Jensen–Shannon divergence (base 2) between the mean α of correct and of incorrect "
                     "predictions, per true class, ranked.",
    "strip": "The first exported samples with their prediction and layer attention.",
    "depth": "Accuracy against mean backbone FLOPs (% of the full model): the model cut after each tap (α masked "
             "above k), heads refitted on the taps ≤ k, the early-exit threshold sweeps and the oracle.",
}


_LOADERS = {".csv": "pandas.read_csv", ".parquet": "pandas.read_parquet", ".npz": "numpy.load"}


def _num(v, fmt="{:.4f}") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return html.escape(str(v))
    return "n/a" if math.isnan(f) else fmt.format(f)


def _table(header: Sequence[str] | None, rows: Sequence[Sequence], numeric: Sequence[bool] | None = None) -> str:
    numeric = numeric or [False] * max(len(header or ()), max((len(r) for r in rows), default=0))
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header) if header else ""
    body = []
    for r in rows:
        cells = "".join(f'<td class="num">{c}</td>' if n else f"<td>{c}</td>" for c, n in zip(r, numeric))
        body.append(f"<tr>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def _img(folder: Path, name: str, alt: str) -> str:
    data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def render_html(exp, root: Path, pngs: dict[str, str], samples_file: str, plots: bool) -> str:
    """One self-contained page: model info, tables and every PNG embedded as base64 (no external links)."""
    from . import __version__

    e = html.escape
    info = exp.info
    classes = exp.classes
    class_text = ", ".join(classes[:30]) + (f" … ({len(classes)} in all)" if len(classes) > 30 else "")
    ckpt_acc = info.get("checkpoint_test_accuracy")
    sample_note = (f"{exp.n:,} (seeded subset of the test split, --samples {info['samples']}, --seed {info.get('seed')})"
                   if info.get("samples") else f"{exp.n:,} (the whole test split)")
    model_rows = [
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
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>laya export — {e(str(info.get('backbone', '')))} / {e(str(info.get('head', '')))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>laya export: layer attention report</h1>",
        f'<p class="sub">{e(str(info.get("checkpoint", "")))} · {e(str(info.get("dataset", "")))} · '
        f"{exp.n:,} samples</p>",
        "<h2>Model</h2>", _table(None, [(f"<b>{k}</b>", v) for k, v in model_rows]),
    ]
    for note in exp.notes:
        parts.append(f'<p class="note">{e(note)}</p>')
    if not plots:
        parts.append('<p class="note">plots were skipped (--no-plots).</p>')

    def figure(key: str) -> str:
        if key not in pngs:
            return ""
        return f"<figure>{_img(root / 'plots', pngs[key], _CAPTIONS[key])}<figcaption>{e(_CAPTIONS[key])}</figcaption></figure>"

    if exp.has_alpha:
        parts += ["<h2>Global layer attention</h2>", figure("global")]
        g = exp.global_profile
        header = ["layer"]
        subsets = ("all", "correct", "incorrect")
        for s in subsets:
            n = int(g[(g["quantity"] == "alpha") & (g["subset"] == s)]["n"].iloc[0])
            header.append(f"α {s} (n={n:,}) mean ± std")
        if exp.has_contrib:
            header.append("contrib all, mean ± std")
        rows = []
        for i, layer in enumerate(exp.layers):
            row = [e(layer)]
            for s in subsets:
                r = g[(g["quantity"] == "alpha") & (g["subset"] == s) & (g["layer_index"] == i)].iloc[0]
                row.append(f"{_num(r['mean'])} ± {_num(r['std'])}")
            if exp.has_contrib:
                r = g[(g["quantity"] == "contrib") & (g["subset"] == "all") & (g["layer_index"] == i)].iloc[0]
                row.append(f"{_num(r['mean'], '{:+.4f}')} ± {_num(r['std'])}")
            rows.append(row)
        parts.append(_table(header, rows, [False] + [True] * (len(header) - 1)))

        parts.append("<h2>Class × layer attention</h2>")
        if exp.counts("incorrect").sum() == 0:
            parts.append('<p class="note">no incorrect predictions among the exported samples.</p>')
        parts.append('<div class="grid">' + "".join(figure(k) for k in
                     ("heatmap_all", "heatmap_correct", "heatmap_incorrect", "heatmap_shift")) + "</div>")
        parts.append("<h2>Attention shift: correct vs incorrect</h2>")
        parts.append(
            "<p>Per true class, the Jensen–Shannon divergence (base 2, in [0, 1]) between the mean α of its "
            "correctly and of its incorrectly predicted samples. Note that scipy's <code>jensenshannon</code> "
            "returns the JS <em>distance</em>, the square root of this divergence (also given below). Classes "
            "with no incorrect (or no correct) predictions have no divergence (n/a) and rank last.</p>")
        parts.append(figure("shift_ranking"))
        rows = []
        for r in exp.shift.itertuples(index=False):
            defined = r.js_divergence == r.js_divergence
            rows.append([str(r.rank), e(str(r.class_name)), _num(r.js_divergence), _num(r.js_distance),
                         str(r.n_correct), str(r.n_incorrect),
                         e(str(r.most_shifted_layer)) if defined else "—",
                         _num(r.shift, "{:+.4f}") if defined else "—"])
        parts.append(_table(["rank", "class", "JS divergence", "JS distance", "n correct", "n incorrect",
                             "most shifted layer", "Δ mean α there (incorrect − correct)"], rows,
                            [True, False, True, True, True, True, False, True]))
    if "strip" in pngs:
        parts += ["<h2>Samples</h2>", figure("strip")]
    if getattr(exp, "depth", None):
        parts.append(depth_section(exp.depth, figure("depth")))
    files = "".join(f"<li><code>{e(f)}</code></li>" for f in exp.files)
    loader = f'{_LOADERS[Path(samples_file).suffix]}("{samples_file}")'
    parts += [
        "<h2>Files in this export</h2>",
        f"<ul>{files}</ul>",
        f"<p>Per-sample table: <code>{e(samples_file)}</code>, loaded with "
        f"<code>{e(loader)}</code>; columns are described in "
        f"laya's docs/export.md.</p>",
        f"<footer>generated by laya {e(__version__)} on "
        f"{_dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}</footer>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def depth_section(doc: dict, figure_html: str = "") -> str:
    """The ``laya depth`` section of report.html, from the depth JSON (docs/depth.md)."""
    from .report import depth_caption, depth_exit_rows, depth_table_rows

    e = html.escape
    parts = ["<h2>How deep must the model be? (laya depth)</h2>",
             f'<p class="sub">{e(depth_caption(doc))}. Definitions: laya\'s docs/depth.md.</p>', figure_html]
    header, rows = depth_table_rows(doc)
    parts.append(_table(header, [[e(c) for c in r] for r in rows], [i != 1 for i in range(len(header))]))
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        parts.append(f"<h3>Early exit ({e(doc['early_exit']['source'])} predictions): the cheapest operating "
                     f"points of the threshold sweep</h3>")
        parts.append(_table(header, [[e(c) for c in r] for r in rows], [i >= 2 for i in range(len(header))]))
    o = doc["oracle"]
    ks = [f"k={k}" for k in range(1, len(doc["layers"]) + 1)]
    parts.append("<h3>Minimal sufficient depth per class</h3><p>Samples whose prediction first equals the full "
                 "model's at depth k, per true class.</p>")
    parts.append(_table(["class", *ks], [[e(c), *map(str, h)] for c, h in o["by_class"].items()]
                        + [["<b>all</b>", *map(str, o["histogram"])]], [False] + [True] * len(ks)))
    for note in doc.get("notes", []):
        parts.append(f'<p class="note">{e(note)}</p>')
    return "\n".join(p for p in parts if p)
