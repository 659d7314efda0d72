"""A model card in the Hugging Face layout (``README.md``: YAML front matter with a ``model-index``, then
Markdown) that carries a model's layer-attribution audit: ``laya export --model-card`` writes one for a
checkpoint, ``AuditResult.to_model_card()`` gives one from the Python API.

Pure text from plain dicts (a ``laya audit --json`` document, a checkpoint's summary), no torch, no YAML
library: the front matter is written in the small subset of YAML whose scalars are JSON strings and numbers,
which any YAML reader (``huggingface_hub.ModelCard`` included) reads back. The hub's ``model-index`` needs, per
result, ``task.type``, ``dataset.type``/``name`` and per metric ``type``/``value``; laya's audit metrics are
named ``faithfulness``, ``deletion@1``… with the method in the metric's ``args``.
"""

from __future__ import annotations

import json
import math

from ..report.inert import md_text

# The audit metrics a card reports, per method: (key in the audit JSON, the metric's type, its display name).
CARD_METRICS = (
    ("faithfulness", "faithfulness", "Faithfulness (Spearman ρ vs leave-one-layer-out)"),
    ("deletion@1", "deletion@1", "Deletion@1"),
    ("deletion@1_normalised", "deletion@1_normalised", "Deletion@1, normalised"),
)


def _num(value) -> float | None:
    """A finite number rounded for a card, or None (undefined: left out)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), 4)


def card_metrics(audit: dict | None, accuracy: float | None = None, accuracy_name: str = "Test accuracy") -> list:
    """The ``model-index`` metrics: the accuracy, then each audit metric of each method (the floor ``random``
    included: it is what every method must beat)."""
    out = []
    if _num(accuracy) is not None:
        out.append({"type": "accuracy", "value": _num(accuracy), "name": accuracy_name})
    for method, scores in ((audit or {}).get("methods") or {}).items():
        for key, kind, name in CARD_METRICS:
            if (value := _num(scores.get(key))) is not None:
                args = {"method": method, "samples": audit.get("n_samples")}
                out.append({"type": kind, "value": value, "name": f"{name} — {method}", "args": args})
    return out


def _yaml(value, indent: int = 0) -> list[str]:
    """Block YAML of dicts and lists whose leaves are JSON scalars (strings quoted as JSON, which YAML reads)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines += [f"{pad}{k}:", *_yaml(v, indent + 2)]
            else:
                lines.append(f"{pad}{k}: {json.dumps(v, ensure_ascii=False)}")
        return lines
    lines = []
    for item in value:
        sub = _yaml(item, indent + 2) if isinstance(item, (dict, list)) else [f"{pad}  {json.dumps(item)}"]
        lines.append(f"{pad}- {sub[0].lstrip()}")
        lines += sub[1:]
    return lines


def front_matter(meta: dict, metrics: list) -> str:
    """``---`` YAML ``---``: library, tags, dataset, and a model-index whose one result holds ``metrics``."""
    dataset = meta.get("dataset") or "unknown"
    task = meta.get("task", "image-classification")
    doc = {
        "library_name": "laya",
        "tags": ["laya", "layer-attribution", "interpretability", task],
        "datasets": [dataset],
        "metrics": sorted({m["type"] for m in metrics}),
        "model-index": [
            {
                "name": meta.get("name") or "laya-model",
                "results": [
                    {
                        "task": {"type": task, "name": task.replace("-", " ").capitalize()},
                        "dataset": {"type": dataset, "name": dataset, "split": meta.get("split", "test")},
                        "metrics": metrics,
                    }
                ],
            }
        ],
    }
    return "---\n" + "\n".join(_yaml(doc)) + "\n---\n"


def _cell(value) -> str:
    return "—" if _num(value) is None else f"{_num(value):.4f}"


def audit_section(audit: dict) -> str:
    """The card's audit: one row per method, how the numbers were taken, and the audit's notes."""
    s = audit.get("settings") or {}
    rows = [
        "| method | faithfulness ρ | samples defined | Deletion@1 | oracle | random | normalised |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, m in (audit.get("methods") or {}).items():
        rows.append(
            f"| {md_text(method)} | {_cell(m.get('faithfulness'))} | {md_text(m.get('defined', '—'))} | "
            f"{_cell(m.get('deletion@1'))} | "
            f"{_cell(m.get('deletion@1_oracle'))} | {_cell(m.get('deletion@1_random'))} | "
            f"{_cell(m.get('deletion@1_normalised'))} |"
        )
    how = (
        f"`laya audit` on {md_text(audit.get('n_samples'))} samples of {md_text(s.get('dataset', 'the test split'))} "
        f"(accuracy {_cell(audit.get('accuracy'))}); a layer is removed by the {md_text(s.get('ablation', 'mean'))} "
        f"ablation at the head's inputs, and each method's ranking of the {md_text(s.get('layers', 'L'))} layers is "
        f"compared with the drop in p({md_text(s.get('target', 'predicted'))} class) that removing each layer causes."
    )
    notes = [f"- {md_text(n)}" for n in audit.get("notes") or []]
    question, verdict = (audit.get("question") or {}).get("sentence"), audit.get("verdict_text")
    lines = (question and f"question: {question}.", verdict and f"verdict: {verdict}", *(audit.get("flags") or []))
    said = [f"> {md_text(line)}\n>" for line in lines if line]
    return "\n".join(["## Layer-attribution audit", "", *said, "", how, "", *rows, "", *notes]).rstrip() + "\n"


def model_card(meta: dict, audit: dict | None = None, sections: list[str] | tuple = ()) -> str:
    """The whole card: front matter, a title and summary from ``meta`` (name, dataset, task, accuracy, summary),
    the audit section when there is an audit, then ``sections`` (Markdown, in order)."""
    metrics = card_metrics(audit, meta.get("accuracy"), meta.get("accuracy_name", "Test accuracy"))
    parts = [front_matter(meta, metrics), f"# {md_text(meta.get('name') or 'laya model')}\n"]
    if meta.get("summary"):
        parts.append(meta["summary"].rstrip() + "\n")
    if audit:
        parts.append(audit_section(audit))
    else:
        parts.append(
            "No layer-attribution audit attached: run `laya audit MODEL --json audit.json` and "
            "`laya export MODEL --model-card --audit audit.json`.\n"
        )
    parts += [s.rstrip() + "\n" for s in sections]
    return "\n".join(parts)
