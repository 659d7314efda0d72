"""``laya depth``: how much of the network does each prediction need?

For k = 1..L: the accuracy of the model cut after tap k (α masked above k and renormalised, or a
head refitted on the taps ≤ k), the backbone FLOPs and wall time to reach tap k, early-exit policies
swept over thresholds with their cheapest operating points, the per-sample minimal sufficient depth,
and a checkpoint cut after tap K (``--truncate K --out small.pt``). Definitions: docs/depth.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from ..auditing.metrics import accuracy, macro_f1
from ..data.images import take
from ..features.extraction import LayerFeatures, to_float_images
from ..model.evaldata import in_memory
from ..model.heads import head_kind
from ..model.settings import HeadSettings
from ..runtime.distributed import barrier, is_main
from ..runtime.errors import LayaError
from ..runtime.fileio import json_safe, strict_json
from ..runtime.progress import log
from ..training.settings import TrainingSettings
from . import early_exit as ee
from .settings import DepthSettings
from .truncation import check_k, check_maskable, fold_head, masked_output, refit_head

DEPTH_FORMAT = "laya-depth"
DEPTH_VERSION = 1
TOLERANCES = (0.01, 0.005)  # operating points within 1 pp and 0.5 pp of the full model's accuracy


class DepthResult:
    """``laya depth``'s analysis, of either task: ``kind`` says what its tables hold — ``"layers"`` (a classifier's
    ``LayerDepthResult``: the model cut after each tap, early exit per sample, the minimal sufficient depth) or
    ``"tokens"`` (a language model's ``TokenExitResult``: early exit per token). Every kind has ``.to_dict()`` (the
    JSON ``laya depth --json`` writes), ``.to_json()``, ``.to_pandas()`` and ``.settings``; its display (``repr``,
    Jupyter) follows its kind."""

    kind: ClassVar[str]

    def to_dict(self) -> dict:
        raise NotImplementedError

    def to_json(self) -> str:
        return strict_json(self.to_dict())

    def to_pandas(self):
        """The result's main table, by its kind. A classifier's (``"layers"``): the truncation table, one row per
        depth ``k`` (the index): ``layer``, ``accuracy``, ``macro_f1`` and ``delta`` (vs the full model) of the
        model cut after tap k (α masked; None for a head without α), ``flops``/``flops_block``/``flops_fraction``
        and ``seconds_per_image``/``time_fraction`` up to tap k (the medians over the timing rounds;
        ``seconds_range``/``time_fraction_range`` their intervals; ``time_fraction`` None where the rounds were too
        noisy to tell, ``compute["time_noisy"]``), and with refit ``refit_accuracy``, ``refit_macro_f1``,
        ``refit_delta``, ``refit_epochs``. A language model's (``"tokens"``): the early-exit sweep, one row per
        policy and threshold (the oracle's None): ``ce_bits``, ``ce_increase`` (vs the policy at full depth),
        ``ce_over_model``, ``mean_layers``, ``saving``."""
        import pandas as pd

        rows, index = self.table()
        return pd.DataFrame(rows).set_index(index)

    def table(self) -> tuple[list[dict], list[str]]:
        """``to_pandas``'s rows and index columns."""
        raise NotImplementedError

    def __repr__(self) -> str:
        """The terminal's tables as plain text, at a terminal's width (report/notebook.py)."""
        from ..report.notebook import depth_text

        return depth_text(self.to_dict(), self.kind)

    def _repr_html_(self) -> str:
        """Jupyter's display: a classifier's report.html depth section, its accuracy-against-compute plot inline; a
        language model's tables."""
        from ..report.notebook import depth_html

        return depth_html(self.to_dict(), self.kind)


@dataclass(repr=False)
class LayerDepthResult(DepthResult):
    """A classifier's depth analysis (``DepthResult`` of kind ``"layers"``)."""

    kind: ClassVar[str] = "layers"
    settings: dict
    n_samples: int
    layers: list[str]
    classes: list[str]
    head: str
    full: dict  # accuracy, macro_f1 of the full model on these samples
    compute: dict  # flops per tap (cumulative), per block, of the full model; seconds per image; fractions
    truncation: list[dict]  # one row per k
    early_exit: dict | None  # source, points, operating points
    oracle: dict  # minimal sufficient depth
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return json_safe({"format": DEPTH_FORMAT, "version": DEPTH_VERSION, **asdict(self)})

    def table(self) -> tuple[list[dict], list[str]]:
        return self.truncation, ["k"]


# --------------------------------------------------------------------------- per-depth predictions


@torch.no_grad()
def depth_predictions(
    head, feats: LayerFeatures, reference: list[Tensor], batch_size: int = 256, device: str = "cpu"
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(N, L) predictions and p_max of the head masked above each depth k (column L-1: the full head),
    and (N, L) the α mass of the layers ≤ k (None for a head without α)."""
    check_maskable(head)
    head.eval().to(device)
    n, L = len(feats), len(feats.feats)
    ref = [r.to(device).float() for r in reference]
    preds = torch.empty(n, L, dtype=torch.long)
    pmax = torch.empty(n, L, dtype=torch.float64)
    mass = torch.empty(n, L, dtype=torch.float64) if head.has_alpha else None
    for s in range(0, n, batch_size):
        e = min(s + batch_size, n)
        x = [f[s:e].to(device).float() for f in feats.feats]
        for k in range(1, L + 1):
            out = masked_output(head, x, ref, k)
            preds[s:e, k - 1] = out.logits.argmax(-1).cpu()
            pmax[s:e, k - 1] = torch.softmax(out.logits.double(), -1).max(-1).values.cpu()
            if mass is not None:  # computed as 1 − the mass above k: exactly 1 at k = L
                mass[s:e, k - 1] = 1 - out.alpha[:, k:].double().sum(-1).cpu()
    return preds, pmax, mass


@torch.no_grad()
def head_predictions(
    head, feats: LayerFeatures, k: int, batch_size: int = 256, device: str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Predictions and p_max of a head that reads the first k layers."""
    head.eval().to(device)
    preds, pmax = [], []
    for s in range(0, len(feats), batch_size):
        logits = head([f[s : s + batch_size].to(device).float() for f in feats.feats[:k]]).logits
        preds.append(logits.argmax(-1).cpu())
        pmax.append(torch.softmax(logits.double(), -1).max(-1).values.cpu())
    return torch.cat(preds), torch.cat(pmax)


def _train_config(model, settings: DepthSettings) -> TrainingSettings:
    known = {f for f in TrainingSettings.__dataclass_fields__}
    recorded = {k: v for k, v in model.checkpoint.get("train_config", {}).items() if k in known}
    epochs = {} if settings.refit_epochs is None else {"epochs": settings.refit_epochs}
    return TrainingSettings(**{**recorded, "device": settings.device, **epochs}).validate()


def refit_heads(model, fit_feats: dict[str, LayerFeatures], depths, settings: DepthSettings) -> dict[int, tuple]:
    """{k: (head, epochs run)}: a head of the checkpoint's kind retrained on the taps ≤ k."""
    cfg = _train_config(model, settings)
    head_cfg = HeadSettings(**model.checkpoint["head"]["config"])
    train, val = fit_feats["train"], fit_feats["val"]
    out = {}
    for k in depths:
        log(f"refit: {model.head_kind} head on the first {k} layer(s)")
        # One line per epoch: a refit on a large split runs for minutes, silence would look like a hang.
        head, history = refit_head(
            model.head_kind,
            (train.feats, train.labels),
            (val.feats, val.labels),
            k,
            len(model.classes),
            head_cfg,
            cfg,
            on_epoch=lambda r, k=k: log(
                f"  refit k={k} epoch {r.epoch:3d}  val acc {r.val_accuracy:.4f}{'  *best' if r.best else ''}"
            ),
            widths=model.checkpoint["dims"],
        )
        out[k] = (head, len(history))
    return out


# --------------------------------------------------------------------------- compute


def _compute_input(data, model, n: int, device: str) -> Tensor:
    images = getattr(data, "images", None)
    if images is not None and len(images):
        x = take(images, slice(0, min(n, len(images))))
        x = to_float_images(torch.as_tensor(x) if not isinstance(x, Tensor) else x)
        if len(x) < n:  # fewer samples than a timing batch: repeat them
            x = x.repeat((n + len(x) - 1) // len(x), *[1] * (x.ndim - 1))[:n]  # images or token batches
        return x.to(device)
    return model.backbone.probe_input(n).to(device)


def measure_compute(model, data, settings: DepthSettings) -> dict:
    """FLOPs per image up to each tap and of the whole model; wall seconds per image likewise."""
    from .compute import model_flops, tap_flops, tap_seconds

    backbone = model.backbone.to(settings.device)
    x = _compute_input(data, model, settings.time_batch, settings.device)
    flops = tap_flops(backbone, x[:1])
    full = model_flops(backbone, x[:1])
    out = {
        "flops": flops,
        "flops_block": [f - p for f, p in zip(flops, [0, *flops[:-1]])],
        "flops_full_model": full,
        "flops_fraction": [f / full if full else float("nan") for f in flops],
        "seconds_per_image": None,
        "seconds_range": None,
        "seconds_full_model": None,
        "seconds_full_model_range": None,
        "time_fraction": None,
        "time_fraction_range": None,
        "time_noisy": False,
        "time_batch": settings.time_batch,
        "time_repeats": settings.time_repeats,
        "device": settings.device,
    }
    if settings.time_repeats:
        out.update(timed_compute(*tap_seconds(backbone, x, settings.time_repeats), len(x)))
    return out


def measured(time_fraction: list | None) -> list[float] | None:
    """The time fractions an expected time is computed from: all of them, or None where any depth's was noise (an
    early exit's mean time over depths would carry it)."""
    return time_fraction if time_fraction and all(f is not None for f in time_fraction) else None


def timed_compute(depths: list[list[float]], whole: list[float], per: int) -> dict:
    """The compute dict's times (``depths``: each depth's rounds; ``whole``: the whole model's; ``per`` images a
    round): per depth the median seconds per image with its interval, and its time fraction — its time ÷ the whole
    model's in the same round, the median over the rounds with its interval. A fraction whose interval is wider than
    ``timing.NOISE_WIDTH`` (20 points) is noise, not a measurement: that depth's ``time_fraction`` is None (no
    number to misread: a share of 5.688), ``time_noisy`` says some depth is and ``time_fraction_range`` keeps what
    the rounds gave."""
    from ..stats.timing import ratio_summary, seconds_summary

    secs = [seconds_summary(r, per) for r in depths]
    full = seconds_summary(whole, per)
    fractions = [ratio_summary(r, whole) for r in depths]
    noisy = any(f["noisy"] for f in fractions)
    return {
        "seconds_per_image": [s["seconds"] for s in secs],
        "seconds_range": [s["interval"] for s in secs],
        "seconds_full_model": full["seconds"],
        "seconds_full_model_range": full["interval"],
        "time_fraction": [None if f["noisy"] else f["value"] for f in fractions],
        "time_fraction_range": [f["interval"] for f in fractions],
        "time_noisy": noisy,
    }


# --------------------------------------------------------------------------- the run


def run_depth(
    model, data, settings: DepthSettings | None = None, fit_feats: dict[str, LayerFeatures] | None = None
) -> LayerDepthResult:
    """The whole analysis on ``data`` (EvalData or features). ``fit_feats`` (train/val features of the
    checkpoint's data) are needed with ``settings.refit``."""
    settings = settings or DepthSettings()  # valid as built
    head, dev, bs = model.head, settings.device, settings.batch_size
    maskable = getattr(head, "maskable", False)
    if not maskable and not settings.refit:
        check_maskable(head)
    feats = in_memory(getattr(data, "features", data))
    if len(feats) == 0:
        raise LayaError("nothing to analyse: the data set has no samples")
    L, labels, C = len(feats.feats), feats.labels, len(model.classes)
    notes: list[str] = []

    full_pred, full_pmax = head_predictions(head, feats, L, bs, dev)
    full_acc = accuracy(full_pred, labels)
    masked = depth_predictions(head, feats, model.reference, bs, dev) if maskable else None

    refit = None
    if settings.refit:
        if fit_feats is None:
            raise LayaError("--refit needs the features of the checkpoint's training data")
        heads = refit_heads(model, fit_feats, range(1, L + 1), settings)
        refit = {k: (*head_predictions(h, feats, k, bs, dev), epochs) for k, (h, epochs) in heads.items()}

    compute = measure_compute(model, data, settings)
    rows = truncation_rows(list(model.layer_names), labels, C, full_acc, masked, refit, compute)

    # Early exit and the oracle read the masked predictions, or the refitted heads' when the head has no α
    # (the full model stays the checkpoint's own head at k = L).
    if masked is not None:
        source, (preds, pmax, mass) = "masked", masked
    else:
        source = "refit"
        preds = torch.stack([refit[k][0] for k in range(1, L)] + [full_pred], 1)
        pmax = torch.stack([refit[k][1] for k in range(1, L)] + [full_pmax], 1)
        mass = None
        notes.append(
            f"a {head_kind(head)} head has no α: early exit and the oracle use the refitted heads below depth {L}"
        )
    early = early_exit_summary(source, preds, pmax, mass, labels, full_acc, settings.thresholds, compute, C)
    oracle = oracle_depth(source, preds, labels, model.classes, compute)
    if L < 2:
        notes.append("only 1 layer: there is no shallower model to compare with")
    return LayerDepthResult(
        settings={**asdict(settings), "head": head_kind(head), "dataset": getattr(data, "dataset", None)},
        n_samples=len(labels),
        layers=list(model.layer_names),
        classes=list(model.classes),
        head=head_kind(head),
        full={"accuracy": full_acc, "macro_f1": macro_f1(full_pred, labels, C)},
        compute=compute,
        truncation=rows,
        early_exit=early,
        oracle=oracle,
        notes=notes,
    )


def truncation_rows(
    layers: list[str], labels: Tensor, C: int, full_acc: float, masked, refit: dict | None, compute: dict
) -> list[dict]:
    """One row per depth k: the masked model's accuracy (a head with α), the compute up to tap k, and with
    refit the refitted head's accuracy."""
    flops_frac, time_frac = compute["flops_fraction"], compute["time_fraction"]
    rows = []
    for k in range(1, len(layers) + 1):
        row = {"k": k, "layer": layers[k - 1], "accuracy": None, "macro_f1": None, "delta": None}
        if masked is not None:
            p = masked[0][:, k - 1]
            acc = accuracy(p, labels)
            row.update(accuracy=acc, macro_f1=macro_f1(p, labels, C), delta=acc - full_acc)
        row.update(
            flops=compute["flops"][k - 1],
            flops_block=compute["flops_block"][k - 1],
            flops_fraction=flops_frac[k - 1],
            seconds_per_image=compute["seconds_per_image"][k - 1] if compute["seconds_per_image"] else None,
            seconds_range=(compute.get("seconds_range") or [None] * len(layers))[k - 1],
            time_fraction=time_frac[k - 1] if time_frac else None,
            time_fraction_range=(compute.get("time_fraction_range") or [None] * len(layers))[k - 1],
        )
        if refit is not None:
            p, _, epochs = refit[k]
            acc = accuracy(p, labels)
            row.update(
                refit_accuracy=acc,
                refit_macro_f1=macro_f1(p, labels, C),
                refit_delta=acc - full_acc,
                refit_epochs=epochs,
            )
        rows.append(row)
    return rows


def early_exit_summary(
    source: str,
    preds: Tensor,
    pmax: Tensor,
    mass: Tensor | None,
    labels: Tensor,
    full_acc: float,
    thresholds,
    compute: dict,
    C: int,
) -> dict:
    """The threshold sweeps of each policy (p_max; α mass for a head with α) and their cheapest operating
    points within each of ``TOLERANCES`` of the full model's accuracy, best overall and per policy."""
    flops_frac, time_frac = compute["flops_fraction"], measured(compute["time_fraction"])
    points = ee.sweep("p_max", preds, pmax, labels, thresholds, flops_frac, time_frac, C)
    if mass is not None:
        points += ee.sweep("alpha_mass", preds, mass, labels, thresholds, flops_frac, time_frac, C)
    operating = {}
    for tol in TOLERANCES:
        best = ee.cheapest_within(points, full_acc, tol)
        by_policy = {
            pol: ee.cheapest_within([p for p in points if p.policy == pol], full_acc, tol)
            for pol in dict.fromkeys(p.policy for p in points)
        }
        operating[f"{tol * 100:g}pp"] = {
            "tolerance": tol,
            "best": best.to_dict() if best else None,
            "by_policy": {k: v.to_dict() if v else None for k, v in by_policy.items()},
        }
    return {"source": source, "points": [p.to_dict() for p in points], "operating_points": operating}


def oracle_depth(source: str, preds: Tensor, labels: Tensor, classes: list[str], compute: dict) -> dict:
    """The per-sample minimal sufficient depth: its mean, the compute it would take, its histogram (per class)."""
    L = preds.shape[1]
    flops_frac, time_frac = compute["flops_fraction"], measured(compute["time_fraction"])
    depth = ee.minimal_sufficient_depth(preds)
    by_class = {}
    for c in range(len(classes)):
        rows_c = labels == c
        if rows_c.any():
            by_class[classes[c]] = ee.depth_histogram(depth[rows_c], L)
    return {
        "source": source,
        "mean_depth": float(depth.double().mean() + 1),
        "flops_fraction": float(torch.tensor(flops_frac, dtype=torch.float64)[depth].mean()),
        "time_fraction": float(torch.tensor(time_frac, dtype=torch.float64)[depth].mean()) if time_frac else None,
        "histogram": ee.depth_histogram(depth, L),
        "by_class": by_class,
    }


# --------------------------------------------------------------------------- a truncated model out


@dataclass
class TruncateResult:
    k: int
    layer: str
    head: str  # masked | refit
    accuracy: float
    macro_f1: float
    full_accuracy: float
    parameters: int  # backbone parameters kept
    parameters_full: int
    flops_fraction: float
    out: str


def n_parameters(state: dict) -> int:
    return int(sum(t.numel() for t in state.values() if t.is_floating_point()))


def truncate_model(
    model, data, settings: DepthSettings, out: str | Path, fit_feats: dict[str, LayerFeatures] | None = None
) -> TruncateResult:
    """Write a laya checkpoint whose backbone stops after tap K and whose head reads the taps ≤ K
    (the masked head folded into a K-layer head, or with ``refit`` a retrained one). It is built by the
    one checkpoint builder (``checkpoint.checkpoint_body``) from the cut backbone, so its weights are the
    kept ones, its SHA-256 is theirs, and ``model.laya_model.load_model`` rebuilds it (``spec.cut``)."""
    from ..model.checkpoint import save_checkpoint
    from .compute import model_flops, tap_flops

    L = model.num_layers
    k = check_k(settings.truncate, L)
    if model.checkpoint["backbone"].get("program") is not None:
        raise LayaError(
            "a torch.export program (.pt2) backbone cannot be written truncated; "
            "export the model up to the layer you want instead"
        )
    if not settings.refit:
        check_maskable(model.head)
    feats = in_memory(getattr(data, "features", data))
    labels, C = feats.labels, len(model.classes)
    dev = settings.device
    small_backbone = model.backbone.truncated(k)  # one line when the model cannot be cut there
    head, how = truncated_head(model, k, settings, fit_feats)
    pred, _ = head_predictions(head, feats, k, settings.batch_size, dev)
    full_pred, _ = head_predictions(model.head, feats, L, settings.batch_size, dev)
    n_kept, n_full = n_parameters(small_backbone.model.state_dict()), n_parameters(model.backbone.model.state_dict())
    x = _compute_input(data, model, 1, dev)
    flops_frac = tap_flops(model.backbone.to(dev), x)[k - 1] / max(model_flops(model.backbone, x), 1)
    acc, full_acc = accuracy(pred, labels), accuracy(full_pred, labels)
    small = cut_checkpoint(
        model, small_backbone, head, k, {"test_accuracy": acc, "test_macro_f1": macro_f1(pred, labels, C)}
    )
    small["truncated"] = {
        "depth": k,
        "of": L,
        "layer": model.layer_names[k - 1],
        "head": how,
        "parameters": n_kept,
        "parameters_full": n_full,
        "flops_fraction": flops_frac,
        "full_test_accuracy": full_acc,
        "evaluated_on": {"dataset": getattr(data, "dataset", None), "samples": len(labels)},
    }
    if is_main():  # under torchrun every rank computes the same; rank 0 writes
        save_checkpoint(small, out)
    barrier()
    return TruncateResult(
        k=k,
        layer=model.layer_names[k - 1],
        head=how,
        accuracy=acc,
        macro_f1=small["metrics"]["test_macro_f1"],
        full_accuracy=full_acc,
        parameters=n_kept,
        parameters_full=n_full,
        flops_fraction=flops_frac,
        out=str(out),
    )


def truncated_head(model, k: int, settings: DepthSettings, fit_feats: dict[str, LayerFeatures] | None):
    """``(head, how)``: the head of a model cut after tap k, the masked head folded into a k-layer one
    (``"masked"``) or, with ``settings.refit``, one retrained on the taps ≤ k (``"refit"``)."""
    if settings.refit:
        if fit_feats is None:
            raise LayaError("--refit needs the features of the checkpoint's training data")
        head, _ = refit_heads(model, fit_feats, [k], settings)[k]
        return head, "refit"
    reference = [r.to(settings.device) for r in model.reference]
    config = HeadSettings(**model.checkpoint["head"]["config"])
    return fold_head(model.head, reference, k, config, len(model.classes)), "masked"


def cut_checkpoint(model, small_backbone, head, k: int, metrics: dict) -> dict:
    """The checkpoint of ``model`` cut after tap k (``small_backbone``, ``head``), its test ``metrics`` those
    of the cut model: the spec names the kept taps and is marked cut, the weights' source says where."""
    from ..backbones.build import BackboneSpec

    ckpt = model.checkpoint
    spec = BackboneSpec.from_dict(ckpt["backbone"]["spec"])
    spec.layers, spec.formats, spec.cut = list(model.layer_names[:k]), list(model.backbone.tap_formats[:k]), True
    spec.dropped = [i for i in spec.dropped if i < k]  # layers dropped above the cut are gone with it
    how = f"truncated after {model.layer_names[k - 1]} (tap {k} of {model.num_layers})"
    reference = [r.detach().cpu() for r in model.reference[:k]]
    return reshaped_checkpoint(model, small_backbone, spec, head, reference, metrics, how)


def reshaped_checkpoint(model, small_backbone, spec, head, reference, metrics: dict, how: str) -> dict:
    """The checkpoint of ``model`` reshaped (cut, or with layers dropped) into ``small_backbone`` with ``spec``,
    ``head`` over its taps and their ``reference``; its test ``metrics`` those of the reshaped model; the weights'
    source says ``how`` it was reshaped. Built by the one checkpoint builder, so its weights are the kept ones and
    its SHA-256 is theirs."""
    from ..model.checkpoint import checkpoint_body

    ckpt, k = model.checkpoint, len(spec.layers)
    return checkpoint_body(
        backbone=small_backbone,
        spec=spec,
        head=head,
        head_config=dict(ckpt["head"]["config"]),
        dims=list(ckpt["dims"][:k]),
        classes=model.classes,
        dataset=ckpt.get("dataset", {}),
        reference=reference,
        history=ckpt.get("history", []),
        metrics={**ckpt["metrics"], **metrics},
        train_config=ckpt.get("train_config", {}),
        feature_dtype=ckpt.get("feature_dtype", "float32"),
        recorded={
            **ckpt["backbone"],
            "source": f"{ckpt['backbone'].get('source') or small_backbone.weights_source}, {how}",
        },
    )
