"""report.html's per-sample explorer: every exported sample with its thumbnail (a text model's: its text, cut
to ``TEXT_SHOWN`` characters, whole on hover), true and predicted class, p_ŷ, α and contrib as small bars per
layer; filters by true class, predicted class and correct/incorrect, sorts by any column (or any layer's
α/contrib). The data travel as one JSON block and plain JavaScript renders only the rows in view, so 10,000
samples stay responsive (measured by ``benchmarks/report_explorer.py``). Every string the data carry (class
names, texts) is written into the page as text, never as markup.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence

import numpy as np

TEXT_SHOWN = 100  # characters of a text sample shown in its row (hover: the whole text)
TEXT_KEPT = 1000  # characters of it the page keeps (samples.csv has every text whole): bounds the page's size

EXPLORER_CSS = """\
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
.x-table td.c-text { max-width: 40em; text-overflow: ellipsis; }
.x-table .ok { color: #2a7d34; } .x-table .no { color: #c62828; font-weight: bold; }
.x-layers { display: flex; gap: 1px; margin-top: 2px; } .x-layers button { font-size: 9px !important;
  font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace !important; font-weight: normal !important;
  color: #666; overflow: hidden; white-space: nowrap; text-align: center; padding: 0; flex: none; }
.x-legend { color: #555; font-size: 0.88em; }
.x-table th.x-vec, .x-table td.c-alpha, .x-table td.c-contrib { padding-left: 6px; }  /* labels over their bars */
svg.x-bars { display: block; }
"""

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
  aMax = Math.min(1, Math.max(aMax, 2 / L));  // anchored as the heat maps: 0 to max(largest α, 2/L)
  cMax = D.contrib_scale || 0;  // bars are clipped there: a few outliers would flatten the rest
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function fmt(x, d) { return x === null ? "n/a" : x.toFixed(d); }
  function clip(t) {  // the first D.text_shown characters (code points, not UTF-16 halves), on one line
    var c = Array.from(t.replace(/\s+/g, " ").trim());
    return c.length > D.text_shown ? c.slice(0, D.text_shown - 1).join("") + "\u2026" : c.join("");
  }
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
    var uni = BH - BH / L / max;  // α: the uniform share 1/L, a dashed line over the bars
    if (!signed && max) s += '<line class="x-uniform" x1="0" x2="' + w + '" y1="' + uni.toFixed(1) + '" y2="' +
      uni.toFixed(1) + '" stroke="#333" stroke-width="0.6" stroke-dasharray="2,1"/>';
    return s + "</svg>";
  }
  function row(j) {
    var ok = correct[j], s = '<tr class="x-row" data-j="' + j + '" data-index="' + D.index[j] + '">';
    s += '<td class="num c-index">' + D.index[j] + "</td>";
    if (D.thumbs) s += '<td class="c-img"><img alt="sample ' + D.index[j]
      + '" src="data:image/png;base64,' + D.thumbs[j] + '"></td>';
    if (D.texts) s += '<td class="c-text" title="' + esc(D.texts[j]) + '">' + esc(clip(D.texts[j])) + "</td>";
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
        "bar_width": layer_labels(layers)[1],
        "contrib_scale": None,
    }
    texts = getattr(exp, "texts", None)
    if texts is not None:  # only then: an image export's data stay as they were
        data["texts"] = [t if len(t) <= TEXT_KEPT else t[: TEXT_KEPT - 1] + "…" for t in map(str, texts)]
        data["text_shown"] = TEXT_SHOWN
    if exp.has_alpha:
        data["alpha"] = _round(t[[f"alpha[{n}]" for n in layers]].to_numpy(dtype=float).ravel(), 4)
    if exp.has_contrib:
        contrib = t[[f"contrib[{n}]" for n in layers]].to_numpy(dtype=float).ravel()
        data["contrib"] = _round(contrib, 4)
        finite = np.abs(contrib[np.isfinite(contrib)])
        data["contrib_scale"] = float(np.percentile(finite, 99)) if len(finite) and finite.max() > 0 else None
    return data


LABEL_PX = 5.6  # pixels per character of a layer label (9 px monospace: 5.4; a little more, never clipped)
WIDEST_BAR = 40  # a bar is widened to fit its layer's label up to this many pixels …
WIDEST_BARS = 360  # … while all the bars of a row stay within this many


def layer_labels(layers: Sequence[str]) -> tuple[list[str], int, bool]:
    """(label per layer, bar width in pixels, whether the labels need the legend): each layer's name without the
    shared prefix where every one fits over its bar (the bar widened for it, within ``WIDEST_BAR``), else its number
    1…L where those fit, else none; numbered or unlabelled bars get a legend (``layer_legend``). A label is never
    wider than its bar, so the labels never overlap or clip ("act1layelayelaye")."""
    from .figures import short_layer_labels

    n = max(len(layers), 1)
    bar = max(3, min(16, 120 // n))
    short, _ = short_layer_labels(layers)
    need = math.ceil(max((len(t) for t in short), default=1) * LABEL_PX) + 2
    if need <= max(bar, WIDEST_BAR) and max(bar, need) * n <= max(bar * n, WIDEST_BARS):
        return list(short), max(bar, need), False
    if math.ceil(len(str(n)) * LABEL_PX) + 2 <= bar:
        return [str(k + 1) for k in range(len(layers))], bar, True
    return [""] * len(layers), bar, True


def layer_legend(layers: Sequence[str]) -> str:
    """Under the explorer's controls where its bars are numbered (or unlabelled): which layer each bar is."""
    labels, _, legend = layer_labels(layers)
    if not legend:
        return ""
    names = " · ".join(f"{k + 1} {name}" for k, name in enumerate(layers))
    how = "numbered" if any(labels) else "left to right"
    return f'<p class="x-legend">α/contrib bars per layer, {how}: {html.escape(names)}</p>'


def _header(exp, thumbs: Sequence[str] | None, bar_width: int) -> tuple[list[str], list[tuple[str, str]]]:
    """The table's header cells (each a sort button; α and contrib one per layer) and the sort choices."""
    e = html.escape
    short, _, _ = layer_labels(exp.layers)

    def layer_buttons(kind: str) -> str:
        return (
            '<div class="x-layers">'
            + "".join(
                f'<button type="button" data-sort="{kind}:{k}" title="sort by {kind}[{e(name)}]" '
                f'style="width:{bar_width}px">{e(short[k])}</button>'
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
    if getattr(exp, "texts", None) is not None:
        cols.append("<th>text</th>")
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
    for kind, on, name in (("alpha", exp.has_alpha, "α"), ("contrib", exp.has_contrib, "contrib")):
        if on:
            cols.append(f'<th class="x-vec">{name} per layer{layer_buttons(kind)}</th>')
            sort_options += [(f"{kind}:{k}", f"{name}[{n}]") for k, n in enumerate(exp.layers)]
    return cols, sort_options


def _what(exp, thumbs: Sequence[str] | None) -> str:
    what = ["thumbnail"] if thumbs is not None else []
    if getattr(exp, "texts", None) is not None:
        what.append(f"text (its first {TEXT_SHOWN} characters; hover for the whole text)")
    what += ["true and predicted class", "p_ŷ"]
    if exp.has_alpha:
        what.append(
            "α per layer (bars on one scale for all samples, from 0 to the larger of the largest α and 2/L; the "
            "dashed line is the uniform 1/L; hover for the values)"
        )
    if exp.has_contrib:
        what.append(
            "contrib per layer (green: for ŷ, red: for the runner-up; bars clipped at the 99th percentile of |contrib|)"
        )
    return ", ".join(what)


def explorer_section(exp, thumbs: Sequence[str] | None) -> str:
    """Every exported sample in one filterable, sortable table, rendered lazily by plain JavaScript."""
    e = html.escape
    data = explorer_data(exp, thumbs)
    cols, sort_options = _header(exp, thumbs, data["bar_width"])
    sort_select = "".join(f'<option value="{k}">{e(v)}</option>' for k, v in sort_options)
    return "\n".join(
        [
            '<h2 id="explorer">Samples explorer</h2>',
            f"<p>All {exp.n:,} exported samples: {e(_what(exp, thumbs))}. Filter by class and outcome; click a column "
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
            layer_legend(exp.layers) if exp.has_alpha or exp.has_contrib else "",
            '<div id="x-scroll" class="x-scroll"><table id="x-table" class="x-table">',
            f"<thead><tr>{''.join(cols)}</tr></thead>",
            '<tbody id="x-body"></tbody></table></div>',
            '<noscript><p class="note">The explorer needs JavaScript; the same table is in the samples '
            "file.</p></noscript>",
            f'<script type="application/json" id="laya-data">{_script_json(data)}</script>',
            f"<script>{_EXPLORER_JS}</script>",
        ]
    )
