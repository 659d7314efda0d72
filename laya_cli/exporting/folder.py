"""``laya export``: per-sample layer attention as data (tables) and as pictures.

What gets written (documented in docs/export.md):

  DIR/samples.{csv,parquet,npz}   one row per sample: index, (text: a text model's input), label, label_name,
                                  predicted, predicted_name, correct, p_pred, alpha[<layer>]…, contrib[<layer>]…
  DIR/profiles.csv                class × layer mean/std/n of α (and contrib), for all /
                                  correct / incorrect predictions, grouped by the TRUE class
  DIR/global_profile.csv          layer mean/std/n over all samples (all / correct / incorrect)
  DIR/attention_shift.csv         per class: Jensen–Shannon divergence (base 2) between the mean α
                                  of correct and of incorrect predictions, ranked
  DIR/summary.json                model info, accuracy, the small tables, the file list
  DIR/plots/*.png                 matplotlib figures (see figures.py), unless plots are off
  DIR/report.html                 one self-contained page with every plot embedded and the per-sample explorer
  DIR/audit.json                  with --audit FILE: that audit (the report shows it)
  DIR/depth.json                  with --depth FILE (or MODEL.depth.json beside the checkpoint): that depth result
  DIR/README.md                   with --model-card: a Hugging Face model card with the audit (card.py)

Everything is built in a hidden temp folder next to DIR and renamed into place at the end,
so an error or an interrupt never leaves a half-written export behind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..auditing.budget import plan_rows
from ..auditing.collapse import collapse_summary, collapse_warning, trained_against
from ..auditing.methods import contrib as contrib_scores
from ..auditing.plan import Rows, Shard
from ..data.settings import EvalDataSettings
from ..features.extraction import feature_batches, num_layers
from ..runtime import fileio
from ..runtime.declare import check_at_least
from ..runtime.distributed import broadcast_object, is_main
from ..runtime.errors import LayaError, match_choice, unknown_choice
from ..runtime.fileio import json_safe, strict_json
from ..runtime.memory import MemoryRequest, memory_budget, peak_memory_mb, reset_peak_memory, retry_halving
from ..runtime.shape import NONE, NUM, Each, Optional, shape_error
from .profiles import (
    SHIFT_RANKED_FROM,
    alpha_col,
    attention_shift,
    class_layer_profiles,
    contrib_col,
    global_profile,
    subset_mask,
)
from .settings import FORMATS, ExportSettings

EXPORT_FORMAT = "laya-export"
EXPORT_VERSION = 1
EXPORT_BATCH = 1024  # samples per head pass (fewer within a --max-memory budget)
SAMPLE_FILES = {"csv": "samples.csv", "parquet": "samples.parquet", "npz": "samples.npz"}
RESULT_FILES = {
    "audit": "audit.json",
    "depth": "depth.json",
}  # attached results (report.html shows each), copied into the export


# --------------------------------------------------------------------------- the result


class Export:
    """``laya export``'s result, of either task: ``kind`` says what its tables hold — ``"classes"`` (a classifier's
    ``ClassExport``: one row per sample, class × layer profiles, the attention shift) or ``"tokens"`` (a language
    model's ``TokenExport``: one row per held-out position). Every kind has ``.table``, ``.layers``, ``.info``,
    ``.notes``, ``.out``, ``.files``, ``.n`` and ``.accuracy``; its display (``repr``, Jupyter) follows its kind."""

    kind: ClassVar[str]

    def __repr__(self) -> str:
        """A summary line and the kind's table as plain text, at a terminal's width."""
        from ..report.notebook import export_text

        return export_text(self)

    def _repr_html_(self) -> str:
        """Jupyter's display: a classifier's class × layer picture of mean α with the per-layer and shift tables; a
        language model's mean α per layer."""
        from ..report.notebook import export_html

        return export_html(self)


@dataclass(repr=False)
class ClassExport(Export):
    """A classifier's export: everything it writes, as in-memory tables (usable without writing anything)."""

    kind: ClassVar[str] = "classes"

    table: pd.DataFrame  # one row per sample
    layers: list[str]
    classes: list[str]
    has_alpha: bool
    has_contrib: bool
    alpha_is_global: bool  # scalarmix: the same α for every input
    profiles: pd.DataFrame | None  # long: quantity, subset, class, class_name, layer, layer_index, mean, std, n
    global_profile: pd.DataFrame | None  # long: quantity, subset, layer, layer_index, mean, std, n
    shift: pd.DataFrame | None  # ranked JS table, one row per class
    images: Tensor | None  # raw images of the samples, same order as the table (for the strip); None for text
    info: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    out: Path | None = None  # set once written
    files: list[str] = field(default_factory=list)  # relative paths written, set once written
    results: dict[str, dict] = field(default_factory=dict)  # attached results, e.g. {"audit": audit JSON}
    card: dict | None = None  # --model-card: {"model", "checkpoint"} to write README.md from
    # How much of the depth α uses over the exported samples (auditing/collapse.py; None without α), and the
    # warning report.html shows when it has collapsed
    alpha_collapse: dict | None = None
    collapse_warning: str | None = None
    # The attention shift is ranked from this JS divergence on (bits; profiles.SHIFT_RANKED_FROM): what the report's
    # table, picture and captions say
    shift_ranked_from: float = SHIFT_RANKED_FROM

    @property
    def n(self) -> int:
        return len(self.table)

    @property
    def texts(self) -> list[str] | None:
        """A text model's samples (the table's ``text`` column, shown where images get thumbnails); None for images."""
        return self.table["text"].tolist() if "text" in self.table else None

    @property
    def accuracy(self) -> float:
        return float(self.table["correct"].mean()) if len(self.table) else float("nan")

    def matrix(self, subset: str = "all", quantity: str = "alpha", stat: str = "mean") -> np.ndarray:
        """(C, L) class × layer matrix of one statistic from the profiles."""
        if self.profiles is None:
            raise LayaError("this export has no layer attention")
        p = self.profiles[(self.profiles["quantity"] == quantity) & (self.profiles["subset"] == subset)]
        return (
            p.pivot(index="class", columns="layer_index", values=stat)
            .reindex(index=range(len(self.classes)), columns=range(len(self.layers)))
            .to_numpy(dtype=float)
        )

    def counts(self, subset: str = "all") -> np.ndarray:
        """(C,) number of samples per true class in a subset."""
        return np.bincount(self.table["label"].to_numpy()[subset_mask(self.table, subset)], minlength=len(self.classes))


# --------------------------------------------------------------------------- computing


@torch.no_grad()
def _predict(model, feats, device: str, batch_size: int):
    """logits, α (or None) and contrib (or None) for all samples, on the CPU.

    ``feats``: LayerFeatures or StreamedFeatures (streamed in batches). Under torchrun each rank
    runs its own contiguous whole batches and the rows are gathered back in order on every rank.
    """
    head = model.head.to(device).eval()
    has_alpha, can_contrib = head.has_alpha, head.has_layer_logits  # decided up front: a rank may get no batch
    n_layers = num_layers(feats)
    shard = Shard(len(feats), batch_size)
    rows = Rows(shard.n).add_state("logits", torch.float32, len(model.classes))
    if has_alpha:
        rows.add_state("alpha", torch.float32, n_layers)
        if can_contrib:
            rows.add_state("contrib", torch.float64, n_layers)
    for chunk, _ in feature_batches(feats, batch_size, shard.start, shard.stop):
        x = [f.to(device).float() for f in chunk]
        out = head(x)
        rows.append(logits=out.logits.float().cpu())
        if has_alpha:
            if out.alpha is None:
                raise LayaError(f"the {model.head_kind} head returned no layer attention")
            rows.append(alpha=out.alpha.float().cpu())
            if can_contrib:
                rows.append(contrib=contrib_scores(head, x, out.logits.argmax(-1)).cpu())
    got = rows.gather()
    return got["logits"], got.get("alpha"), got.get("contrib")


def build_table(
    index,
    labels,
    logits: Tensor,
    alpha: Tensor | None,
    contrib: Tensor | None,
    layers: Sequence[str],
    classes: Sequence[str],
    texts: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The per-sample table; a text model's samples get a ``text`` column beside their ``index``."""
    labels = torch.as_tensor(labels).long()
    probs = torch.softmax(logits.double(), -1)
    p_pred, pred = probs.max(-1)
    names = np.asarray(classes, dtype=object)
    cols: dict[str, object] = {
        "index": torch.as_tensor(index).long().numpy(),
        **({"text": np.asarray(list(texts), dtype=object)} if texts is not None else {}),
        "label": labels.numpy(),
        "label_name": names[labels.numpy()] if len(labels) else np.array([], dtype=object),
        "predicted": pred.numpy(),
        "predicted_name": names[pred.numpy()] if len(labels) else np.array([], dtype=object),
        "correct": (pred == labels).numpy(),
        "p_pred": p_pred.numpy(),
    }
    if alpha is not None:
        for i, name in enumerate(layers):
            cols[alpha_col(name)] = alpha[:, i].double().numpy()
    if contrib is not None:
        for i, name in enumerate(layers):
            cols[contrib_col(name)] = contrib[:, i].double().numpy()
    return pd.DataFrame(cols)


def assemble(
    table: pd.DataFrame,
    layers: Sequence[str],
    classes: Sequence[str],
    images: Tensor | None = None,
    info: dict | None = None,
    alpha_is_global: bool = False,
    notes: Sequence[str] = (),
    against: str | None = None,
) -> ClassExport:
    """Derive profiles, global profile and the JS ranking from a per-sample table; ``against``: what α was trained
    to rank (``auditing.collapse.trained_against``), which says how a collapsed α reads."""
    layers, classes = list(layers), list(classes)
    has_alpha = all(alpha_col(n) in table for n in layers) and bool(layers)
    has_contrib = has_alpha and all(contrib_col(n) in table for n in layers)
    quantities = ["alpha"] + (["contrib"] if has_contrib else [])
    profiles = class_layer_profiles(table, layers, classes, quantities) if has_alpha else None
    gprofile = global_profile(table, layers, quantities) if has_alpha else None
    shift = attention_shift(table, layers, classes) if has_alpha else None
    exp = ClassExport(
        table,
        layers,
        classes,
        has_alpha,
        has_contrib,
        alpha_is_global,
        profiles,
        gprofile,
        shift,
        images,
        dict(info or {}),
        list(notes),
    )
    if has_alpha:
        exp.alpha_collapse = collapse_summary(
            torch.from_numpy(table[[alpha_col(n) for n in layers]].to_numpy(np.float64, copy=True)), against
        )
        if exp.alpha_collapse["collapsed"]:
            exp.collapse_warning = collapse_warning(exp.alpha_collapse, layers)
    return exp


def compute_export(
    model, data, device: str = "cpu", batch_size: int = EXPORT_BATCH, info: dict | None = None
) -> ClassExport:
    """Run the head of ``model`` (a LayaModel) over ``data`` (an evaldata.EvalData)."""
    logits, alpha, contrib = _predict(model, data.features, device, batch_size)
    notes = []
    kind = model.head_kind
    if alpha is None:
        notes.append(
            f"the {kind} head has no layer attention: exporting predictions only "
            f"(no alpha[…]/contrib[…] columns, profiles, heatmaps or attention shift)"
        )
    elif contrib is None:
        notes.append(
            f"the {kind} head has no per-layer logits: contrib[…] columns are left out (contrib needs a laya head)"
        )
    alpha_is_global = kind == "scalarmix"
    if alpha is not None and alpha_is_global:
        notes.append(
            "the scalarmix head's α is global (the same for every input), so class profiles are flat "
            "and the attention shift is 0"
        )
    texts = getattr(data, "texts", None)  # a text model's strings (its images are token ids: no pictures)
    table = build_table(
        data.index, data.features.labels, logits, alpha, contrib, model.layer_names, model.classes, texts
    )
    metrics = model.checkpoint.get("metrics", {})
    base = {
        "backbone": model.spec.name,
        "head": kind,
        "layers": list(model.layer_names),
        "classes": list(model.classes),
        "dataset": data.dataset,
        "checkpoint_test_accuracy": metrics.get("test_accuracy"),
    }
    base.update(info or {})
    images = data.images if texts is None else None
    against = trained_against(getattr(model, "checkpoint", None))
    exp = assemble(table, model.layer_names, model.classes, images, base, alpha_is_global, notes, against)
    exp.info["n_samples"] = exp.n
    exp.info["accuracy"] = exp.accuracy
    return exp


# --------------------------------------------------------------------------- writing


def check_format(fmt: str) -> str:
    """A format given as a word (``write_export``): one of ``FORMATS``, its library installed."""
    return check_installed(match_choice("format", fmt, FORMATS))


def check_installed(fmt: str) -> str:
    """What a declared format needs beyond laya: parquet, pyarrow."""
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise LayaError(
                "--format parquet needs pyarrow: pip install 'laya-audit[parquet]' (or use csv/npz)"
            ) from None
    return fmt


def is_export_dir(path: Path) -> bool:
    """A folder a previous ``laya export`` wrote (its summary.json carries the export marker)."""
    try:
        return json.loads((path / "summary.json").read_text(encoding="utf-8")).get("format") == EXPORT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_out_dir(out: str | Path, overwrite: bool = False) -> Path:
    """``--out`` may be written: missing, empty, or (with ``overwrite``) a previous laya export."""
    return fileio.check_out_dir(out, overwrite, is_export_dir, "laya export")


def _records(df: pd.DataFrame | None) -> list[dict] | None:
    if df is None:
        return None
    return json_safe(df.astype(object).where(df.notna(), None).to_dict(orient="records"))


def write_samples(exp: ClassExport, path: Path, fmt: str) -> None:
    t = exp.table
    if fmt == "csv":
        t.to_csv(path, index=False)
    elif fmt == "parquet":
        t.to_parquet(path, engine="pyarrow", index=False)
    elif fmt == "npz":
        arrays = {
            "index": t["index"].to_numpy(np.int64),
            **({"text": t["text"].to_numpy(str)} if "text" in t else {}),
            "label": t["label"].to_numpy(np.int64),
            "label_name": t["label_name"].to_numpy(str),
            "predicted": t["predicted"].to_numpy(np.int64),
            "predicted_name": t["predicted_name"].to_numpy(str),
            "correct": t["correct"].to_numpy(bool),
            "p_pred": t["p_pred"].to_numpy(np.float64),
            "layers": np.asarray(exp.layers, dtype=str),
            "classes": np.asarray(exp.classes, dtype=str),
        }
        if exp.has_alpha:
            arrays["alpha"] = t[[alpha_col(n) for n in exp.layers]].to_numpy(np.float64)
        if exp.has_contrib:
            arrays["contrib"] = t[[contrib_col(n) for n in exp.layers]].to_numpy(np.float64)
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    else:  # pragma: no cover - check_format guards this
        raise unknown_choice("format", fmt, FORMATS)


def summary(exp: ClassExport, fmt: str) -> dict:
    from .. import __version__

    return json_safe(
        {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_VERSION,
            "laya_version": __version__,
            "model": exp.info,
            "n_samples": exp.n,
            "accuracy": exp.accuracy,
            "samples_file": SAMPLE_FILES[fmt],
            "columns": list(exp.table.columns),
            "has_alpha": exp.has_alpha,
            "has_contrib": exp.has_contrib,
            "alpha_is_global": exp.alpha_is_global,
            "alpha_collapse": exp.alpha_collapse,
            "notes": exp.notes,
            "results": {key: RESULT_FILES.get(key, f"{key}.json") for key in exp.results},
            "global_profile": _records(exp.global_profile),
            "attention_shift": _records(exp.shift),
            "attention_shift_ranked_from": exp.shift_ranked_from,  # JS bits: below it a class has no rank
            "files": exp.files,
        }
    )


def _write_all(exp: ClassExport, root: Path, fmt: str, plots: bool, strip: int) -> list[str]:
    from ..report.figures import can_strip, render_plots, thumbnails
    from ..report.html import render_html

    files = []
    write_samples(exp, root / SAMPLE_FILES[fmt], fmt)
    files.append(SAMPLE_FILES[fmt])
    for name, df in (
        ("profiles.csv", exp.profiles),
        ("global_profile.csv", exp.global_profile),
        ("attention_shift.csv", exp.shift),
    ):
        if df is not None:
            df.to_csv(root / name, index=False)
            files.append(name)
    pngs: dict[str, str] = {}
    if plots:
        (root / "plots").mkdir()
        pngs = render_plots(exp, root / "plots", strip=strip)
        files += [f"plots/{p}" for p in pngs.values()]
    for key, doc in exp.results.items():
        name = RESULT_FILES.get(key, f"{key}.json")
        (root / name).write_text(strict_json(doc), encoding="utf-8")
        files.append(name)
    if exp.card is not None:
        from .card import write_card

        files.append(write_card(exp, root, pngs))
    files += ["summary.json", "report.html"]
    exp.files = files
    thumbs = thumbnails(exp.images) if can_strip(exp) else None  # the explorer's thumbnails
    (root / "summary.json").write_text(strict_json(summary(exp, fmt)), encoding="utf-8")
    (root / "report.html").write_text(render_html(exp, root, pngs, SAMPLE_FILES[fmt], plots, thumbs), encoding="utf-8")
    return files


def write_export(
    exp: ClassExport, out: str | Path, fmt: str = "csv", plots: bool = True, strip: int = 8, overwrite: bool = False
) -> ClassExport:
    """Write every file into a temp folder beside ``out``, then rename it into place."""
    fmt = check_format(fmt)
    check_at_least("--strip", strip, 0)
    with fileio.atomic_folder(out, overwrite, is_export_dir, "laya export") as tmp:
        files = _write_all(exp, tmp, fmt, plots, strip)
    exp.out, exp.files = Path(out).expanduser(), files
    return exp


# run_export's defaults (frozen: one object serves every call): the declared settings on the CPU, the checkpoint's
# own test split, every sample.
ON_CPU, OWN_TEST_SPLIT = ExportSettings(device="cpu"), EvalDataSettings()


def run_export(
    model_path: str | Path,
    out: str | Path = "export",
    settings: ExportSettings = ON_CPU,
    data: EvalDataSettings = OWN_TEST_SPLIT,
    overwrite: bool = False,
    use_cache: bool = True,
    stream: bool = True,
    memory: MemoryRequest | None = None,
    ckpt: dict | None = None,
) -> ClassExport:
    """The whole ``laya export`` of a classifier: load, compute, write atomically. Returns the Export.

    ``settings`` (resolved: its device picked) and ``data`` are valid as built: their options are not checked
    again here. ``stream``: without a feature cache, features are computed batch by batch and never held all at
    once. Under torchrun the samples are sharded over the ranks and only rank 0 writes. ``settings.audit``: a
    ``laya audit --json`` file of this model, shown in report.html and copied as audit.json; ``settings.depth``: a
    ``laya depth --json`` file of this model (default: MODEL.depth.json beside the checkpoint when there), shown in
    report.html and copied as depth.json; ``settings.model_card``: also write README.md, a Hugging Face model card
    with the audit (``card.py``). ``data.encoding``: a csv:/jsonl: data set's text encoding (default: the one
    recorded for the checkpoint's own data, else UTF-8). ``ckpt``: ``model_path`` already read.
    """
    from ..gates.regression import read_audit_json
    from ..model.evaldata import load_eval_data
    from ..model.laya_model import load_model, model_from_checkpoint

    fmt, device, audit = check_installed(settings.format or "csv"), settings.device, settings.audit
    check_out_dir(out, overwrite)
    results = {"audit": read_audit_json(audit, "--audit")} if audit is not None else {}
    model = load_model(model_path) if ckpt is None else model_from_checkpoint(ckpt)
    check_results_match(results, model, audit)
    depth_doc, depth_note = read_depth(model_path, model.layer_names, settings.depth)
    if depth_doc is not None:
        results["depth"] = depth_doc
    eval_data = load_eval_data(
        model,
        dataset=data.dataset,
        data_dir=data.data_dir,
        samples=data.samples,
        seed=settings.seed,
        device=device,
        use_cache=use_cache,
        stream=stream,
        encoding=data.encoding,
    )
    info, notes, batch = (
        {"checkpoint": str(model_path), "samples": data.samples, "seed": settings.seed},
        [],
        EXPORT_BATCH,
    )
    if memory is not None:
        reset_peak_memory(device)
        budget = memory_budget(memory.max_memory, device)
        batch, _ = plan_rows(model, eval_data, device, budget, EXPORT_BATCH)
        if batch < EXPORT_BATCH:
            notes.append(f"memory budget {budget.describe()}: {batch} samples per head pass")
        info["memory"] = {"memory_budget_mb": round(budget.total_mb, 1)}  # export_data adds the peak
    return export_data(
        model,
        eval_data,
        out,
        fmt=fmt,
        plots=settings.plots,
        strip=settings.strip,
        overwrite=overwrite,
        device=device,
        info=info,
        results=results,
        notes=notes + ([depth_note] if depth_note else []),
        batch_size=batch,
        card={"model": model, "checkpoint": str(model_path)} if settings.model_card else None,
    )


def export_data(
    model,
    data,
    out: str | Path | None = None,
    fmt: str = "csv",
    plots: bool = True,
    strip: int = 8,
    overwrite: bool = False,
    device: str = "cpu",
    info: dict | None = None,
    results: dict | None = None,
    notes: Sequence[str] = (),
    batch_size: int = EXPORT_BATCH,
    card: dict | None = None,
) -> ClassExport:
    """Compute the export of ``model`` on ``data`` (an EvalData) and, with ``out``, write it atomically.

    What ``laya export`` and ``laya_cli.export`` both run. ``results``: attached results shown in
    report.html (``{"audit": <laya audit --json>, "depth": <laya depth --json>}``, as ``laya export
    --audit/--depth`` give). ``notes``: shown with the export's own. Under torchrun the samples are
    sharded over the ranks and only rank 0 writes. ``batch_size``: samples per head pass, halved and retried
    when the device runs out of memory. ``card``: write README.md
    (``ClassExport.card``).
    """
    batch = [batch_size]

    def halve() -> str | None:
        if batch[0] == 1:
            return None
        batch[0] //= 2
        return f"{batch[0] * 2} -> {batch[0]} samples per head pass"

    exp, retries = retry_halving(lambda: compute_export(model, data, device, batch[0], info), halve, device)
    if "memory" in exp.info:  # run_export planned within a budget: the peak of the computation beside it
        exp.info["memory"]["peak_memory_mb"] = round(peak_memory_mb(device), 1)
    exp.results = dict(results or {})
    exp.card = card
    exp.notes += list(notes) + retries
    if out is None:
        return exp
    if is_main():
        exp = write_export(exp, out, fmt=fmt, plots=plots, strip=strip, overwrite=overwrite)
    # Under torchrun: the other ranks learn where rank 0 wrote (and wait until it has).
    exp.out, exp.files = broadcast_object((exp.out, exp.files) if is_main() else None)
    return exp


def check_results_match(results: dict, model, path=None) -> None:
    """An attached audit must come from a model with the same layers (else its numbers describe another model)."""
    doc = results.get("audit")
    if doc is not None and list(doc.get("layers", [])) != list(model.layer_names):
        raise LayaError(
            f"--audit {path} was taken on a model with other layers "
            f"({', '.join(map(str, doc.get('layers', []))) or 'none'}) than this checkpoint "
            f"({', '.join(model.layer_names)})"
        )


def depth_beside(model_path: str | Path) -> Path:
    """Where ``laya export`` looks for a depth result when --depth is not given: MODEL.depth.json."""
    p = Path(model_path).expanduser()
    return p.with_name(p.stem + ".depth.json")


_NUM_OR_NONE = (*NUM, NONE)
_SPAN = Optional(([NUM], NONE))
_EXIT_POINT = {"policy": str, "threshold": NUM, "accuracy": NUM, "delta": _NUM_OR_NONE, "mean_depth": NUM,
               "flops_fraction": NUM, "time_fraction": _NUM_OR_NONE}  # fmt: skip
_OPERATING_POINT = {"best": (_EXIT_POINT, NONE), "by_policy": Each((_EXIT_POINT, NONE))}
_EARLY_EXIT = ({"source": str, "points": [_EXIT_POINT], "operating_points": Optional(Each(_OPERATING_POINT))}, NONE)
_DEPTH_ROW = {"k": int, "layer": str, "accuracy": _NUM_OR_NONE, "delta": _NUM_OR_NONE, "macro_f1": _NUM_OR_NONE,
              "flops": _NUM_OR_NONE, "flops_block": _NUM_OR_NONE, "flops_fraction": NUM, "seconds_range": _SPAN,
              "time_fraction_range": _SPAN, "refit_delta": Optional(_NUM_OR_NONE)}  # fmt: skip
# What a depth result that timed its depths must hold besides (the time columns and the caption's rounds)
_TIMED_COMPUTE = {"seconds_per_image": list, "seconds_full_model": NUM, "seconds_full_model_range": _SPAN,
                  "time_repeats": int, "time_batch": int, "device": str, "time_noisy": Optional(bool)}  # fmt: skip
_TIMED_ROW = {"seconds_per_image": _NUM_OR_NONE, "time_fraction": _NUM_OR_NONE}


def depth_shape(doc) -> dict:
    """What report.html, its figure and the model's notes draw from a ``laya depth --json`` result, by type (the
    file's other fields are free): checked before anything is drawn from it. A result that timed its depths must
    hold the times; one whose heads were refitted, every depth's refitted accuracy."""
    compute = (doc.get("compute") if isinstance(doc, dict) else None) or {}
    rows = (doc.get("truncation") if isinstance(doc, dict) else None) or []
    timed = isinstance(compute, dict) and compute.get("seconds_per_image") is not None
    refit = isinstance(rows, list) and any(isinstance(r, dict) and "refit_accuracy" in r for r in rows)
    return {
        "format": str,
        "layers": [str],
        "n_samples": int,
        "head": str,
        "full": {"accuracy": NUM},
        "compute": {"flops_full_model": _NUM_OR_NONE, **(_TIMED_COMPUTE if timed else {})},
        "truncation": [
            {**_DEPTH_ROW, **(_TIMED_ROW if timed else {}), **({"refit_accuracy": _NUM_OR_NONE} if refit else {})}
        ],
        "early_exit": Optional(_EARLY_EXIT),
        "oracle": {
            "source": str,
            "mean_depth": NUM,
            "flops_fraction": NUM,
            "time_fraction": _NUM_OR_NONE,
            "histogram": [int],
            "by_class": Each([int]),
        },  # fmt: skip
        "notes": Optional([str]),
    }


def read_depth(
    model_path: str | Path, layers: Sequence[str], given: str | Path | None
) -> tuple[dict | None, str | None]:
    """The ``laya depth --json`` result to show: the file given (bad, foreign or malformed: one-line error), else
    MODEL.depth.json beside the checkpoint when present (used: a note names it; bad, foreign or malformed: a note
    says why it was skipped, and no section)."""
    path = Path(given).expanduser() if given is not None else depth_beside(model_path)
    if given is None and not path.is_file():
        return None, None
    try:
        if not path.is_file():
            raise LayaError(f"--depth {path}: no such file")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LayaError(f"--depth {path} is not a laya depth result ({type(e).__name__})") from None
        if not isinstance(doc, dict) or doc.get("format") != "laya-depth":
            raise LayaError(
                f"--depth {path} is not a laya depth result (no 'laya-depth' format marker); "
                f"write one with laya depth MODEL --json FILE"
            )
        if (error := shape_error(doc, depth_shape(doc))) is not None:
            raise LayaError(f"--depth {path} is not a laya depth result ({error}); write one with laya depth MODEL "
                            "--json FILE")  # fmt: skip
        if list(doc["layers"]) != list(layers):
            raise LayaError(
                f"--depth {path} was computed for other layers ({', '.join(doc['layers'][:4])}…) than this checkpoint's"
            )
    except LayaError as e:
        if given is not None:
            raise
        return None, f"{path.name} beside the checkpoint was not shown: {e}"
    used = None if given is not None else f"shown {path.name}, found beside the checkpoint (--depth FILE picks another)"
    return doc, used
