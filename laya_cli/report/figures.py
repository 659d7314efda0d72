"""Pictures for ``laya export``: matplotlib figures written as PNG files (report.html embeds them).

Figures are drawn with the object-oriented API (``matplotlib.figure.Figure`` rendered by the
Agg canvas): no pyplot, no global state, no display needed, safe inside notebooks. Every drawing function is
``inert_figure``: class names, layers and tokens are drawn as text, never parsed as mathtext or TeX.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .inert import inert_figure

DPI = 130
CORRECT, WRONG, NEUTRAL = "#2a9d3c", "#c62828", "#4c72b0"

# Plot keys in the order the report shows them -> file names under plots/.
PLOT_FILES = {
    "global": "global_attention.png",
    "heatmap_all": "class_layer_all.png",
    "heatmap_correct": "class_layer_correct.png",
    "heatmap_incorrect": "class_layer_incorrect.png",
    "heatmap_shift": "class_layer_shift.png",
    "shift_ranking": "attention_shift.png",
    "strip": "samples_strip.png",
    "depth": "depth.png",  # with an attached laya depth result (laya export --depth)
}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> None:
    fig.savefig(
        path,
        dpi=DPI,
        facecolor="white",
        bbox_inches="tight",
        pad_inches=0.08,
        metadata={"Software": "laya export (matplotlib)"},
    )


def short_layer_labels(layers: Sequence[str]) -> tuple[list[str], str]:
    """Strip a shared prefix (``blocks.0``…``blocks.11`` -> ``0``…``11``, prefix ``blocks.``)."""
    if len(layers) < 2:
        return list(layers), ""
    prefix = os.path.commonprefix(list(layers)).rstrip("0123456789")
    rest = [name[len(prefix) :] for name in layers]
    if not prefix or any(not r for r in rest):
        return list(layers), ""
    return rest, prefix


def _layer_axis(ax, layers: Sequence[str], axis: str = "x", fontsize: float = 9) -> None:
    pos = np.arange(len(layers))
    longest = max((len(n) for n in layers), default=0)
    rotate = len(layers) * max(longest, 2) > 36
    if axis == "x":
        ax.set_xticks(
            pos,
            list(layers),
            rotation=45 if rotate else 0,
            ha="right" if rotate else "center",
            rotation_mode="anchor",
            fontsize=fontsize,
        )
    else:
        ax.set_yticks(pos, list(layers), fontsize=fontsize)


def mark_uniform(cbar, uniform: float) -> None:
    """The value every layer would get from a uniform average, marked and named on an α colour bar."""
    cbar.ax.axhline(uniform, color="white", linewidth=2.2)
    cbar.ax.axhline(uniform, color="black", linewidth=1.0, linestyle="--")
    cbar.ax.text(-0.15, uniform, f"1/L = {uniform:.3f}", transform=cbar.ax.get_yaxis_transform(), ha="right",
                 va="center", fontsize=9, color="#333333")  # fmt: skip


def _text_colour(cmap, norm, value: float) -> str:
    r, g, b, _ = cmap(norm(value))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _fmt_n(n: int) -> str:
    return f"{n:,}"


# --------------------------------------------------------------------------- figures


@inert_figure
def plot_global(exp, path: Path) -> None:
    """Bars: mean α per layer over all samples ± 1 std; markers: correct / incorrect means."""
    g = exp.global_profile[exp.global_profile["quantity"] == "alpha"]
    layers, L = exp.layers, len(exp.layers)
    fig = _figure(max(6.4, 2.0 + 0.62 * L), 4.6)
    ax = fig.subplots()
    x = np.arange(L)
    rows = {s: g[g["subset"] == s].sort_values("layer_index") for s in ("all", "correct", "incorrect")}
    a = rows["all"]
    n_all = int(a["n"].iloc[0])
    std = a["std"].fillna(0).to_numpy()
    ax.bar(
        x,
        a["mean"],
        yerr=std,
        capsize=4,
        color=NEUTRAL,
        alpha=0.85,
        width=0.65,
        error_kw={"ecolor": "#333333", "elinewidth": 1},
        label=f"all samples (n={_fmt_n(n_all)}), ± 1 std",
    )
    for subset, marker, colour, dx in (("correct", "o", CORRECT, -0.14), ("incorrect", "X", WRONG, 0.14)):
        s = rows[subset]
        n = int(s["n"].iloc[0])
        if n:
            ax.plot(
                x + dx,
                s["mean"],
                marker,
                color=colour,
                markersize=8,
                markeredgecolor="white",
                linestyle="none",
                label=f"mean over {subset} predictions (n={_fmt_n(n)})",
                zorder=3,
            )
    ax.axhline(1.0 / L, linestyle="--", color="#777777", linewidth=1, label=f"uniform 1/L = {1.0 / L:.3f}")
    top = float(np.nanmax(a["mean"].to_numpy() + std)) if n_all else 1.0
    for s in ("correct", "incorrect"):
        if int(rows[s]["n"].iloc[0]):
            top = max(top, float(np.nanmax(rows[s]["mean"])))
    ax.set_ylim(0, min(1.06, top * 1.3 + 0.02))  # room for markers at α = 1
    _layer_axis(ax, layers)
    ax.set_xlabel("layer (shallow → deep)")
    ax.set_ylabel("attention weight α")
    what = "global α (the same for every input)" if exp.alpha_is_global else "mean layer attention α"
    ax.set_title(
        f"{exp.info.get('head', 'laya')} head: {what} per layer\n"
        f"{exp.info.get('dataset', '')} test samples, n = {_fmt_n(n_all)}",
        fontsize=11,
    )
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    _save(fig, path)


def _heatmap_size(
    n_rows: int, n_cols: int, row_labels: Sequence[str], col_labels: Sequence[str]
) -> tuple[float, float]:
    label_w = 0.075 * max((len(s) for s in row_labels), default=4)
    col_h = 0.065 * max((len(s) for s in col_labels), default=4) if n_cols > 5 else 0.3
    width = max(6.0, 2.6 + label_w + 0.62 * n_cols)
    height = max(3.6, 1.6 + col_h + 0.36 * n_rows)
    return width, height


@inert_figure
def plot_heatmap(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    layers: Sequence[str],
    title: str,
    colour_label: str,
    path: Path,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: str = "{:.2f}",
    uniform: float | None = None,
) -> None:
    """Class × layer heatmap with class names, layer names, a labelled colour bar and cell values; ``uniform``: a
    value marked and named on the colour bar (α's 1/L)."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    C, L = matrix.shape
    fig = _figure(*_heatmap_size(C, L, row_labels, layers))
    ax = fig.subplots()
    cm = colormaps[cmap].with_extremes(bad="#d9d9d9")
    norm = Normalize(vmin=vmin, vmax=vmax)
    im = ax.imshow(np.ma.masked_invalid(matrix), cmap=cm, norm=norm, aspect="auto", interpolation="nearest")
    small = 7 if C > 25 else 9
    ax.set_yticks(np.arange(C), list(row_labels), fontsize=small)
    _layer_axis(ax, layers)
    ax.set_xlabel("layer (shallow → deep)")
    ax.set_ylabel("true class")
    ax.set_title(title, fontsize=10.5)
    ax.tick_params(length=0)
    cbar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.02)
    cbar.set_label(colour_label)
    if uniform is not None:
        mark_uniform(cbar, uniform)
    if C * L <= 260:
        size = 8 if L <= 8 else 6.5
        for i in range(C):
            for j in range(L):
                v = matrix[i, j]
                if math.isnan(v):
                    ax.text(j, i, "–", ha="center", va="center", fontsize=size, color="#666666")
                else:
                    text = fmt.format(v)
                    if float(text) == 0:
                        text = fmt.format(0.0).lstrip("+")  # no "-0.00"
                    ax.text(j, i, text, ha="center", va="center", fontsize=size, color=_text_colour(cm, norm, v))
    _save(fig, path)


