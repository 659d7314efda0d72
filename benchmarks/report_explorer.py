"""How fast report.html's sample explorer becomes interactive, with 1,000 and with 10,000 samples.

    python -m benchmarks.report_explorer [--sizes 1000,10000] [--repeats 3] [--model model.pt]
    python -m benchmarks.report_explorer     (in a source checkout: the same, through a thin shim)

Writes exports of 1,000 and 10,000 samples (``--sizes``), opens each report.html in headless Chromium
(the system browser, driven by Playwright: ``benchmarks.browser``), and measures, side by side in one
run, per size (median of ``--repeats`` fresh page loads):

  ready     ms from navigation start until the explorer is interactive: its data parsed, the first
            rows drawn and every control listening (the page sets ``window.layaExplorer.readyAt``)
  load      ms until the load event (every embedded image decoded)
  filter    ms from choosing one class to the next painted frame
  sort      ms from clicking the p column to the next painted frame
  scroll    ms from jumping to the middle of the table to the next painted frame

and the ratios of the largest size to the smallest. By default the exports are made up (12 layers,
10 classes, 28×28 noise images: incompressible thumbnails, so the page is as heavy as it gets for
that size); ``--model model.pt`` exports a real checkpoint's test split instead (subsets of
``--sizes`` samples; e.g. Fashion-MNIST's test split holds 10,000). Needs Playwright and Chromium
(``benchmarks.browser.unavailable_reason`` says what is missing). A benchmark, not a test: the
numbers depend on the machine and its load, which it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


def made_up_export(n: int, out: Path, layers: int = 12, classes: int = 10, side: int = 28, seed: int = 0) -> Path:
    import torch

    from laya_cli.exporting.folder import assemble, build_table, write_export

    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    logits = torch.randn(n, classes, generator=g) + 2 * torch.nn.functional.one_hot(labels, classes)
    alpha = torch.softmax(torch.randn(n, layers, generator=g), -1)
    contrib = torch.randn(n, layers, generator=g, dtype=torch.float64)
    names, cls = [f"blocks.{i}" for i in range(layers)], [f"class {c}" for c in range(classes)]
    table = build_table(torch.arange(n), labels, logits, alpha, contrib, names, cls)
    images = (torch.rand(n, 1, side, side, generator=g) * 255).to(torch.uint8)
    exp = assemble(table, names, cls, images, {"head": "laya", "backbone": "made-up", "dataset": "made-up"})
    write_export(exp, out, plots=False)
    return out / "report.html"


def real_export(model: str, n: int, out: Path) -> Path:
    from laya_cli.data.settings import EvalDataSettings
    from laya_cli.exporting.folder import run_export
    from laya_cli.exporting.settings import ExportSettings
    from laya_cli.runtime import progress

    with progress.enabled(False):
        run_export(model, out, ExportSettings(plots=False, device="cpu"), EvalDataSettings(samples=n))
    return out / "report.html"


def measure(browser_, report: Path) -> dict:
    from benchmarks.browser import open_report

    t0 = time.perf_counter()
    page, watch = open_report(browser_, report)
    page.wait_for_selector("body[data-explorer=ready]", timeout=120_000)
    wall = (time.perf_counter() - t0) * 1000
    try:
        out = {
            "ready": page.evaluate("window.layaExplorer.readyAt"),
            "load": page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"),
            "wall_to_ready": wall,
        }
        out["filter"] = page.evaluate(f"""async () => {{ const t0 = performance.now();
            const s = document.getElementById('x-label'); s.value = '3'; s.dispatchEvent(new Event('change'));
            await ({FRAME})(); return performance.now() - t0; }}""")
        out["sort"] = page.evaluate(f"""async () => {{ const t0 = performance.now();
            document.querySelector('th button[data-sort=p]').click(); await ({FRAME})();
            return performance.now() - t0; }}""")
        page.evaluate(
            "() => { const s = document.getElementById('x-label'); s.value = ''; "
            "s.dispatchEvent(new Event('change')); }"
        )
        out["scroll"] = page.evaluate(f"""async () => {{ const t0 = performance.now();
            const s = document.getElementById('x-scroll'); s.scrollTop = s.scrollHeight / 2;
            await ({FRAME})(); return performance.now() - t0; }}""")
        out["rows_in_dom"] = page.evaluate("document.querySelectorAll('#x-body tr.x-row').length")
        out["errors"] = len(watch.console_errors) + len(watch.page_errors) + len(watch.external_requests)
    finally:
        page.close()
    return out


def load_line() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"
    except OSError:
        return f"{os.cpu_count()} CPUs"


def main(argv=None) -> dict:
    from benchmarks.browser import chromium, unavailable_reason

    ap = argparse.ArgumentParser(prog="python -m benchmarks.report_explorer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="comma list of sample counts")
    ap.add_argument("--repeats", type=int, default=3, help="fresh page loads per size (median reported)")
    ap.add_argument("--model", help="export this checkpoint's test split instead of made-up samples")
    args = ap.parse_args(argv)
    why = unavailable_reason()
    if why:
        sys.exit(f"cannot run: {why}")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp, chromium() as b:
        for n in sizes:
            t0 = time.perf_counter()
            out = Path(tmp) / f"export-{n}"
            report = real_export(args.model, n, out) if args.model else made_up_export(n, out)
            export_s = time.perf_counter() - t0
            runs = [measure(b, report) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            med["errors"] = max(r["errors"] for r in runs)
            med["mb"] = report.stat().st_size / 2**20
            med["export_s"] = export_s
            rows[n] = med
    from .say import say

    what = f"real export of {args.model}" if args.model else "made-up exports (12 layers, 28×28 noise thumbnails)"
    say(f"report.html explorer, {what}; median of {args.repeats} page loads; {load_line()}")
    head = (
        f"{'samples':>8} {'MiB':>6} {'ready ms':>9} {'load ms':>8} {'filter ms':>10} {'sort ms':>8} "
        f"{'scroll ms':>10} {'DOM rows':>9} {'errors':>7} {'export s':>9}"
    )
    say(head)
    for n, r in rows.items():
        say(
            f"{n:>8,} {r['mb']:>6.1f} {r['ready']:>9.0f} {r['load']:>8.0f} {r['filter']:>10.1f} {r['sort']:>8.1f} "
            f"{r['scroll']:>10.1f} {r['rows_in_dom']:>9.0f} {r['errors']:>7d} {r['export_s']:>9.1f}"
        )
    if len(rows) > 1:
        small, big = rows[min(rows)], rows[max(rows)]
        say(
            f"ratios {max(rows):,} / {min(rows):,} samples: "
            + ", ".join(
                f"{k} {big[k] / small[k]:.2f}×" for k in ("mb", "ready", "load", "filter", "sort", "scroll") if small[k]
            )
        )
    return rows


if __name__ == "__main__":
    main()
