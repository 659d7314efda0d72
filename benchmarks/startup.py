"""How fast the ``laya`` command starts, measured side by side with ``python -c "import torch"``.

    python -m benchmarks.startup [--rounds 5] [--json FILE]
    python -m benchmarks.startup     (from a source checkout: the same, through a thin shim)

Every command below runs as a fresh process (``sys.executable``, so the same interpreter and
installation as this one), ``--rounds`` times, round-robin (one of each per round, so a change
in machine load hits every command alike), after one unmeasured warm-up round that fills the
file cache. The figure per command is its median wall time from start to exit; the median CPU
time (user + system, of the process and its children) is reported beside it, since on a shared,
loaded machine wall times stretch with the load while CPU times mostly do not.

  python       ``python -c pass``: the interpreter alone (the floor of every row)
  torch        ``python -c "import torch"``: the yardstick
  help         ``laya --help`` and ``laya <cmd> --help`` for every command
  info         ``laya info model.pt`` on a small digits checkpoint trained beforehand

Targets (docs/benchmarks.md): every ``--help`` at most 0.15× torch's import time; ``laya info``
at most torch's import time + 1 s (it needs torch to read the checkpoint, nothing more).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELP_TARGET = 0.15  # --help / import torch
INFO_TARGET_S = 1.0  # laya info - import torch
COMMANDS = ("train", "audit", "export", "info", "bench")


def commands(checkpoint: Path | None, quick: bool = False) -> dict[str, list[str]]:
    py, laya = [sys.executable], [sys.executable, "-m", "laya_cli"]
    out = {} if quick else {"python": [*py, "-c", "pass"]}
    out |= {"torch": [*py, "-c", "import torch"], "laya --help": [*laya, "--help"]}
    for cmd in COMMANDS[:1] if quick else COMMANDS:
        out[f"laya {cmd} --help"] = [*laya, cmd, "--help"]
    if checkpoint is not None:
        out["laya info model.pt"] = [*laya, "info", str(checkpoint)]
    return out


def _cpu_children() -> float:
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: no CPU figures
        return float("nan")
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv`` as a fresh process."""
    cpu, start = _cpu_children(), time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds, cpu = time.perf_counter() - start, _cpu_children() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return seconds, cpu


def measure(cmds: dict[str, list[str]], rounds: int, warmup: bool = True) -> dict[str, list[tuple[float, float]]]:
    if warmup:
        for argv in cmds.values():
            _time(argv)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, argv in cmds.items():
            times[name].append(_time(argv))
    return times


def summarise(times: dict[str, list[tuple[float, float]]]) -> dict:
    """Medians, and each row's ratio to torch's import (helps) or its excess over it (info)."""
    med = {name: statistics.median(w for w, _ in ts) for name, ts in times.items()}
    cpu = {name: statistics.median(c for _, c in ts) for name, ts in times.items()}
    torch_s, torch_cpu = med["torch"], cpu["torch"]
    rows = []
    for name, s in med.items():
        row = {
            "command": name,
            "median_s": s,
            "times_s": [w for w, _ in times[name]],
            "over_torch": s / torch_s,
            "cpu_s": cpu[name],
            "cpu_over_torch": cpu[name] / torch_cpu if torch_cpu > 0 else float("nan"),
        }
        if name.endswith("--help"):
            row["target"] = f"≤ {HELP_TARGET}× torch"
            row["met"] = s <= HELP_TARGET * torch_s
        elif name.startswith("laya info"):
            row["minus_torch_s"] = s - torch_s
            row["target"] = f"≤ torch + {INFO_TARGET_S:g} s"
            row["met"] = s <= torch_s + INFO_TARGET_S
        rows.append(row)
    return {
        "torch_s": torch_s,
        "torch_cpu_s": torch_cpu,
        "rows": rows,
        "rounds": len(times["torch"]),
        "all_met": all(r.get("met", True) for r in rows),
    }


def run(rounds: int = 5, quick: bool = False) -> dict:
    """Train a small digits checkpoint (for ``laya info``), then time every command."""
    from .synthetic import train_digits

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = train_digits(Path(tmp) / "model.pt", epochs=1)
        times = measure(commands(ckpt, quick), rounds, warmup=not quick)
    return summarise(times)


def table(result: dict) -> str:
    lines = [f"{'command':<22} {'wall':>8} {'× torch':>8} {'CPU':>8} {'× torch':>8}  target (on wall time)", "-" * 86]
    for r in result["rows"]:
        extra = f"  (torch + {r['minus_torch_s']:.2f} s)" if "minus_torch_s" in r else ""
        mark = "" if "met" not in r else ("  met" if r["met"] else "  MISSED")
        lines.append(
            f"{r['command']:<22} {r['median_s']:>7.3f}s {r['over_torch']:>7.3f}× {r['cpu_s']:>7.3f}s "
            f"{r['cpu_over_torch']:>7.3f}×  {r.get('target', '')}{mark}{extra}"
        )
    lines.append(f"medians of {result['rounds']} round(s), each command a fresh process, round-robin")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (median), after one warm-up round")
    parser.add_argument("--quick", action="store_true", help="1 round, no warm-up, fewer commands: a smoke run")
    parser.add_argument("--json", dest="json_out", default=None, help="write every number to this file")
    args = parser.parse_args(argv)
    result = run(1 if args.quick else max(1, args.rounds), quick=args.quick)
    from .say import say

    say(table(result))
    if args.json_out:
        from laya_cli.runtime.fileio import atomic_write_text

        atomic_write_text(args.json_out, json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