SHIFT_COLOUR_FROM = 0.05  # the attention-shift heatmap's colour saturates at ±max(largest |Δ mean α|, this)


def alpha_scale(mats: Sequence[np.ndarray], n_layers: int) -> tuple[float, float]:
    """The colour scale of the α heatmaps, anchored to what α can be: from 0 to the larger of the largest mean α
    shown and 2/L (twice the uniform share; at most 1). A near-uniform α (0.17–0.24 of 5 layers) then reads as the
    one colour it nearly is, instead of a dark-purple-to-yellow range spread over 0.07."""
    vals = np.concatenate([m[np.isfinite(m)] for m in mats]) if mats else np.array([])
    top = float(vals.max()) if len(vals) else 0.0
    return 0.0, min(1.0, max(top, 2.0 / max(n_layers, 1)))


@inert_figure
def plot_heatmaps(exp, folder: Path) -> dict[str, str]:
    out = {}
    mats = {s: exp.matrix(s) for s in ("all", "correct", "incorrect")}
    L = len(exp.layers)
    lo, hi = alpha_scale(list(mats.values()), L)
    words = {"all": "all predictions", "correct": "correct predictions", "incorrect": "incorrect predictions"}
    for subset, mat in mats.items():
        counts = exp.counts(subset)
        if subset == "incorrect" and counts.sum() == 0:
            continue  # nothing to show; the report says so
        rows = [f"{name} (n={_fmt_n(int(n))})" for name, n in zip(exp.classes, counts)]
        title = (
            f"Mean layer attention α by true class — {words[subset]} (n = {_fmt_n(int(counts.sum()))})\n"
            f"colour 0 to {hi:.2f} (all three maps); dashed on the bar: uniform 1/L = {1 / L:.3f}; grey = no samples"
        )
        key = f"heatmap_{subset}"
        plot_heatmap(
            mat, rows, exp.layers, title, "mean α (attention weight)", folder / PLOT_FILES[key], vmin=lo, vmax=hi,
            uniform=1.0 / L,
        )  # fmt: skip
        out[key] = PLOT_FILES[key]
    n_ok, n_bad = exp.counts("correct"), exp.counts("incorrect")
    if n_bad.sum() and n_ok.sum():
        diff = mats["incorrect"] - mats["correct"]
        finite = diff[np.isfinite(diff)]
        largest = float(np.abs(finite).max()) if len(finite) else 0.0
        lim = max(largest, SHIFT_COLOUR_FROM)  # a shift of 0.004 stays near white: the colour is not a magnifier
        rows = [f"{name} ({int(a)} ok / {int(b)} wrong)" for name, a, b in zip(exp.classes, n_ok, n_bad)]
        title = (
            "Attention shift by true class: mean α(incorrect) − mean α(correct)\n"
            f"red = more weight when wrong, blue = less; colour saturates at ±{lim:.2f} "
            f"(largest |Δ| {largest:.3f}); grey = n/a"
        )
        decimals = min(6, max(2, 1 - math.floor(math.log10(max(largest, 1e-9)))))
        plot_heatmap(
            diff,
            rows,
            exp.layers,
            title,
            "Δ mean α (incorrect − correct)",
            folder / PLOT_FILES["heatmap_shift"],
            cmap="RdBu_r",
            vmin=-lim,
            vmax=lim,
            fmt="{:+." + str(decimals) + "f}",
        )
        out["heatmap_shift"] = PLOT_FILES["heatmap_shift"]
    return out


