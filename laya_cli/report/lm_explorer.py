"""report.html of a language model's export (``laya export`` on a ``--task lm`` checkpoint): a short header, the
tokens × layers heat map and the **text explorer** — each exported block as running text, every token a span
coloured by its dominant layer (argmax α; one fixed colour per layer, legend shown); hovering or focusing a token
(tokens are keyboard-focusable) shows its α over the layers as small bars with numbers, the next token and the
head's predicted token with their p.

Self-contained: no request leaves the page; the heat map is embedded as base64. The data travel as one JSON block
and plain JavaScript builds the spans once (a few thousand tokens take milliseconds); every token text is set as
``textContent``, never as markup, so a token ``<script>`` reads literally. Formats what it is given
(``exporting/lm.py: explorer_input``): no laya stage is imported here.
"""

from __future__ import annotations

import base64
import colorsys
import datetime as _dt
import html
import math
from collections.abc import Sequence

import numpy as np

from .explorer import _script_json
from .html import _CSS

TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TINT = 0.5  # a token's background: its layer's colour mixed half with white (black text stays readable)
ALPHA_DIGITS = 5  # α as the page keeps it (tokens.parquet has it whole)

TOKEN_CSS = """\
.t-legend { display: flex; flex-wrap: wrap; gap: 0.3em 1em; margin: 0.6em 0; font-size: 0.92em; }
.t-swatch { display: inline-block; width: 1.1em; height: 1.1em; vertical-align: -0.2em; margin-right: 0.3em;
  border-bottom: 3px solid; box-sizing: border-box; }
.t-block { margin: 0.8em 0; } .t-label { color: #888; font-size: 0.8em; }
.t-run { white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.95em;
  line-height: 1.9; border: 1px solid #eee; padding: 0.4em 0.6em; }
.t-tok { border-bottom: 3px solid; cursor: default; }
.t-tok:focus { outline: 2px solid #222; outline-offset: 1px; } .t-tok:hover { filter: brightness(0.92); }
#t-tip { position: absolute; z-index: 10; background: #fff; border: 1px solid #bbb; border-radius: 4px;
  box-shadow: 0 2px 8px rgba(0,0,0,0.18); padding: 0.4em 0.6em; font-size: 0.85em; pointer-events: none;
  max-width: 28em; }
#t-tip table { margin: 0.3em 0; border: 0; font-size: 1em; } #t-tip td { border: 0; padding: 0 0.4em 0 0; }
#t-tip .t-bar { display: inline-block; height: 0.8em; min-width: 1px; vertical-align: middle; }
#t-tip .t-num { text-align: right; font-variant-numeric: tabular-nums; } #t-tip tr.t-dom { font-weight: bold; }
#t-tip .t-head { font-weight: bold; white-space: pre-wrap; } #t-tip .t-pn { white-space: pre-wrap; }
"""

_TOKEN_JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("laya-data").textContent);
  var n = D.text.length, L = D.layers.length;
  var root = document.getElementById("t-text"), tip = document.getElementById("t-tip");
  function shown(t) { return t === "" ? "\u2205" : t.replace(/\n/g, "\u21b5\n"); }
  function quoted(t) { return "\u201c" + t.replace(/\n/g, "\u21b5") + "\u201d"; }
  function add(parent, tag, cls, text) {
    var el = document.createElement(tag);
    if (cls) el.className = cls;
    if (text !== undefined) el.textContent = text;
    parent.appendChild(el);
    return el;
  }
  var frag = document.createDocumentFragment(), run = null, last = null, i;
  for (i = 0; i < n; i++) {
    if (D.block[i] !== last) {
      last = D.block[i];
      var box = add(frag, "div", "t-block");
      add(box, "div", "t-label", "block " + last);
      run = add(box, "div", "t-run");
    } else if (D.separator) {
      run.appendChild(document.createTextNode(D.separator));
    }
    var d = D.dominant[i] - 1, s = add(run, "span", "t-tok", shown(D.text[i]));
    s.tabIndex = 0;
    s.setAttribute("data-i", i);
    s.style.backgroundColor = D.tints[d];
    s.style.borderBottomColor = D.colours[d];
  }
  root.appendChild(frag);

  function show(el) {
    var k = +el.getAttribute("data-i"), j;
    tip.textContent = "";
    add(tip, "div", "t-head", quoted(D.text[k]) + "  block " + D.block[k] + ", position " + D.position[k]);
    var table = add(tip, "table", "t-bars");
    for (j = 0; j < L; j++) {
      var a = D.alpha[k * L + j], tr = table.insertRow();
      tr.className = "t-bar-row" + (j === D.dominant[k] - 1 ? " t-dom" : "");
      tr.insertCell().textContent = D.layers[j];
      var bar = add(tr.insertCell(), "span", "t-bar");
      bar.style.width = Math.max(1, Math.round(a * 120)) + "px";
      bar.style.backgroundColor = D.colours[j];
      var num = tr.insertCell();
      num.className = "t-num";
      num.textContent = a.toFixed(3);
    }
    add(tip, "div", "t-pn t-next", "next: " + quoted(D.next[k]) + "  p " + D.p_next[k].toFixed(3));
    add(tip, "div", "t-pn t-pred", "predicted: " + quoted(D.pred[k]) + "  p " + D.p_pred[k].toFixed(3));
    tip.hidden = false;
    var r = el.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
    var left = Math.min(r.left, document.documentElement.clientWidth - w - 8);
    var top = r.bottom + 6 + h > window.innerHeight && r.top > h + 6 ? r.top - h - 6 : r.bottom + 6;
    tip.style.left = Math.max(0, left) + window.scrollX + "px";
    tip.style.top = top + window.scrollY + "px";
  }
  function hide() { tip.hidden = true; }
  function token(e) { return e.target.closest ? e.target.closest(".t-tok") : null; }
  root.addEventListener("mouseover", function (e) { var t = token(e); if (t) show(t); else hide(); });
  root.addEventListener("mouseleave", hide);
  root.addEventListener("focusin", function (e) { var t = token(e); if (t) show(t); });
  root.addEventListener("focusout", hide);
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") hide(); });
  document.body.setAttribute("data-tokens", "ready");
})();
"""


def layer_colours(n: int) -> list[str]:
    """One fixed colour per layer: matplotlib's tab10 up to 10 layers, evenly spaced hues beyond."""
    if n <= len(TAB10):
        return list(TAB10[:n])
    return [_hex(255 * c for c in colorsys.hls_to_rgb(j / n, 0.45, 0.65)) for j in range(n)]


