"""``laya export --model-card``: the export folder's ``README.md``, a Hugging Face model card of the checkpoint
(what it is, its test accuracy, the attached audit, the class × layer profile picture, how it was produced). The
card's layout and front matter are ``auditing.card``'s; this module gathers what a checkpoint and an export know."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..auditing.card import model_card
from ..report.inert import md_text, visible_controls

CARD_FILE = "README.md"
PROFILE_PLOT = "class_layer_all.png"  # report.figures.PLOT_FILES["heatmap_all"]


def card_meta(model, checkpoint_path: str | Path) -> dict:
    """What the card says about the model, from its checkpoint record (``model.checkpoint``)."""
    ckpt = model.checkpoint
    dataset = (ckpt.get("dataset") or {}).get("name") or "unknown"
    text = ((ckpt.get("backbone") or {}).get("input") or {}).get("kind") == "tokens"
    finetuned = "fine-tuned" if model.spec.finetune else "frozen"
    layers = ", ".join(md_text(name) for name in model.layer_names)
    stem = Path(checkpoint_path).stem
    return {
        "name": f"{stem} ({model.spec.name}, {model.head_kind} head, {dataset})",
        "dataset": dataset,
        "task": "text-classification" if text else "image-classification",
        "accuracy": (ckpt.get("metrics") or {}).get("test_accuracy"),
        "summary": (
            f"A **{model.head_kind}** head on the **{md_text(model.spec.name)}** backbone ({finetuned}), trained "
            f"with [laya](https://pypi.org/project/laya-audit/) on **{md_text(dataset)}** ({len(model.classes)} "
            "classes). "
            f"The head reads {model.num_layers} layers ({layers}); "
            + (
                "a LAYA head weighs them per input with attention α, so every prediction carries its own "
                "per-layer attribution."
                if model.head_kind == "laya"
                else "its layer attributions come from the methods of the audit below."
            )
        ),
    }


def profile_section(pngs: dict[str, str], exp) -> str | None:
    """The class × layer picture (drawn by the export), or a sentence saying why there is none."""
    if "heatmap_all" in pngs:
        return (
            "## Which layers each class relies on\n\n"
            f"![Mean attention α per true class (rows) and layer (columns)](plots/{pngs['heatmap_all']})\n\n"
            f"Mean α per class and layer over {exp.n:,} exported samples (accuracy {exp.accuracy:.4f}); "
            "`profiles.csv` holds the numbers, `report.html` the rest of the export."
        )
    if exp.has_alpha:
        return "## Which layers each class relies on\n\nRun `laya export` with plots (`--plots`) to draw the picture."
    return None


def produced_section(model, checkpoint_path: str | Path, audit: dict | None) -> str:
    """How the model, its audit and this card were made: the commands, and the options the checkpoint and the
    audit JSON recorded as one ``--config`` file (a ``[train]`` and an ``[audit]`` table)."""
    from .. import __version__
    from ..runtime.tomlfile import toml_table

    ckpt = model.checkpoint
    name = shlex.quote(visible_controls(Path(checkpoint_path).name))  # a command in a code block: shell-quoted
    versions = ckpt.get("versions") or {}
    trained, audited = ckpt.get("options"), (audit or {}).get("options")
    lines = ["## How this card was produced", "", "```bash"]
    lines.append(
        f"laya train --config run.toml --out {name}"
        if trained
        else "# the checkpoint records no laya train options (trained through the Python API)"
    )
    if audit:
        lines.append(
            "laya audit --config run.toml   # the audit above" if audited else f"laya audit {name} --json audit.json"
        )
    lines += [f"laya export {name} --model-card" + (" --audit audit.json" if audit else ""), "```", ""]
    lines.append(
        f"Trained with laya {md_text(versions.get('laya', '?'))} (torch {md_text(versions.get('torch', '?'))}, timm "
        f"{md_text(versions.get('timm', '?'))}); this card written by laya {__version__}."
    )
    tables = [
        toml_table(rec["command"], rec.get("values") or {}, ("out",), "(where the recorded run wrote)")
        for rec in (trained, audited)
        if rec
    ]
    if tables:
        lines += ["", "`run.toml`, the options the checkpoint and the audit recorded:", "", "```toml"]
        lines += ["\n".join(tables).rstrip(), "```"]
    return "\n".join(lines)


def question_section(model) -> str:
    """The question the model's α was trained on, in one sentence, and the flags its own metrics earn (a model at
    chance, an α within noise of uniform: auditing/flags.py)."""
    from ..auditing.flags import checkpoint_findings

    found = checkpoint_findings(model.checkpoint)
    lines = ["## The question α answers", "", f"{found['question']['sentence']}."]
    return "\n".join(lines + [f"\n**{flag}**" for flag in found["flags"]])


def write_card(exp, root: Path, pngs: dict[str, str]) -> str:
    """``README.md`` into the export folder being written (``exp.card``: model and checkpoint path)."""
    model, path = exp.card["model"], exp.card["checkpoint"]
    audit = exp.results.get("audit")
    sections = [
        s for s in (question_section(model), profile_section(pngs, exp), produced_section(model, path, audit)) if s
    ]
    (root / CARD_FILE).write_text(model_card(card_meta(model, path), audit, sections), encoding="utf-8")
    return CARD_FILE