@inert_figure
def plot_shift_ranking(exp, path: Path) -> None:
    """Horizontal bars: JS divergence per class, rank 1 on top. Only a ranked class (the export ranks from
    ``exp.shift_ranked_from`` bits on) is drawn in colour (the dashed line marks that size); below it a grey bar,
    "not ranked"; n/a classes listed last. The axis starts at 0 and spans at least 4 × that size, so a divergence
    of 0.0001 draws as the sliver it is, not as a full-width bar."""
    s = exp.shift
    ranked_from = getattr(exp, "shift_ranked_from", 0.0) or 0.0
    C = len(s)
    names = [str(n) for n in s["class_name"]]
    label_w = 0.075 * max((len(n) for n in names), default=4)
    fig = _figure(max(7.0, 5.6 + label_w), max(2.8, 1.3 + 0.34 * C))
    ax = fig.subplots()
    y = np.arange(C)
    js = s["js_divergence"].to_numpy(dtype=float)
    defined = np.isfinite(js)
    ranked = s["rank"].notna().to_numpy() & defined
    colours = [WRONG if r else "#bbbbbb" for r in ranked]
    ax.barh(y, np.where(defined, js, 0.0), color=colours, height=0.65)
    ax.set_yticks(y, names, fontsize=7 if C > 25 else 9)
    ax.set_ylim(C - 0.4, -0.6)  # rank 1 on top, no empty margins
    xmax = float(np.nanmax(js)) if defined.any() else 0.0
    ax.set_xlim(0, max(xmax * 1.18, 4 * ranked_from, 1e-3))
    if ranked_from:
        ax.axvline(ranked_from, color="#555555", linestyle="--", linewidth=1, label=f"ranked from {ranked_from:g} bits")
        ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    trans = ax.get_yaxis_transform()  # x in axes coords, y in data coords
    for i, r in enumerate(s.itertuples(index=False)):
        if defined[i]:
            ax.text(js[i], i, f" {js[i]:.2g}", va="center", ha="left", fontsize=8)
            note = f"{r.n_correct} ok / {r.n_incorrect} wrong" + ("" if ranked[i] else ", not ranked")
        else:
            note = "n/a: no incorrect" if r.n_incorrect == 0 else "n/a: no correct"
        ax.text(1.02, i, note, transform=trans, va="center", ha="left", fontsize=8,
                color="#333333" if ranked[i] else "#888888")  # fmt: skip
    ax.set_xlabel("Jensen–Shannon divergence of mean α, correct vs incorrect (bits)\n"
                  "0 = same profile, 1 = disjoint; 0.01 ≈ 12 % of the attention moved between two layers")  # fmt: skip
    ax.set_ylabel("true class (rank 1 on top)")
    n_bad = int(s["n_incorrect"].sum())
    ax.set_title(
        f"Attention shift per class when the model is wrong ({_fmt_n(n_bad)} incorrect of {_fmt_n(exp.n)})",
        fontsize=10.5,
    )
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    _save(fig, path)


