"""``report.html``: one self-contained page (no external request) with every table and plot of an export.

The page embeds the PNGs that ``figures.py`` drew as base64 data URIs, so it can be kept as a
single CI artifact or mailed around and opened offline. Besides the tables and figures it holds:

- a per-sample **explorer** (``explorer_section``): every exported sample with its thumbnail,
  true and predicted class, p_ŷ, α and contrib as small bars per layer; filters by true class,
  predicted class and correct/incorrect, sorts by any column (or any layer's α/contrib). The
  data travel as one JSON block and plain JavaScript renders only the rows in view, so 10,000
  samples stay responsive (measured by ``benchmarks/report_explorer.py``).
- a section per **attached result** (``exp.results``, e.g. ``laya export --audit audit.json``),
  rendered by ``RESULT_SECTIONS``: the audit (``--audit``) and the depth analysis (``--depth``,
  ``laya depth --json``, with its accuracy-vs-compute plot). An attached result without a renderer
  is shown as its raw JSON (collapsed), so nothing attached is ever dropped silently.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

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
nav.toc { font-size: 0.92em; color: #555; } nav.toc a { margin-right: 1em; }
.pass { color: #2a7d34; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
td.bad { color: #c62828; font-weight: bold; } .best { font-weight: bold; color: #2a7d34; }
details pre { background: #f7f7f7; padding: 0.6em; overflow: auto; max-height: 30em; font-size: 0.85em; }
.x-controls { display: flex; flex-wrap: wrap; gap: 0.4em 1.2em; align-items: center; margin: 0.6em 0; }
.x-controls label { white-space: nowrap; } #x-count { color: #555; }
.x-scroll { height: 70vh; min-height: 320px; overflow: auto; border: 1px solid #ddd; position: relative; }
.x-table { margin: 0; border-collapse: separate; border-spacing: 0; width: 100%; }
.x-table thead th { position: sticky; top: 0; z-index: 1; background: #f4f4f4; vertical-align: bottom; }
.x-table th button { font: inherit; font-weight: bold; background: none; border: 0; padding: 0; cursor: pointer; }
.x-table th button[aria-pressed="true"] { color: #1f5fbf; }
.x-table td { height: 36px; padding: 0 0.5em; white-space: nowrap; overflow: hidden; border-width: 0 0 1px 0; }
.x-table tr.x-row:hover td { background: #f5f9ff; }
.x-table td img { width: 32px; height: 32px; object-fit: contain; image-rendering: pixelated; display: block; }
.x-table .ok { color: #2a7d34; } .x-table .no { color: #c62828; font-weight: bold; }
.x-layers { display: flex; gap: 1px; margin-top: 2px; } .x-layers button { font-size: 9px !important;
  font-weight: normal !important; color: #666; overflow: hidden; text-align: center; }
svg.x-bars { display: block; }
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


def render_html(
    exp, root: Path, pngs: dict[str, str], samples_file: str, plots: bool, thumbs: Sequence[str] | None = None
) -> str:
    """One self-contained page: model info, attached results, tables, every PNG embedded as base64 (no
    external links) and the per-sample explorer (``thumbs``: one base64 PNG per sample, or None)."""
    from .. import __version__

    e = html.escape
    info = exp.info
    classes = exp.classes
    class_text = ", ".join(classes[:30]) + (f" … ({len(classes)} in all)" if len(classes) > 30 else "")
    ckpt_acc = info.get("checkpoint_test_accuracy")
    sample_note = (
        f"{exp.n:,} (seeded subset of the test split, --samples {info['samples']}, --seed {info.get('seed')})"
        if info.get("samples")
        else f"{exp.n:,} (the whole test split)"
    )
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
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>laya export — {e(str(info.get('backbone', '')))} / {e(str(info.get('head', '')))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>laya export: layer attention report</h1>",
        f'<p class="sub">{e(str(info.get("checkpoint", "")))} · {e(str(info.get("dataset", "")))} · '
        f"{exp.n:,} samples</p>",
        "<!--laya:toc-->",
        '<h2 id="model">Model</h2>',
        _table(None, [(f"<b>{k}</b>", v) for k, v in model_rows]),
    ]
    toc = [("model", "Model")]

    def figure(key: str) -> str:
        if key not in pngs:
            return ""
        caption = _CAPTIONS[key]
        return f"<figure>{_img(root / 'plots', pngs[key], caption)}<figcaption>{e(caption)}</figcaption></figure>"

    for anchor, title, body in result_sections(getattr(exp, "results", None) or {}, {"depth": figure("depth")}):
        parts += [f'<h2 id="{anchor}">{e(title)}</h2>', body]
        toc.append((anchor, title.split(":")[0]))
    for note in exp.notes:
        parts.append(f'<p class="note">{e(note)}</p>')
    if not plots:
        parts.append('<p class="note">plots were skipped (--no-plots).</p>')

    if exp.has_alpha:
        parts += ['<h2 id="global">Global layer attention</h2>', figure("global")]
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

        parts.append('<h2 id="class-layer">Class × layer attention</h2>')
        if exp.counts("incorrect").sum() == 0:
            parts.append('<p class="note">no incorrect predictions among the exported samples.</p>')
        parts.append(
            '<div class="grid">'
            + "".join(figure(k) for k in ("heatmap_all", "heatmap_correct", "heatmap_incorrect", "heatmap_shift"))
            + "</div>"
        )
        parts.append('<h2 id="shift">Attention shift: correct vs incorrect</h2>')
        parts.append(
            "<p>Per true class, the Jensen–Shannon divergence (base 2, in [0, 1]) between the mean α of its "
            "correctly and of its incorrectly predicted samples. Note that scipy's <code>jensenshannon</code> "
            "returns the JS <em>distance</em>, the square root of this divergence (also given below). Classes "
            "with no incorrect (or no correct) predictions have no divergence (n/a) and rank last.</p>"
        )
        parts.append(figure("shift_ranking"))
        rows = []
        for r in exp.shift.itertuples(index=False):
            defined = r.js_divergence == r.js_divergence
            rows.append(
                [
                    str(r.rank),
                    e(str(r.class_name)),
                    _num(r.js_divergence),
                    _num(r.js_distance),
                    str(r.n_correct),
                    str(r.n_incorrect),
                    e(str(r.most_shifted_layer)) if defined else "—",
                    _num(r.shift, "{:+.4f}") if defined else "—",
                ]
            )
        parts.append(
            _table(
                [
                    "rank",
                    "class",
                    "JS divergence",
                    "JS distance",
                    "n correct",
                    "n incorrect",
                    "most shifted layer",
                    "Δ mean α there (incorrect − correct)",
                ],
                rows,
                [True, False, True, True, True, True, False, True],
            )
        )
    if "strip" in pngs:
        parts += ["<h2>Samples</h2>", figure("strip")]
    parts.append(explorer_section(exp, thumbs))
    if exp.has_alpha:
        toc += [("global", "Global attention"), ("class-layer", "Class × layer"), ("shift", "Attention shift")]
    toc.append(("explorer", "Samples explorer"))
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
    nav = '<nav class="toc">' + "".join(f'<a href="#{a}">{e(t)}</a>' for a, t in toc) + "</nav>"
    return "\n".join(nav if p == "<!--laya:toc-->" else p for p in parts if p) + "\n"


# --------------------------------------------------------------------------- the per-sample explorer

_EXPLORER_JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("laya-data").textContent);
  var n = D.index.length, L = D.layers.length, ROW = 36, BUF = 10;
  var scroller = document.getElementById("x-scroll"), body = document.getElementById("x-body");
  var head = document.querySelector("#x-table thead"), count = document.getElementById("x-count");
  var fLabel = document.getElementById("x-label"), fPred = document.getElementById("x-pred");
  var fOutcome = document.getElementById("x-outcome"), sortSel = document.getElementById("x-sort");
  var ncols = head.rows[0].cells.length, BW = D.bar_width, BH = 28;
  var correct = new Uint8Array(n), aMax = 0, cMax = 0, i;
  for (i = 0; i < n; i++) correct[i] = D.label[i] === D.pred[i] ? 1 : 0;
  if (D.alpha) for (i = 0; i < D.alpha.length; i++) aMax = Math.max(aMax, D.alpha[i]);
  cMax = D.contrib_scale || 0;  // bars are clipped there: a few outliers would flatten the rest
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function fmt(x, d) { return x === null ? "n/a" : x.toFixed(d); }
  function options(sel, counts) {
    D.classes.forEach(function (name, c) {
      var o = document.createElement("option");
      o.value = String(c);
      o.textContent = name + " (" + counts[c] + ")";
      sel.appendChild(o);
    });
  }
  var byLabel = D.classes.map(function () { return 0; }), byPred = byLabel.slice();
  for (i = 0; i < n; i++) { byLabel[D.label[i]]++; byPred[D.pred[i]]++; }
  options(fLabel, byLabel);
  options(fPred, byPred);
  var keys = {
    index: function (j) { return D.index[j]; },
    label: function (j) { return D.label[j]; },
    pred: function (j) { return D.pred[j]; },
    correct: function (j) { return correct[j]; },
    p: function (j) { return D.p[j]; }
  };
  function layerKey(arr, k) { return function (j) { var v = arr[j * L + k]; return v === null ? -Infinity : v; }; }
  for (var k = 0; k < L; k++) {
    if (D.alpha) keys["alpha:" + k] = layerKey(D.alpha, k);
    if (D.contrib) keys["contrib:" + k] = layerKey(D.contrib, k);
  }
  var view = [], sortKey = "index", sortDir = 1;
  function update(keepScroll) {
    var lab = fLabel.value, pr = fPred.value, out = fOutcome.value;
    var l = lab === "" ? -1 : +lab, q = pr === "" ? -1 : +pr;
    view = [];
    for (var j = 0; j < n; j++) {
      if (l >= 0 && D.label[j] !== l) continue;
      if (q >= 0 && D.pred[j] !== q) continue;
      if (out === "correct" && !correct[j]) continue;
      if (out === "incorrect" && correct[j]) continue;
      view.push(j);
    }
    var f = keys[sortKey], d = sortDir, vals = new Float64Array(n);
    for (var v = 0; v < view.length; v++) vals[view[v]] = f(view[v]);
    view.sort(function (a, b) { var x = vals[a], y = vals[b]; return x < y ? -d : x > y ? d : a - b; });
    count.textContent = "showing " + view.length.toLocaleString("en") + " of " + n.toLocaleString("en") + " samples";
    document.querySelectorAll("#x-table [data-sort]").forEach(function (el) {
      var on = el.getAttribute("data-sort") === sortKey;
      el.setAttribute("aria-pressed", on ? "true" : "false");
      var mark = el.querySelector(".x-mark");
      if (mark) mark.textContent = on ? (sortDir > 0 ? " \u25B2" : " \u25BC") : "";
    });
    sortSel.value = sortKey;
    document.getElementById("x-dir").textContent = sortDir > 0 ? "\u25B2 ascending" : "\u25BC descending";
    if (!keepScroll) scroller.scrollTop = 0;
    render();
  }
  function bars(arr, j, max, signed) {
    var w = L * (BW + 1), s = '<svg class="x-bars" width="' + w + '" height="' + BH + '" role="img"><title>';
    var t = [];
    for (var k = 0; k < L; k++) t.push(D.layers[k] + " " + fmt(arr[j * L + k], 4));
    s += esc(t.join(" \u00B7 ")) + "</title>";
    var mid = signed ? BH / 2 : BH;
    if (signed) s += '<line x1="0" x2="' + w + '" y1="' + mid + '" y2="' + mid + '" stroke="#bbb" stroke-width="0.5"/>';
    for (k = 0; k < L; k++) {
      var v = arr[j * L + k];
      if (v === null || !max) continue;
      var h = Math.max(0.5, Math.min(1, Math.abs(v) / max) * (signed ? BH / 2 : BH));
      var y = v >= 0 ? mid - h : mid, colour = signed ? (v >= 0 ? "#2a7d34" : "#c62828") : "#4c72b0";
      s += '<rect x="' + (k * (BW + 1)) + '" y="' + y.toFixed(1) + '" width="' + BW + '" height="' + h.toFixed(1) +
           '" fill="' + colour + '"/>';
    }
    return s + "</svg>";
  }
  function row(j) {
    var ok = correct[j], s = '<tr class="x-row" data-j="' + j + '" data-index="' + D.index[j] + '">';
    s += '<td class="num c-index">' + D.index[j] + "</td>";
    if (D.thumbs) s += '<td class="c-img"><img alt="sample ' + D.index[j]
      + '" src="data:image/png;base64,' + D.thumbs[j] + '"></td>';
    s += '<td class="c-label" data-label="' + D.label[j] + '">' + esc(D.classes[D.label[j]]) + "</td>";
    s += '<td class="c-pred" data-pred="' + D.pred[j] + '">' + esc(D.classes[D.pred[j]]) + "</td>";
    s += '<td class="c-correct ' + (ok ? "ok" : "no") + '">' + (ok ? "\u2713" : "\u2717") + "</td>";
    s += '<td class="num c-p">' + fmt(D.p[j], 3) + "</td>";
    if (D.alpha) s += '<td class="c-alpha">' + bars(D.alpha, j, aMax, false) + "</td>";
    if (D.contrib) s += '<td class="c-contrib">' + bars(D.contrib, j, cMax, true) + "</td>";
    return s + "</tr>";
  }
  function pad(h) {
    return h > 0 ? '<tr class="x-pad" style="height:' + h + 'px"><td colspan="' + ncols + '"></td></tr>' : "";
  }
  function render() {
    var top = Math.max(0, scroller.scrollTop - head.offsetHeight), h = scroller.clientHeight;
    var first = Math.max(0, Math.floor(top / ROW) - BUF);
    var last = Math.min(view.length, Math.ceil((top + h) / ROW) + BUF);
    var s = pad(first * ROW);
    for (var r = first; r < last; r++) s += row(view[r]);
    body.innerHTML = s + pad((view.length - last) * ROW);
  }
  var pending = false;
  scroller.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; render(); });
  });
  window.addEventListener("resize", render);
  function sortBy(k) {
    if (!keys[k]) return;
    if (k === sortKey) sortDir = -sortDir; else { sortKey = k; sortDir = 1; }
    update();
  }
  document.querySelectorAll("#x-table [data-sort]").forEach(function (el) {
    el.addEventListener("click", function () { sortBy(el.getAttribute("data-sort")); });
  });
  sortSel.addEventListener("change", function () { sortKey = sortSel.value; sortDir = 1; update(); });
  document.getElementById("x-dir").addEventListener("click", function () { sortDir = -sortDir; update(); });
  [fLabel, fPred, fOutcome].forEach(function (el) { el.addEventListener("change", function () { update(); }); });
  document.getElementById("x-reset").addEventListener("click", function () {
    fLabel.value = ""; fPred.value = ""; fOutcome.value = ""; sortKey = "index"; sortDir = 1; update();
  });
  update();
  window.layaExplorer = {
    n: n, readyAt: performance.now(),
    view: function () { return view.map(function (j) { return D.index[j]; }); },
    sortBy: sortBy
  };
  document.body.setAttribute("data-explorer", "ready");
})();
"""


