"""``laya diff A.pt B.pt`` on two language models' checkpoints (``--task lm``, docs/lm.md): every held-out position
is a sample, as in ``laya audit``, so both checkpoints are audited per token on the **same** positions (the same
tokens of the same text, checked) and compared position by position: per method and scope the change B − A of the
mean faithfulness, Deletion@1 and normalised Deletion@1 with its paired bootstrap interval (``paired_change``:
both audits resampled on the same positions), the top-1 next-token accuracy with McNemar's exact test, per layer
the mean α and LOLO Δ under A and B, and the faithfulness change by position in the block.

Comparable: two checkpoints of the same architecture (the same taps), block size and held-out text whose
tokenizers give the same tokens. The model's weights may differ (a fine-tuned version of it: its SHA-256 is
recorded); a language model beside a classifier, other taps, another text or other positions are refused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from ...model.lm_heads import lm_from_checkpoint, same_frozen_model
from ...runtime.errors import LayaError
from ...runtime.fileio import json_safe
from ...stats.audit_columns import STATISTICS, masked, paired_change
from ...stats.bootstrap import column_mean
from ...stats.mcnemar import mcnemar
from ..lm import TOKENS_AUDITED, token_audit_job, token_data
from ..names import OWN, parse_methods
from ..settings import AuditSettings

METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")
SCOPES = ("head", "network", "both")


def diff_lm_checkpoints(ckpts: tuple[dict, dict], paths: tuple[str, str], settings, data, load) -> dict:
    """Two language models' checkpoints (read) compared token by token with ``DiffSettings`` ``settings`` on the
    positions ``data`` names (``TOKENS_AUDITED`` held-out ones by default): the JSON document."""
    if settings.ablation not in ("mean", "bypass"):
        raise LayaError(f"a language model's diff removes a layer by its mean (head) or bypasses it (network): "
                        f"--ablation {settings.ablation} applies to classifiers")  # fmt: skip
    audit = AuditSettings(tie_tol=settings.tie_tol, seed=settings.seed, device=settings.device, ci=settings.ci)
    return diff_language_models(
        ckpts, paths, parse_methods(settings.compare), audit.validate(), settings.scope, data.dataset,
        data.samples or TOKENS_AUDITED, settings.bootstrap, data.encoding, load.device_map,
    )  # fmt: skip


def check_comparable_lm(a: dict, b: dict, path_a: str, path_b: str, dataset: str | None) -> None:
    """The same taps, block size and (unless ``--dataset`` names one for both) held-out text, before any work."""
    if list(a["layers"]) != list(b["layers"]):
        raise LayaError(f"laya diff compares two versions of a model with the same taps, but {path_a} taps "
                        f"{len(a['layers'])} layers and {path_b} {len(b['layers'])} (or other ones)")  # fmt: skip
    da, db = a["dataset"], b["dataset"]
    if int(da["block_size"]) != int(db["block_size"]):
        raise LayaError(f"{path_a} reads blocks of {da['block_size']} tokens and {path_b} of {db['block_size']}: "
                        "their positions are not the same samples")  # fmt: skip
    if dataset is None and da["name"] != db["name"]:
        raise LayaError(f"{path_a} was trained on {da['name']} and {path_b} on {db['name']}: give both the same "
                        "held-out text with --dataset text:PATH")  # fmt: skip


def _same_positions(data_a, data_b, path_a: str, path_b: str) -> None:
    ta, tb = torch.cat(data_a.blocks), torch.cat(data_b.blocks)
    n = len(data_a.features)
    if ta.shape != tb.shape or len(data_b.features) != n or not torch.equal(ta, tb):
        raise LayaError(f"{path_a} and {path_b} read the held-out text into different tokens (another tokenizer or "
                        "text): their positions are not the same samples")  # fmt: skip


def _scope_samples(result, scope: str) -> dict:
    """One scope's per-position numbers of an audit: the columns per method, α, Δ, predictions and labels."""
    if scope == "head":
        s = result.samples
        alpha = s["scores"].get(OWN)  # the head's α
        return {"columns": result.columns or {}, "alpha": alpha, "delta": s["delta"],
                "predicted": s["predicted"], "label": s["label"]}  # fmt: skip
    return result.network.samples


def _mean_or_none(values: np.ndarray | None, i: int) -> float | None:
    return None if values is None else float(np.asarray(values, dtype=np.float64)[:, i].mean())


def layer_changes(sa: dict, sb: dict, layers: Sequence[str]) -> list[dict]:
    """Per layer: mean α (where the method ran) and mean LOLO Δ under A and B, and the change B − A."""
    out = []
    for i, name in enumerate(layers):
        row: dict = {"layer": name}
        for q in ("alpha", "delta"):
            ma = _mean_or_none(None if sa[q] is None else sa[q].double().numpy(), i)
            mb = _mean_or_none(None if sb[q] is None else sb[q].double().numpy(), i)
            row[f"{q}_a"], row[f"{q}_b"] = ma, mb
            row[f"{q}_change"] = None if ma is None or mb is None else mb - ma
        out.append(row)
    return out