def _thumbnail(img) -> tuple[np.ndarray, str | None, float, float]:
    x = img.detach().cpu()
    is_uint8 = str(x.dtype) == "torch.uint8"
    a = x.numpy().astype(np.float32)
    a = a / 255.0 if is_uint8 else a
    a = np.clip(a, 0.0, 1.0)
    if a.shape[0] >= 3:
        return np.transpose(a[:3], (1, 2, 0)), None, 0.0, 1.0
    return a[0], "gray", 0.0, 1.0


def can_strip(exp) -> bool:
    """Whether the samples are pictures (N×C×H×W, one per row) to draw: a text model's are not (its table has
    the strings; its token batches, N×2×L integer ids and masks, are never drawn)."""
    im = exp.images
    if im is None or getattr(exp, "texts", None) is not None:
        return False
    return getattr(im, "ndim", 0) == 4 and im.shape[1] >= 1 and len(im) == exp.n and exp.n > 0


def strip_rows(labels, correct, k: int) -> list[int]:
    """Positions of ``k`` samples that show the classes and the errors fairly (issue 71: the first 8 were 8 of one
    class, 7 wrong): per class in turn its first correct sample, then per class its first wrong one, then the rest
    in order; returned in class order (then position)."""
    labels, correct = [int(v) for v in labels], [bool(v) for v in correct]
    classes = sorted(set(labels))
    chosen: list[int] = []
    for want in (True, False):
        for c in classes:
            first = next((i for i, (y, ok) in enumerate(zip(labels, correct)) if y == c and ok == want), None)
            if first is not None and len(chosen) < k:
                chosen.append(first)
    chosen += [i for i in range(len(labels)) if i not in chosen][: max(0, k - len(chosen))]
    return sorted(chosen, key=lambda i: (labels[i], i))