def _hex(rgb) -> str:
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


def tint(colour: str, amount: float = TINT) -> str:
    """``colour`` mixed with white (``amount`` of white)."""
    rgb = [int(colour[k : k + 2], 16) for k in (1, 3, 5)]
    return _hex(c + (255 - c) * amount for c in rgb)


def token_data(data: dict) -> dict:
    """The page's JSON block: per token its texts, p and α (flat, row-major), and the colours."""
    alpha = np.asarray(data["alpha"], dtype=np.float64)
    colours = layer_colours(len(data["layers"]))
    keep = ("layers", "separator", "block", "position", "text", "next", "pred", "p_pred", "p_next", "dominant")
    out = {k: data[k] for k in keep}
    out["alpha"] = np.round(alpha, ALPHA_DIGITS).reshape(-1).tolist()
    out.update({"colours": colours, "tints": [tint(c) for c in colours]})
    return out


def _num(v, spec: str = "{:.4f}") -> str:
    f = float(v) if v is not None else float("nan")
    return "n/a" if math.isnan(f) else spec.format(f)


def _header(data: dict) -> list[str]:
    e, info = html.escape, data["info"]
    n, blocks = len(data["text"]), len(set(data["block"]))
    rows = [
        ("checkpoint", info.get("checkpoint", "")),
        ("model", info.get("backbone", "")),
        ("dataset (held-out text)", info.get("dataset", "")),
        ("block size", info.get("block_size", "")),
        ("positions", f"{n:,} in {blocks:,} block{'s' if blocks != 1 else ''}"),
        ("LAYA head's next-token accuracy", _num(info.get("accuracy"))),
    ]
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>laya export — {e(str(info.get('backbone', '')))} / tokens</title>",
        f"<style>{_CSS}{TOKEN_CSS}</style></head><body>",
        "<h1>laya export: layer attention per token</h1>",
        f'<p class="sub">{e(str(info.get("checkpoint", "")))} · {e(str(info.get("dataset", "")))} · '
        f"{n:,} positions</p>",
        '<h2 id="model">Model</h2>',
        "<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows) + "</table>",
    ]


def _legend(layers: Sequence[str], mean_alpha: Sequence[float], colours: Sequence[str], key: str) -> str:
    """The layers' colours with their mean α: the legend of the text explorer and the per-layer summary."""
    e = html.escape
    items = [
        f'<span class="t-key"><span class="t-swatch" style="background:{tint(c)};border-bottom-color:{c}"></span>'
        f"{e(name)} <small>(mean α {_num(m, '{:.3f}')})</small></span>"
        for name, m, c in zip(layers, mean_alpha, colours)
    ]
    return f'<div class="t-legend" id="{key}">' + "".join(items) + "</div>"


def render_token_html(data: dict, heatmap_png: bytes | None, plots: bool) -> str:
    """The whole page from ``exporting.lm.explorer_input``'s dict and the heat map's PNG bytes (or None)."""
    e = html.escape
    js = token_data(data)
    parts = [*_header(data), '<h2 id="alpha">Mean α per layer</h2>', _legend(data["layers"], data["mean_alpha"],
                                                                             js["colours"], "t-means")]  # fmt: skip
    parts += [f'<p class="note">{e(note)}</p>' for note in data["notes"]]
    if heatmap_png is not None:
        b64 = base64.b64encode(heatmap_png).decode("ascii")
        caption = (
            "α of the LAYA head per input token (down) and layer (across), for the first exported block; colour from "
            "0 to the larger of the largest α and 2/L, the uniform 1/L marked on the bar: two cells 0.05 apart differ "
            "by 5 % of the token's attention."
        )
        parts += ['<h2 id="heatmap">α per token</h2>',
                  f'<figure><img src="data:image/png;base64,{b64}" alt="{e(caption)}">'
                  f"<figcaption>{e(caption)}</figcaption></figure>"]  # fmt: skip
    elif not plots:
        parts.append('<p class="note">plots were skipped (--no-plots).</p>')
    sep = "a space between tokens (the tokenizer has no decoder); " if data["separator"] else ""
    parts += [
        '<h2 id="explorer">Text explorer</h2>',
        f"<p>Each block as running text ({sep}↵ a newline, ∅ an empty token); a token's colour is its dominant "
        "layer (the largest α). Hover or focus a token (Tab) for its α over the layers, the next token and the "
        "head's prediction with their p.</p>",
        _legend(data["layers"], data["mean_alpha"], js["colours"], "t-legend"),
        '<div id="t-text"></div>',
        '<div id="t-tip" role="tooltip" hidden></div>',
        f'<script type="application/json" id="laya-data">{_script_json(js)}</script>',
        f"<script>{_TOKEN_JS}</script>",
        '<h2 id="files">Files</h2>',
        "<ul>" + "".join(f"<li><code>{e(f)}</code></li>" for f in data["files"]) + "</ul>",
        f"<footer>written by laya export, {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC</footer>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
