"""The network-scope audit's estimate against the time that follows it, side by side in one run.

    python -m benchmarks.estimate [--work DIR] [--cases digits,digits-b32,cnn,bert]

Each case trains a small model once (kept in ``--work``: a second run reuses it) and runs ``laya audit CKPT --scope
network`` (its defaults: ``--compare gradxact,atp``, the checkpoint's own test split) in this process, with
``auditing.estimate.eta_line`` wrapped: every estimate the audit makes goes through it (the line is printed only
above three minutes, the estimate is made on every audit). Per case it prints each estimate, the seconds measured
from the moment it was made to the end of the audit (``auditing.job.run_scoped_audit`` returning), and their ratio.

  digits      the paper MLP on the bundled digits, ``laya train`` at its defaults (359 test images, batches of 256)
  digits-b32  the same audit in batches of 32 (12 batches: where a per-batch cost adds up)
  cnn         the built-in CNN on digits (``--backbone cnn``, 2 epochs: the cost does not depend on the weights)
  bert        a 3-layer BERT made from a config (``synthetic.tiny_bert``), 600 test texts

Run against another laya (the code before a change) with that checkout first on the path and this file as a script:
``PYTHONPATH=/path/to/other/laya python benchmarks/estimate.py``; the first line names the laya it ran.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from pathlib import Path


def _laya(*args) -> None:
    """``laya ARGS`` in this process (its output dropped), so the wrapped estimate sees the audit's calls."""
    from laya_cli.cli.group import app

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        app([str(a) for a in args], standalone_mode=False)


def _bert_data(work: Path) -> tuple[str, str]:
    import csv

    from benchmarks.synthetic import tiny_bert, topic_texts

    root = tiny_bert(work / "text")
    with open(root / "data" / "test.csv", "w", newline="", encoding="utf-8") as f:  # 600 texts: 3 batches of 256
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(topic_texts(600, 1))
    return f"hf:{root / 'bert'}", f"csv:{root / 'data'}"


def _checkpoint(work: Path, name: str) -> Path:
    """The case's checkpoint, trained once into ``work``."""
    ckpt = work / f"{name}.pt"
    if ckpt.exists():
        return ckpt
    train = {
        "digits": lambda: (),
        "cnn": lambda: ("--backbone", "cnn", "--epochs", 2),
        "bert": lambda: ("--backbone", (b := _bert_data(work))[0], "--dataset", b[1], "--epochs", 2),
    }[name]
    _laya("train", *train(), "--out", ckpt)
    return ckpt


CASES = {  # name: (checkpoint, extra audit options)
    "digits": ("digits", ()),
    "digits-b32": ("digits", ("--batch-size", 32)),
    "cnn": ("cnn", ()),
    "bert": ("bert", ()),
}


def measure(ckpt: Path, extra: tuple) -> list[tuple[float, float]]:
    """(estimated seconds, seconds measured from then to the audit's end) for each estimate the audit made."""
    from laya_cli.auditing import estimate, job

    made: list[tuple[float, float]] = []
    eta_line, run_scoped = estimate.eta_line, job.run_scoped_audit

    def wrapped_eta(seconds, *args, **kwargs):
        made.append((seconds, time.perf_counter()))
        return eta_line(seconds, *args, **kwargs)

    ended: list[float] = []

    def wrapped_run(*args, **kwargs):
        result = run_scoped(*args, **kwargs)
        ended.append(time.perf_counter())
        return result

    estimate.eta_line, job.run_scoped_audit = wrapped_eta, wrapped_run
    try:
        _laya("audit", ckpt, "--scope", "network", *extra)
    finally:
        estimate.eta_line, job.run_scoped_audit = eta_line, run_scoped
    return [(seconds, ended[-1] - at) for seconds, at in made]


def main(argv=None) -> dict:
    import laya_cli

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="benchmark-estimate", help="where the checkpoints are kept")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"laya_cli from {Path(laya_cli.__file__).parent}")
    print(f"{'case':<12} {'estimate':>10} {'measured':>10} {'ratio':>7}")
    out = {}
    for name in args.cases.split(","):
        ckpt_name, extra = CASES[name]
        rows = measure(_checkpoint(work, ckpt_name), extra)
        out[name] = rows
        for seconds, measured in rows:
            print(f"{name:<12} {seconds:>9.2f}s {measured:>9.2f}s {seconds / measured:>7.2f}")
    return out


if __name__ == "__main__":
    main()