@inert_figure
def plot_strip(exp, path: Path, k: int) -> None:
    """K samples (``strip_rows``: the classes in turn, a correct and a wrong one of each where there are): thumbnail,
    true/predicted class, p_ŷ, and the α bars per layer."""
    k = min(k, exp.n)
    rows = strip_rows(exp.table["label"], exp.table["correct"], k)
    t = exp.table.iloc[rows]
    has_alpha = exp.has_alpha
    L = len(exp.layers)
    col_w = max(1.7, 0.11 * L + 0.8) if has_alpha else 1.5
    img_h = col_w * 0.95 + 0.75  # square thumbnail + a four-line title
    fig = _figure(col_w * k + 0.9, img_h + (1.7 if has_alpha else 0) + 0.35)
    gs = fig.add_gridspec(2 if has_alpha else 1, k, height_ratios=[img_h, 1.7] if has_alpha else [1])
    labels, prefix = short_layer_labels(exp.layers)
    if has_alpha:
        alpha = t[[f"alpha[{n}]" for n in exp.layers]].to_numpy(dtype=float)
        ymax = min(1.0, float(alpha.max()) * 1.15 + 0.02)
    bar_axes = []
    for j, r in enumerate(t.itertuples(index=False)):
        ax = fig.add_subplot(gs[0, j])
        img, cmap, vmin, vmax = _thumbnail(exp.images[rows[j]])
        ax.imshow(img, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        colour = CORRECT if r.correct else WRONG
        for spine in ax.spines.values():
            spine.set_edgecolor(colour)
            spine.set_linewidth(2.5)
        ax.set_title(
            f"#{r.index}\ntrue: {r.label_name}\npred: {r.predicted_name}\np = {r.p_pred:.2f}", fontsize=8, color=colour
        )
        if has_alpha:
            axb = fig.add_subplot(gs[1, j], sharey=bar_axes[0] if bar_axes else None)
            bar_axes.append(axb)
            axb.bar(np.arange(L), alpha[j], color=colour, alpha=0.85)
            axb.axhline(1.0 / L, linestyle="--", color="#777777", linewidth=0.8)
            axb.set_ylim(0, ymax)
            axb.set_xticks(np.arange(L), labels, fontsize=6 if L > 6 else 7, rotation=90 if L > 6 else 0)
            axb.tick_params(axis="y", labelsize=7)
            if j == 0:
                axb.set_ylabel("α", fontsize=9)
            else:
                axb.tick_params(axis="y", labelleft=False)
            axb.set_xlabel(f"layer ({prefix}N)" if prefix else "layer", fontsize=7)  # the ticks are the N
    what = "input, prediction (green = correct, red = wrong)" + (
        " and layer attention α (dashed = uniform 1/L)" if has_alpha else ""
    )
    fig.suptitle(f"{k} exported samples, by class (a correct and a wrong one of each where there are): {what}",
                 fontsize=10)  # fmt: skip
    _save(fig, path)


THUMB_SIDE = 32  # the explorer's thumbnails: larger images are shrunk to fit this square, smaller ones kept


def thumbnails(images, max_side: int = THUMB_SIDE) -> list[str]:
    """Every image as a small PNG, base64-encoded (report.html's explorer embeds them).

    Greyscale stays 1-channel, colour is RGB; an image larger than ``max_side`` is shrunk by
    area averaging (aspect kept), a smaller one is kept as it is (the page scales it up, pixelated).
    """
    import base64
    import io

    from PIL import Image

    out = []
    for img in images:
        a, _, _, _ = _thumbnail(img)
        arr = (a * 255.0 + 0.5).astype(np.uint8)
        im = Image.fromarray(arr, "L" if arr.ndim == 2 else "RGB")
        if max(im.size) > max_side:
            im.thumbnail((max_side, max_side), Image.Resampling.BOX)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        out.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    return out


@inert_figure
def render_plots(exp, folder: Path, strip: int = 8) -> dict[str, str]:
    """Draw every figure that applies into ``folder``; returns {plot key: file name}."""
    folder = Path(folder)
    out: dict[str, str] = {}
    if exp.has_alpha:
        plot_global(exp, folder / PLOT_FILES["global"])
        out["global"] = PLOT_FILES["global"]
        out.update(plot_heatmaps(exp, folder))
        if exp.shift is not None and len(exp.shift):
            plot_shift_ranking(exp, folder / PLOT_FILES["shift_ranking"])
            out["shift_ranking"] = PLOT_FILES["shift_ranking"]
    if strip > 0 and can_strip(exp):
        plot_strip(exp, folder / PLOT_FILES["strip"], strip)
        out["strip"] = PLOT_FILES["strip"]
    depth = (getattr(exp, "results", None) or {}).get("depth")  # an attached laya depth result
    if depth:
        plot_depth(depth, folder / PLOT_FILES["depth"])
        out["depth"] = PLOT_FILES["depth"]
    return {k: out[k] for k in PLOT_FILES if k in out}


@inert_figure
def plot_depth(doc: dict, path: Path) -> None:
    """``laya depth``: accuracy vs mean backbone FLOPs (% of the full model) for the truncated model (α
    masked above k), the refitted heads, the early-exit sweeps and the oracle; ``doc`` is the depth JSON."""
    fig = _figure(7.2, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    rows = doc["truncation"]
    x = [100 * r["flops_fraction"] for r in rows]
    full = doc["full"]["accuracy"]
    if any(r["accuracy"] is not None for r in rows):
        ax.plot(x, [r["accuracy"] for r in rows], "o-", color=NEUTRAL, label="truncated at k (α masked)")
        for xi, r in zip(x, rows):
            ax.annotate(
                f"k={r['k']}",
                (xi, r["accuracy"]),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=7,
                color="#555",
            )
    if any("refit_accuracy" in r for r in rows):
        ax.plot(x, [r["refit_accuracy"] for r in rows], "s--", color="#8e44ad", label="head refitted on taps ≤ k")
    markers = {
        "p_max": ("^-", "#e67e22", "early exit: p_max > t"),
        "alpha_mass": ("v-", "#16a085", "early exit: α mass ≤ k > t"),
    }
    points = (doc.get("early_exit") or {}).get("points", [])
    for policy, (style, colour, label) in markers.items():
        pts = sorted((p for p in points if p["policy"] == policy), key=lambda p: p["flops_fraction"])
        if pts:
            ax.plot(
                [100 * p["flops_fraction"] for p in pts],
                [p["accuracy"] for p in pts],
                style,
                color=colour,
                markersize=4,
                linewidth=1,
                label=label,
            )
    o = doc["oracle"]
    ax.plot(
        [100 * o["flops_fraction"]],
        [full],
        "*",
        color=CORRECT,
        markersize=12,
        label="oracle (minimal sufficient depth)",
    )
    ax.axhline(full, color="#888", linestyle=":", linewidth=1, label=f"full model ({full:.4f})")
    ax.axhline(full - 0.01, color="#bbb", linestyle="--", linewidth=0.8, label="full − 1 pp")
    ax.set_xlabel("mean backbone FLOPs (% of the full model)")
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 105)
    shown = (
        [r["accuracy"] for r in rows if r["accuracy"] is not None]
        + [r["refit_accuracy"] for r in rows if r.get("refit_accuracy") is not None]
        + [p["accuracy"] for p in points]
    )
    ax.set_ylim(max(0.0, min([full - 0.05, *shown]) - 0.02), min(1.005, max([full + 0.02, *shown]) + 0.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"laya depth: accuracy vs compute ({doc['n_samples']:,} samples, {doc['head']} head)", fontsize=10)
    fig.savefig(
        path,
        format="png",
        dpi=DPI,
        facecolor="white",
        bbox_inches="tight",
        pad_inches=0.08,
        metadata={"Software": "laya depth (matplotlib)"},
    )


def token_label(text: str) -> str:
    """A token's text as an axis label: quoted where it has edge spaces or control characters (a figure's text is
    never read as maths: ``inert_figure``)."""
    return text if text and text.strip() == text and text.isprintable() else repr(text)


@inert_figure
def plot_token_alpha(alpha: np.ndarray, tokens: Sequence[str], layers: Sequence[str], title: str, path: Path) -> None:
    """Tokens × layers heat map of α (a language model's export): token texts down, layers across."""
    from matplotlib import colormaps

    T, L = alpha.shape
    labels = [token_label(t) for t in tokens]
    short, prefix = short_layer_labels(layers)
    width, _ = _heatmap_size(T, L, labels, short)
    fig = _figure(width, max(3.6, 1.6 + 0.2 * T))
    ax = fig.subplots()
    lo, hi = alpha_scale([alpha], L)  # anchored at 0, at least twice the uniform share
    im = ax.imshow(alpha, cmap=colormaps["viridis"], vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
    ax.set_yticks(np.arange(T), labels, fontsize=7 if T > 25 else 9)
    _layer_axis(ax, short)
    ax.set_xlabel(f"layer ({prefix}N, shallow → deep)" if prefix else "layer (shallow → deep)")
    ax.set_ylabel("input token (position ↓)")
    ax.set_title(title, fontsize=10.5)
    ax.tick_params(length=0)
    cbar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.02)
    cbar.set_label(f"α (LAYA head), 0 to {hi:.2f}")
    mark_uniform(cbar, 1.0 / L)
    _save(fig, path)
