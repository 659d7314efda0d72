"""What the bootstrap intervals (``--ci``, ``--bootstrap``) add to an audit's time, on 10,000 samples.

    python -m benchmarks.bootstrap_cost [--model MODEL.pt] [--dataset fashion-mnist] [--samples 10000]
                                        [--compare ig,gradxact] [--bootstrap 1000] [--repeats 3]

Setup (not measured): the paper MLP + LAYA head trained for one epoch on the dataset (or ``--model``), and the
features of ``--samples`` test samples extracted up front (what a feature-cached audit reads). Then, in this
process: the audit without intervals (``--ci 0``), the same audit with them (``--ci 0.95``), and the bootstrap
alone (``stats.audit_columns.method_intervals`` on that audit's per-sample columns: every method and metric,
paired, ``--bootstrap`` resamples). Each timed ``--repeats`` times, the fastest kept. The ratio that matters is
bootstrap / audit (the target: ≤ 10 %); audit-with / audit-without says the same with the audit's own noise.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console


def _fastest(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def measure(model: str, samples: int, compare: str, n_boot: int, repeats: int, data_dir: str | None) -> dict:
    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model
    from laya_cli.runtime import progress
    from laya_cli.stats.audit_columns import method_intervals

    with progress.enabled(False):
        m = load_model(model)
        data = load_eval_data(m, data_dir=data_dir, samples=samples, stream=False)
        methods = parse_methods(compare)
        off, result = _fastest(lambda: run_audit(m, data, methods, AuditSettings(ci=0.0)), repeats)
        on, _ = _fastest(lambda: run_audit(m, data, methods, AuditSettings(ci=0.95, bootstrap=n_boot)), repeats)
        boot, _ = _fastest(lambda: method_intervals(result.columns, 0.95, n_boot, 0), repeats)
    return {
        "samples": result.n_samples,
        "methods": list(result.columns),
        "bootstrap": n_boot,
        "audit_s": off,
        "audit_ci_s": on,
        "bootstrap_s": boot,
        "ratio": boot / off,
        "ratio_end_to_end": on / off,
    }


def run(dataset="fashion-mnist", samples=10000, compare="ig,gradxact", n_boot=1000, model=None, data_dir=None,
        repeats=3, epochs=1) -> dict:  # fmt: skip
    from .audit_memory import _train

    with tempfile.TemporaryDirectory() as tmp:
        if model is None:
            model = str(Path(tmp) / "model.pt")
            _train(dataset, data_dir, Path(model), epochs)
        return {"dataset": dataset, "compare": compare, **measure(model, samples, compare, n_boot, repeats, data_dir)}


def report(r: dict) -> str:
    return "\n".join(
        [
            f"bootstrap intervals on a {r['samples']:,}-sample audit ({r['dataset']}, methods "
            f"{','.join(r['methods'])}, {r['bootstrap']} resamples; fastest of the repeats)",
            f"  audit, --ci 0         {r['audit_s']:8.2f} s",
            f"  audit, --ci 0.95      {r['audit_ci_s']:8.2f} s   ({r['ratio_end_to_end']:.3f} x)",
            f"  the bootstrap alone   {r['bootstrap_s']:8.3f} s   ({100 * r['ratio']:.1f} % of the audit; target 10 %)",
        ]
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--compare", default="ig,gradxact")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--model", default=None, help="audit this checkpoint instead of training one")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args(argv)
    r = run(a.dataset, a.samples, a.compare, a.bootstrap, a.model, a.data_dir, a.repeats, a.epochs)
    Console(width=120).print(report(r), highlight=False)
    return r


if __name__ == "__main__":
    main()
