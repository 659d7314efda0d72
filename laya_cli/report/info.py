"""``laya info``: what a checkpoint holds, as one panel for the terminal."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .collapse import collapse_text
from .inert import rich_text


def _maybe(value, missing: str = "not measured (no test split: trained with laya_cli.fit)") -> str:
    return missing if value is None else f"{value:.4f}"


# What a checkpoint's train_config records beside the options: where the alignment term came from, and why a
# default one was dropped (training/job.py; shown as a row of its own)
NOT_OPTIONS = ("align_source", "align_dropped")


def training_text(
    train_config: dict | None, shown_elsewhere: tuple[str, ...] = (), used: dict | None = None
) -> str | None:
    """Every training option a checkpoint records, as the options read ('--epochs 2 · --lr 0.0003 · --tau-start
    none · --pretrained'); None when it records none. ``used``: the value the run resolved for an option left unset
    (recorded None), shown as it was used ('--block-size 64 (default)', never '--block-size none' beside blocks of
    64 tokens)."""
    if not train_config:
        return None
    parts = []
    for key, value in train_config.items():
        if key in shown_elsewhere or key in NOT_OPTIONS:
            continue
        option = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # a flag: as it was given
            parts.append(option if value else f"--no-{key.replace('_', '-')}")
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value)) or None
        if value is None and (used or {}).get(key) is not None:
            parts.append(f"{option} {used[key]} (default)")
            continue
        shown = "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{option} {shown}")
    return " · ".join(parts)


def _pool_text(b: dict) -> str:
    """', pool mean' — only for a backbone whose taps have tokens or positions to pool (not flat vectors)."""
    formats = b.get("formats") or []
    if formats and all(f == "NC" for f in formats):
        return ""
    declared = f", as {b['pool_declared_by']} declares" if b.get("pool_declared_by") else ""
    return f", pool {b['pool']}{declared}"


def info_panel(summary: dict, path):
    """``laya info``: what a checkpoint holds (``summary``: ``checkpoint.checkpoint_summary``)."""
    from rich.panel import Panel

    table = Table.grid(padding=(0, 2))
    b, h, m = summary["backbone"], summary["head"], summary["metrics"]
    rows = [
        (
            "backbone",
            f"{b['name']} ({'fine-tuned' if b['finetune'] else 'frozen'}{_pool_text(b)})",
        ),
        ("layers", f"{len(summary['layers'])}: " + ", ".join(summary["layers"])),
        ("head", f"{h['kind']}  " + "  ".join(f"{k}={v}" for k, v in h["config"].items())),
        (
            "classes",
            f"{len(summary['classes'])}: "
            + ", ".join(summary["classes"][:12])
            + (" …" if len(summary["classes"]) > 12 else ""),
        ),
        (
            "dataset",
            summary["dataset"]["name"]
            + (f" ({summary['dataset']['source']})" if summary["dataset"].get("source") else "")
            + (f"  encoding {enc}" if (enc := summary["dataset"].get("encoding")) else ""),
        ),
        *(
            [("unmatched", f"{len(u)} artist folder(s) match no row of artists.csv: " + ", ".join(u))]
            if (u := summary["dataset"].get("unmatched"))
            else []
        ),
        *(
            [("weights", f"{b['weights_source']} (SHA-256 {(b['weights_sha256'] or '')[:16]}…)")]
            if b.get("weights_source")
            else []
        ),
        *([("parameters", f"{b['parameters']:,} in the backbone")] if b.get("parameters") is not None else []),
        *(
            [("initialised", f"{len(w)} weight(s) the files lack, initialised at load (seeded): " + ", ".join(w[:6]))]
            if (w := b.get("initialised_weights"))
            else []
        ),
        *(
            [("text input", f"at most {t['max_length']} tokens per text, tokenizer: {t['source']}")]
            if (t := b.get("text"))
            else []
        ),
        *_reshaped_rows(summary),
        ("test accuracy", _maybe(m.get("test_accuracy"))),
        ("test macro-F1", _maybe(m.get("test_macro_f1"))),
        *_collapse_row(m.get("alpha_collapse"), summary["layers"]),
        ("epochs", f"{m['epochs_run']} (best {m['best_epoch']})"),
        *([("training", t)] if (t := training_text(summary.get("train_config"))) else []),
        *(
            [("note", f"trained without the network alignment term its kind gets by default: {why}")]
            if (why := (summary.get("train_config") or {}).get("align_dropped"))
            else []
        ),
        ("versions", "  ".join(f"{k} {v}" for k, v in summary["versions"].items())),
    ]
    for k, v in rows:  # a value is text from the checkpoint (class names, layers, paths), never markup
        table.add_row(f"[bold]{k}[/]", v if isinstance(v, Text) else rich_text(v))
    return Panel(table, title=f"laya checkpoint {rich_text(path)}", expand=False)


def _reshaped_rows(summary: dict) -> list[tuple[str, str]]:
    """What ``laya depth --truncate`` cut and ``--drop`` took out, when the checkpoint is such a model."""
    rows = []
    if t := summary.get("truncated"):
        rows.append(
            (
                "truncated",
                f"after {t['layer']} (tap {t['depth']} of {t['of']}, {t['head']} head; "
                f"{t['parameters']:,} of {t['parameters_full']:,} backbone parameters, "
                f"{100 * t['flops_fraction']:.1f} % of its FLOPs)",
            )
        )
    if d := summary.get("dropped"):
        from .drop import speed_text

        # what the timing rounds measured (3 or more: faster, slower, none or too noisy); under 3, nothing
        speed = speed_text(d) if d.get("timing_rounds") and d["timing_rounds"] >= 3 else ""
        rows.append(
            (
                "dropped",
                f"{', '.join(d['layers'])} ({len(d['layers'])} of {d['of']} layers, {d['order']} order; "
                f"{d['parameters']:,} of {d['parameters_full']:,} backbone parameters, "
                f"{100 * d['flops_fraction']:.1f} % of its FLOPs{speed}; full model's accuracy "
                f"{d['full_test_accuracy']:.4f})",
            )
        )
    return rows


def _collapse_row(collapse: dict | None, layers) -> list[tuple[str, Text]]:
    """How much of the depth α uses on the test split (docs/metrics.md, "α collapse"); none for a head without α or a
    checkpoint from before laya measured it."""
    text = collapse_text(collapse, layers, flag="[bold yellow]{}[/]", escape=rich_text)
    return [("α on test", Text.from_markup(f"{collapse['samples']:,} samples: {text}"))] if text else []
