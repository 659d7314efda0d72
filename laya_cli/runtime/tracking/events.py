"""What each command logs to a tracker, from the plain results it already has (a checkpoint's records, the
JSON documents of ``laya audit``, ``laya depth``, ``laya diff`` and ``laya bench``). Metric names are ``metric_key``'s:
``<metric>/<method>`` for the audit (``faithfulness/ig``), so a tracker's chart of one metric shows the
methods side by side, and the method is also each key's last part."""

from __future__ import annotations

from pathlib import Path

from .base import Tracker, metric_key

# The per-method audit numbers logged (keys of a method in the audit JSON).
AUDIT_METRICS = (
    "faithfulness",
    "faithfulness_std",
    "deletion@1",
    "deletion@1_normalised",
    "deletion@1_oracle",
    "deletion@1_random",
    "aopc",
    "sufficiency@1",
    "sufficiency@1_normalised",
    "completeness",
    "randomisation",
    "defined",
    "undefined",
)
# An epoch's figures (a classifier's EpochRecord has the accuracies, a language model's LMEpoch the bits)
EPOCH_FIELDS = ("loss", "train_accuracy", "val_accuracy", "val_kl_bits", "val_ce_bits", "seconds")
TRAIN_METRICS = ("test_accuracy", "test_macro_f1", "val_accuracy", "best_epoch", "epochs_run")


def log_files(tracker: Tracker, files) -> None:
    """Each file that was written, as an artifact."""
    for f in files:
        if f is not None and Path(f).is_file():
            tracker.artifact(f)


def log_epoch(tracker: Tracker, record) -> None:
    """One epoch of training (an ``EpochRecord`` or a language model's ``LMEpoch``), at its epoch."""
    figures = {metric_key("train", k): getattr(record, k) for k in EPOCH_FIELDS if hasattr(record, k)}
    tracker.metrics(figures, step=record.epoch)


def log_train(tracker: Tracker, ckpt: dict, out) -> None:
    """A finished training: its test metrics, what it trained, and the checkpoint itself."""
    m = ckpt.get("metrics") or {}
    held_out = {
        metric_key("held_out", f"{head}_{k}"): v for head, f in (m.get("heads") or {}).items() for k, v in f.items()
    }
    tracker.metrics({**{metric_key(k): m.get(k) for k in TRAIN_METRICS}, **held_out})  # held_out: a language model's
    tracker.tags({"laya.head": ckpt["head"]["kind"], "laya.layers": ",".join(ckpt.get("layers", []))})
    log_files(tracker, [out])


def audit_metrics(doc: dict) -> dict:
    """Every audit number by ``<metric>/<method>`` (``network/<metric>/<method>`` for the network scope)."""
    out = {"accuracy": doc.get("accuracy"), "n_samples": doc.get("n_samples")}
    scopes = [("", doc.get("methods") or {}), ("network", (doc.get("network") or {}).get("methods") or {})]
    for scope, methods in scopes:
        for method, scores in methods.items():
            for k in AUDIT_METRICS:
                if k in scores:
                    out[metric_key(scope, k, method)] = scores[k]
    return out


def log_audit(tracker: Tracker, doc: dict, passed: bool, verdict: str, files) -> None:
    """An audit: every metric of every method, the methods and the gate's verdict as tags (and as a 0/1 metric),
    the JSON, Markdown and JUnit files as artifacts."""
    methods = list(doc.get("methods") or {}) or list((doc.get("network") or {}).get("methods") or {})
    tracker.metrics({**audit_metrics(doc), "gate/passed": passed})
    tracker.tags(
        {"laya.methods": ",".join(methods), "laya.gate": "PASS" if passed else "FAIL", "laya.verdict": verdict}
    )
    log_files(tracker, files)


def log_depth(tracker: Tracker, doc: dict, files) -> None:
    """A depth analysis: accuracy and compute of the model cut after each tap k (as steps k), the full model's."""
    for row in doc.get("truncation") or []:
        keys = ("accuracy", "macro_f1", "flops_fraction", "time_fraction", "refit_accuracy")
        tracker.metrics({metric_key("depth", k): row.get(k) for k in keys}, step=row.get("k"))
    tracker.metrics({metric_key("full", k): v for k, v in (doc.get("full") or {}).items()})
    log_files(tracker, files)


def log_bench(tracker: Tracker, doc: dict, files) -> None:
    """A head comparison: per head the mean over seeds of its accuracy and of each method's audit metrics."""
    for head, entry in (doc.get("heads") or {}).items():
        values = {metric_key(k, head): (entry.get(k) or {}).get("mean") for k in ("test_accuracy", "test_macro_f1")}
        for method, scores in (entry.get("methods") or {}).items():
            for k in ("faithfulness", "deletion@1", "deletion@1_normalised"):
                values[metric_key(k, head, method)] = (scores.get(k) or {}).get("mean")
        tracker.metrics(values)
    tracker.tags({"laya.heads": ",".join(doc.get("heads") or {})})
    log_files(tracker, files)


def log_diff(tracker: Tracker, doc: dict, files) -> None:
    """A comparison of two models: the accuracies and their change, the overall divergence of the layer profiles
    and its p-value, how many classes changed (and per class its divergence); the changed classes as a tag."""
    acc, overall, classes = doc.get("accuracy") or {}, doc.get("overall") or {}, doc.get("classes") or {}
    values = {metric_key("diff", "accuracy", k): acc.get(k) for k in ("a", "b", "change", "p_value")}
    values.update({metric_key("diff", k): overall.get(k) for k in ("js", "p_value")})
    values[metric_key("diff", "changed_classes")] = len(doc.get("changed_classes") or [])
    values.update({metric_key("diff", "js", name): c.get("js") for name, c in classes.items()})
    tracker.metrics(values)
    tracker.tags({"laya.changed_classes": ",".join(doc.get("changed_classes") or []) or "none"})
    log_files(tracker, files)


def log_export(tracker: Tracker, exp) -> None:
    """An export: its accuracy and size, and its report, summary and model card as artifacts."""
    tracker.metrics({"export/accuracy": exp.accuracy, "export/n_samples": exp.n})
    if exp.out is not None:
        log_files(tracker, [Path(exp.out) / f for f in ("report.html", "summary.json", "README.md")])