def _round(values, digits: int) -> list:
    out = []
    for v in values:
        f = float(v)
        out.append(None if math.isnan(f) or math.isinf(f) else round(f, digits))
    return out


def _script_json(data) -> str:
    """JSON that is safe inside a <script> element (no '<', '>' or '&' outside escapes)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def explorer_data(exp, thumbs: Sequence[str] | None) -> dict:
    """The explorer's data, column-wise: one list per column, α and contrib flattened row-major (N·L)."""
    t = exp.table
    layers = list(exp.layers)
    data = {
        "layers": layers,
        "classes": [str(c) for c in exp.classes],
        "index": [int(v) for v in t["index"]],
        "label": [int(v) for v in t["label"]],
        "pred": [int(v) for v in t["predicted"]],
        "p": _round(t["p_pred"], 4),
        "alpha": None,
        "contrib": None,
        "thumbs": list(thumbs) if thumbs is not None else None,
        "bar_width": max(3, min(16, 120 // max(len(layers), 1))),
        "contrib_scale": None,
    }
    if exp.has_alpha:
        data["alpha"] = _round(t[[f"alpha[{n}]" for n in layers]].to_numpy(dtype=float).ravel(), 4)
    if exp.has_contrib:
        contrib = t[[f"contrib[{n}]" for n in layers]].to_numpy(dtype=float).ravel()
        data["contrib"] = _round(contrib, 4)
        finite = np.abs(contrib[np.isfinite(contrib)])
        data["contrib_scale"] = float(np.percentile(finite, 99)) if len(finite) and finite.max() > 0 else None
    return data


def explorer_section(exp, thumbs: Sequence[str] | None) -> str:
    """Every exported sample in one filterable, sortable table, rendered lazily by plain JavaScript."""
    e = html.escape
    data = explorer_data(exp, thumbs)
    bw = data["bar_width"]
    from .figures import short_layer_labels

    short, _ = short_layer_labels(exp.layers)

    def layer_buttons(kind: str) -> str:
        return (
            '<div class="x-layers">'
            + "".join(
                f'<button type="button" data-sort="{kind}:{k}" title="sort by {kind}[{e(name)}]" '
                f'style="width:{bw}px">{e(short[k]) if bw >= 8 else ""}</button>'
                for k, name in enumerate(exp.layers)
            )
            + "</div>"
        )

    def th(key: str, label: str, title: str) -> str:
        return (
            f'<th><button type="button" data-sort="{key}" title="sort by {e(title)}">{e(label)}'
            f'<span class="x-mark"></span></button></th>'
        )

    cols = [th("index", "#", "position in the test split")]
    if thumbs is not None:
        cols.append("<th>image</th>")
    cols += [
        th("label", "true", "true class"),
        th("pred", "predicted", "predicted class"),
        th("correct", "✓", "correct / incorrect"),
        th("p", "p", "probability of the predicted class"),
    ]
    sort_options = [
        ("index", "# (test-split position)"),
        ("label", "true class"),
        ("pred", "predicted class"),
        ("correct", "correct"),
        ("p", "p"),
    ]
    if exp.has_alpha:
        cols.append(f'<th class="x-vec">α per layer{layer_buttons("alpha")}</th>')
        sort_options += [(f"alpha:{k}", f"α[{n}]") for k, n in enumerate(exp.layers)]
    if exp.has_contrib:
        cols.append(f'<th class="x-vec">contrib per layer{layer_buttons("contrib")}</th>')
        sort_options += [(f"contrib:{k}", f"contrib[{n}]") for k, n in enumerate(exp.layers)]
    what = ["thumbnail"] if thumbs is not None else []
    what += ["true and predicted class", "p_ŷ"]
    if exp.has_alpha:
        what.append("α per layer (bars on one scale for all samples; hover for the values)")
    if exp.has_contrib:
        what.append(
            "contrib per layer (green: for ŷ, red: for the runner-up; bars clipped at the 99th percentile of |contrib|)"
        )
    sort_select = "".join(f'<option value="{k}">{e(v)}</option>' for k, v in sort_options)
    return "\n".join(
        [
            '<h2 id="explorer">Samples explorer</h2>',
            f"<p>All {exp.n:,} exported samples: {e(', '.join(what))}. Filter by class and outcome; click a column "
            "header (or a layer under α/contrib) to sort by it, again to reverse. Rows are drawn as you scroll.</p>",
            '<div class="x-controls">',
            '<label>true class <select id="x-label"><option value="">all</option></select></label>',
            '<label>predicted <select id="x-pred"><option value="">all</option></select></label>',
            '<label>outcome <select id="x-outcome"><option value="">all</option><option value="correct">correct'
            '</option><option value="incorrect">incorrect</option></select></label>',
            f'<label>sort by <select id="x-sort">{sort_select}</select></label>',
            '<button type="button" id="x-dir">▲ ascending</button>',
            '<button type="button" id="x-reset">reset</button>',
            '<span id="x-count" aria-live="polite"></span>',
            "</div>",
            '<div id="x-scroll" class="x-scroll"><table id="x-table" class="x-table">',
            f"<thead><tr>{''.join(cols)}</tr></thead>",
            '<tbody id="x-body"></tbody></table></div>',
            '<noscript><p class="note">The explorer needs JavaScript; the same table is in the samples '
            "file.</p></noscript>",
            f'<script type="application/json" id="laya-data">{_script_json(data)}</script>',
            f"<script>{_EXPLORER_JS}</script>",
        ]
    )


# --------------------------------------------------------------------------- attached results (audit, depth)

_AUDIT_COLUMNS = [  # (header, key, format, higher is better)
    ("faithfulness", "faithfulness", "{:.3f}", True),
    ("± std", "faithfulness_std", "{:.3f}", False),
    ("undef.", "undefined", "{:d}", False),
    ("deletion@1", "deletion@1", "{:.3f}", True),
    ("oracle", "deletion@1_oracle", "{:.3f}", False),
    ("random", "deletion@1_random", "{:.3f}", False),
    ("normalised", "deletion@1_normalised", "{:.3f}", True),
]


def _cell(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    try:
        return spec.format(v)
    except (TypeError, ValueError):
        return html.escape(str(v))


def _audit_method_table(methods: dict, compared: dict) -> str:
    """Methods as rows, the default metrics as columns (with the baseline and the change where ``compared``
    holds them, keyed like ``methods``); the best of a higher-is-better column marked."""
    e = html.escape
    header, keys = ["method"], []
    for h, key, spec, hi in _AUDIT_COLUMNS:
        header.append(h)
        keys.append((key, spec, hi, "value"))
        if any(key in per for per in compared.values()):
            header += ["baseline", "Δ"]
            keys += [(key, spec, False, "base"), (key, spec, False, "delta")]
    best = {}
    for key, _, hi, kind in keys:
        vals = [
            m.get(key) for m in methods.values() if m.get("available", True) and isinstance(m.get(key), (int, float))
        ]
        if hi and kind == "value" and vals:
            best[key] = max(vals)
    rows = []
    for name, m in methods.items():
        row = [f"<code>{e(name)}</code>"]
        for key, spec, _higher, kind in keys:
            if kind == "value":
                text = _cell(m.get(key), spec)
                row.append(f'<span class="best">{text}</span>' if key in best and m.get(key) == best[key] else text)
                continue
            pair = compared.get(name, {}).get(key)
            if pair is None:
                row.append("—")
            elif kind == "base":
                row.append(_cell(pair.get("baseline"), spec))
            else:
                text = _cell(pair.get("change"), "{:+.3f}")
                row.append(f'<span class="fail">{text} ✗</span>' if pair.get("failed") else text)
        rows.append(row)
    return _table(header, rows, [False] + [True] * (len(header) - 1))


def _network_section(doc: dict, compared: dict) -> list[str]:
    """``laya audit --scope network|both``: the network-scope table and, for ``both``, the direct share of
    each layer's total effect (docs/metrics.md, "Two scopes")."""
    net = doc.get("network")
    if not isinstance(net, dict) or not isinstance(net.get("methods"), dict):
        return []
    e = html.escape
    prefix = "network:"
    ncompared = {m[len(prefix) :]: v for m, v in compared.items() if m.startswith(prefix)}
    how = (
        "only the layers after the patched one ran"
        if net.get("patched") == "prefix"
        else "full passes with a replacing hook"
    )
    parts = [
        "<h3>Network scope (total effects)</h3>",
        "<p>Each layer's output replaced inside the backbone by its "
        f"{'training-mean activation' if net.get('reference') == 'mean' else 'zero'}, every later layer "
        f"run on it ({e(how)}): faithfulness and Deletion@1 against these total effects.</p>",
        _audit_method_table(net["methods"], ncompared),
    ]
    layers = (net.get("scopes") or {}).get("layers") or {}
    if layers:
        rows = [
            [
                f"<code>{e(name)}</code>",
                _cell(v.get("delta_head"), "{:.4f}"),
                _cell(v.get("delta_network"), "{:.4f}"),
                _cell(v.get("direct_share"), "{:.3f}"),
            ]
            for name, v in layers.items()
        ]
        parts += [
            "<h3>Direct share of each layer's total effect</h3>",
            _table(["layer", "mean Δ head", "mean Δ network", "direct share"], rows, [False, True, True, True]),
        ]
    return parts


def audit_section(doc: dict) -> str:
    """A ``laya audit --json`` document: the method table (with the baseline and the change, when the
    audit was compared with one), the network scope when audited, its settings, and the outcome of its gates."""
    e = html.escape
    s, methods = doc.get("settings", {}), doc.get("methods", {})
    base = doc.get("baseline") or {}
    compared = base.get("methods", {})
    caption = (
        f"{e(str(s.get('model', '')))} · {doc.get('n_samples', '?')} samples of {e(str(s.get('dataset', '')))} · "
        f"accuracy {_cell(doc.get('accuracy'), '{:.4f}')} · {e(str(s.get('head', '?')))} head, "
        f"{len(doc.get('layers', []))} layers · target {e(str(s.get('target')))} · ablation "
        f"{e(str(s.get('ablation')))} · reduce {e(str(s.get('reduce')))} · IG steps {e(str(s.get('steps')))}"
    )
    parts = [
        "<p>Faithfulness = Spearman ρ between a method's layer ranking and the true leave-one-layer-out effects "
        "on p_ŷ; Deletion@1 = the confidence lost when the method's top layer is removed (laya's "
        "docs/metrics.md).</p>",
        *([_audit_method_table(methods, compared)] if methods or not doc.get("network") else []),
        f'<p class="sub">{caption}</p>',
        *_network_section(doc, compared),
    ]
    if base:
        acc = base.get("accuracy", {})
        parts.append(
            f"<p>Compared with the baseline <code>{e(str(base.get('path', '')))}</code>: accuracy "
            f"{_cell(acc.get('baseline'), '{:.4f}')} → {_cell(acc.get('current'), '{:.4f}')} "
            f"(Δ {_cell(acc.get('change'), '{:+.4f}')}).</p>"
        )
        if base.get("settings_changed"):
            parts.append(
                f'<p class="note">settings differ from the baseline (allowed): '
                f"{e('; '.join(base['settings_changed']))}</p>"
            )
    checks = [("fail-under", m) for m in (doc.get("fail_under") or {}).get("misses", [])]
    checks += [
        ("max-drop", c["message"]) for c in base.get("checks", []) if not c.get("passed") and not c.get("skipped")
    ]
    verdict = doc.get("verdict")
    if verdict:
        word = "PASS" if verdict.get("passed") else "FAIL"
        parts.append(
            f'<p>Gate: <span class="{word.lower()}">{word}</span> — {verdict.get("checks", 0)} check(s), '
            f"{verdict.get('failed', 0)} failed, {verdict.get('skipped', 0)} skipped.</p>"
        )
    if checks:
        parts.append("<ul>" + "".join(f"<li><b>{e(g)}</b>: {e(msg)}</li>" for g, msg in checks) + "</ul>")
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


def depth_section(doc: dict, figure_html: str = "") -> str:
    """The ``laya depth`` section of report.html, from the depth JSON (docs/depth.md)."""
    from .tables import depth_caption, depth_exit_rows, depth_table_rows

    e = html.escape
    parts = [f'<p class="sub">{e(depth_caption(doc))}. Definitions: laya\'s docs/depth.md.</p>', figure_html]
    header, rows = depth_table_rows(doc)
    parts.append(_table(header, [[e(c) for c in r] for r in rows], [i != 1 for i in range(len(header))]))
    if doc.get("early_exit"):
        header, rows = depth_exit_rows(doc)
        parts.append(
            f"<h3>Early exit ({e(doc['early_exit']['source'])} predictions): the cheapest operating "
            f"points of the threshold sweep</h3>"
        )
        parts.append(_table(header, [[e(c) for c in r] for r in rows], [i >= 2 for i in range(len(header))]))
    o = doc["oracle"]
    ks = [f"k={k}" for k in range(1, len(doc["layers"]) + 1)]
    parts.append(
        "<h3>Minimal sufficient depth per class</h3><p>Samples whose prediction first equals the full "
        "model's at depth k, per true class.</p>"
    )
    parts.append(
        _table(
            ["class", *ks],
            [[e(c), *map(str, h)] for c, h in o["by_class"].items()] + [["<b>all</b>", *map(str, o["histogram"])]],
            [False] + [True] * len(ks),
        )
    )
    for note in doc.get("notes", []):
        parts.append(f'<p class="note">{e(note)}</p>')
    return "\n".join(p for p in parts if p)


# Attached results: key in ``exp.results`` -> (section title, renderer(doc[, figure html])).
RESULT_SECTIONS = {
    "audit": ("Audit: are the layer attributions faithful?", audit_section),
    "depth": ("Depth: how deep must the model be? (laya depth)", depth_section),
}