def metric_value(columns: dict, metric: str) -> float:
    """One audit's ``metric`` from its per-position columns (the statistic of their means, as the audit has it)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(STATISTICS[metric][1]({k: column_mean(v) for k, v in masked(columns).items()}))


def method_changes(sa: dict, sb: dict, level: float, n_boot: int, seed: int) -> dict[str, dict]:
    """Per method both audits have at this scope: each metric under A, under B, and B − A with its paired
    interval over the positions."""
    out = {}
    for m in [m for m in sa["columns"] if m in sb["columns"]]:
        ca, cb = sa["columns"][m], sb["columns"][m]
        row = {}
        for metric in METRICS:
            change = paired_change(ca, cb, metric, level, n_boot, seed)
            if change is None:
                continue
            row[metric] = {
                "a": metric_value(ca, metric),
                "b": metric_value(cb, metric),
                "change": change.estimate,
                **change.to_dict(),
            }
        out[m] = row
    return out


def position_changes(by_a: dict, by_b: dict) -> dict:
    """Per method the change B − A of the mean faithfulness in each range of the position in the block."""
    out = {"positions": by_a["positions"], "n": by_a["n"], "methods": {}}
    for m in [m for m in by_a["methods"] if m in by_b["methods"]]:
        fa, fb = by_a["methods"][m]["faithfulness"], by_b["methods"][m]["faithfulness"]
        out["methods"][m] = [None if x is None or y is None else y - x for x, y in zip(fa, fb)]
    return out


def accuracy_change(sa: dict, sb: dict) -> dict:
    """Top-1 next-token accuracy under A and B on the same positions, with McNemar's exact test."""
    right_a = (sa["predicted"] == sa["label"]).numpy()
    right_b = (sb["predicted"] == sb["label"]).numpy()
    test = mcnemar(right_a, right_b)
    acc_a, acc_b = column_mean(right_a.astype(float)), column_mean(right_b.astype(float))
    return {"a": acc_a, "b": acc_b, "change": acc_b - acc_a, "a_only": test.a_only, "b_only": test.b_only,
            "p_value": test.p_value}  # fmt: skip


def compare_token_audits(ra, rb, layers: Sequence[str], level: float, n_boot: int, seed: int) -> dict:
    """Two per-token audits on the same positions (``token_audit_job`` results), compared scope by scope."""
    scopes = [s for s in ("head", "network") if s in ra.by_position and s in rb.by_position]
    out: dict = {"scopes": {}, "by_position": {}}
    for scope in scopes:
        sa, sb = _scope_samples(ra, scope), _scope_samples(rb, scope)
        out["scopes"][scope] = {
            "methods": method_changes(sa, sb, level, n_boot, seed),
            "layers": layer_changes(sa, sb, layers),
        }
        out["by_position"][scope] = position_changes(ra.by_position[scope], rb.by_position[scope])
    out["accuracy"] = accuracy_change(*[_scope_samples(r, scopes[0]) for r in (ra, rb)])
    return out


def diff_language_models(
    ckpts: tuple[dict, dict],
    paths: tuple[str, str],
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str = "head",
    dataset: str | None = None,
    samples: int = 2000,
    bootstrap: int = 1000,
    encoding: str | None = None,
    device_map: str | None = None,
) -> dict:
    """``laya diff`` of two ``--task lm`` checkpoints (read, their task chosen: ``exporting.tasks``): both audited per
    token on the same ``samples`` held-out positions at ``scope`` (head, network or both), compared; the JSON document.
    ``device_map``: transformers' placement of each model (``--device-map``), one loaded after the other."""
    if scope not in SCOPES:
        raise LayaError(f"--scope {scope}: laya diff of language models takes head, network or both")
    check_comparable_lm(*ckpts, *paths, dataset)
    audit = replace(settings, ci=0.0)  # the intervals are the paired ones of the change, computed here
    first = lm_from_checkpoint(ckpts[0], device_map)
    shared = first.lm if same_frozen_model(*ckpts) else None  # one model, two heads: loaded (and placed) once
    models = [first.to(settings.device), lm_from_checkpoint(ckpts[1], device_map, shared).to(settings.device)]
    data = [token_data(m, dataset, samples, 8, encoding) for m in models]
    _same_positions(*data, *paths)
    ra, rb = (token_audit_job(m, methods, audit, scope, dataset, samples, data=d) for m, d in zip(models, data))
    layers = list(ckpts[0]["layers"])
    doc = compare_token_audits(ra, rb, layers, settings.ci, bootstrap, settings.seed)
    shas = [c["backbone"].get("sha256") for c in ckpts]
    doc["settings"] = {
        "task": "lm", "model_a": str(paths[0]), "model_b": str(paths[1]), "scope": scope, "methods": list(methods),
        "dataset": data[0].dataset, "target": settings.target, "ci": settings.ci, "bootstrap": bootstrap,
        "seed": settings.seed, "tie_tol": settings.tie_tol, "device_map": device_map, "same_model": shas[0] == shas[1],
        "objective_a": ckpts[0]["dataset"].get("objective"), "objective_b": ckpts[1]["dataset"].get("objective"),
    }  # fmt: skip
    doc.update(layers=layers, n_samples=len(data[0].features))
    return json_safe(doc)
