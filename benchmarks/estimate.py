"""The network-scope audit's estimate against the time that follows it, side by side in one run.

    python -m benchmarks.estimate [--work DIR] [--cases digits,digits-b32,cnn,bert] [--clock wall|cpu]
                                  [--threads N]

Each case trains a small model once (kept in ``--work``: a second run reuses it) and runs ``laya audit CKPT --scope
network`` (its defaults: ``--compare gradxact,atp``, the checkpoint's own test split) in this process, with
``auditing.estimate.eta_line`` wrapped: every estimate the audit makes goes through it (the line is printed only
above three minutes; here the threshold is 0, so every audit makes the estimate its line would say). Per case it prints
each estimate, the seconds measured from the moment it was made to the end of the audit
(``auditing.job.run_scoped_audit`` returning), their ratio, and where the estimate has parts (issue 71 on) the
backbone's passes alone (all the estimate was before) and their ratio to the measured time.

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


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def measure(ckpt: Path, extra: tuple, clock=time.perf_counter) -> list[tuple]:
    """(estimated seconds, seconds measured from then to the audit's end, the backbone's passes alone where the
    estimate has more parts, the seconds the estimate took) for each estimate the audit made; every time read on
    ``clock`` (the estimate's own timings too: ``time.perf_counter`` there is ``clock``)."""
    import types

    from laya_cli.auditing import estimate, job

    made: list[tuple[float, float, float | None]] = []
    eta_line, run_scoped, say_above = estimate.eta_line, job.run_scoped_audit, estimate.SAY_ABOVE_S
    costs, probes = [], []  # probes: the seconds the estimate itself took (its forwards and per-batch probes)
    audit_cost = getattr(estimate, "audit_cost", None)  # what the estimate is made of, where it says (issue 71)

    def wrapped_eta(seconds, *args, **kwargs):
        made.append((seconds, clock(), costs.pop().passes_seconds if costs else None))
        return eta_line(seconds, *args, **kwargs)

    def wrapped_cost(*args, **kwargs):
        started = clock()
        costs.append(audit_cost(*args, clock=clock, **kwargs))
        probes.append(clock() - started)
        return costs[-1]

    ended: list[float] = []

    def wrapped_run(*args, **kwargs):
        result = run_scoped(*args, **kwargs)
        ended.append(clock())
        return result

    # every audit makes the estimate its line would say (below the threshold the probe is not timed warm: the line
    # is not said, so its first run's bound stands in)
    estimate.eta_line, job.run_scoped_audit, estimate.SAY_ABOVE_S = wrapped_eta, wrapped_run, 0.0
    estimate.time = types.SimpleNamespace(perf_counter=clock)  # the estimate's timings before issue 71 read it
    if audit_cost is not None:
        estimate.audit_cost = wrapped_cost
    try:
        _laya("audit", ckpt, "--scope", "network", *extra)
    finally:
        estimate.eta_line, job.run_scoped_audit, estimate.SAY_ABOVE_S = eta_line, run_scoped, say_above
        estimate.time = time
        if audit_cost is not None:
            estimate.audit_cost = audit_cost
    return [(seconds, ended[-1] - at, passes, probes[0] if probes else None) for seconds, at, passes in made]


def main(argv=None) -> dict:
    import laya_cli

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="benchmark-estimate", help="where the checkpoints are kept")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall: seconds as a user waits them; cpu: this process's CPU seconds, which other jobs on a shared "
        "machine do not move (the estimate made and measured on the same clock)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    args = parser.parse_args(argv)
    if args.threads:  # one thread: no idle worker spinning into the CPU clock, a shared machine's load aside
        import torch

        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    import torch

    print(f"laya_cli from {Path(laya_cli.__file__).parent}; {args.clock} clock, {torch.get_num_threads()} threads")
    print(f"{'case':<12} {'estimate':>10} {'measured':>10} {'ratio':>7}   {'passes alone':>12} {'ratio':>7} "
          f"{'probes':>8}")  # fmt: skip
    out = {}
    for name in args.cases.split(","):
        ckpt_name, extra = CASES[name]
        rows = measure(_checkpoint(work, ckpt_name), extra, CLOCKS[args.clock])
        out[name] = rows
        for seconds, measured, passes, probe in rows:
            alone = f"{passes:>11.3f}s {passes / measured:>7.3f} {probe:>7.2f}s" if passes is not None else ""
            print(f"{name:<12} {seconds:>9.2f}s {measured:>9.2f}s {seconds / measured:>7.2f}   {alone}", flush=True)
    return out


if __name__ == "__main__":
    main()
