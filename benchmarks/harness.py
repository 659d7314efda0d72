"""Every speed benchmark of laya in one run, with peak memory, summarised side by side.

    python -m benchmarks      [--quick] [--device auto|cpu|cuda] [--json FILE]
    make bench                (the same)

Measurement code of the checkout: it imports ``laya_cli`` as a user would (installed or editable).

Runs, each in a fresh Python process (multiprocessing, spawn), so that one benchmark's
memory high-water mark cannot hide another's:

  baseline     imports torch, timm, captum and laya, nothing else: the memory floor every
               process below starts from.
  train_cache  benchmarks.train_cache.run(): frozen-backbone head training without the
               feature cache (backbone on every batch), with a cold cache, with a warm cache.
  audit_speed  benchmarks.audit_speed.main(): audit vs plain inference vs the naive
               per-block Captum LayerIntegratedGradients route.
  network_ig   benchmarks.network_audit.ig_routes(): network-scope IG on the benchmark's ViT-tiny,
               ours (prefix-cached, steps per (image, layer) from --ig-tol) against Captum's
               straightforward route (32 steps, a full pass each), with the completeness of each.
  plain, audit the two sides of "audit / plain inference" again, alone, for their peak
               memory: the same model and images as audit_speed, then either one plain
               inference pass or the audit (laya + ig + gradxact + LOLO, features included).
  audit_memory benchmarks.audit_memory.main(): the audit's peak memory on 1,000 vs
               10,000 Fashion-MNIST test samples (its own fresh process per size); skipped,
               with the reason, when it cannot run (e.g. no Fashion-MNIST).
  memory_budget benchmarks.memory_budget.main(): peak RSS of the built-in CNN's network-scope IG
               audit (256 samples × 32 steps) within --max-memory 2G vs unbounded, and whether the
               results are equal; skipped, with the reason, without Fashion-MNIST. Not in --quick.
  startup      benchmarks.startup.run(): ``laya --help``, ``laya <cmd> --help`` and
               ``laya info`` next to ``python -c "import torch"``, each a fresh process.

Peak memory is each process's peak resident set size, read by the process itself when its
work is done (``memory.peak_rss_mb``), reported whole and above the baseline process. On CUDA,
also ``torch.cuda.max_memory_allocated()`` (tensors only, no
allocator cache). RSS counts everything the process touched (Python, torch's libraries,
allocator caches), so only differences between processes of the same kind are meaningful.

``--quick`` shrinks every size and runs the benchmarks in one shared child process, so the
imports are paid once (a smoke run for the tests, under ~30 s on an idle 2-core machine: not a
measurement; its memory column is the shared process's running peak). It leaves out the
"plain"/"audit" memory phases (one shared process cannot separate them), runs audit_memory's
cells in that process too, and times fewer startup commands.

Ctrl-C (or SIGTERM) stops the run: each child leads a process group of its own (with the
processes it starts), which the parent stops; ``python -m benchmarks`` then prints "interrupted"
(exit 130), as every laya command does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback

from .memory import peak_rss_mb, reset_peak
from .say import console, say

# Arguments per benchmark: full (the documented measurement) and quick (a smoke run).
SIZES = {
    "full": {
        "train_cache": {"images_per_class": 30, "epochs": 20},
        "audit_speed": [],
        "network_ig": {"images": 4, "steps": 32},
        "phase_images": 64,
        "phase_steps": 32,
        "audit_memory": ["--dataset", "fashion-mnist", "--sizes", "1000,10000"],
        "memory_budget": [],  # its own fresh processes; not in --quick (it needs Fashion-MNIST and minutes)
        "startup": {"rounds": 5, "quick": False},
    },
    "quick": {
        "train_cache": {"images_per_class": 3, "epochs": 1},
        "audit_speed": [
            "--images",
            "2",
            "--steps",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--naive-blocks",
            "1",
            "--naive-images",
            "1",
        ],
        "network_ig": {"images": 1, "steps": 4},
        "phase_images": 2,
        "phase_steps": 2,
        "audit_memory": ["--dataset", "digits", "--sizes", "30,60", "--modes", "streamed", "--in-process"],
        "startup": {"rounds": 1, "quick": True},
    },
}
JOBS = (
    "baseline",
    "train_cache",
    "audit_speed",
    "network_ig",
    "plain",
    "audit",
    "audit_memory",
    "memory_budget",
    "startup",
)
# --quick runs every benchmark in one shared process, where the peak-memory phases "plain" and "audit"
# would measure nothing (their code runs inside audit_speed anyway): it leaves them out.
QUICK_JOBS = ("baseline", "train_cache", "audit_speed", "network_ig", "audit_memory", "startup")
OPTIONAL = {"audit_memory", "memory_budget"}  # reported as skipped (with the reason) when it cannot run, e.g. no data


# --------------------------------------------------------------------------- child processes


def _job(name: str, size: dict, device: str) -> dict:
    import torch

    # Every process starts from the same floor: the modules the benchmarks use, imported up front.
    import laya_cli.auditing.head_scope  # noqa: F401
    import laya_cli.model.checkpoint  # noqa: F401
    import laya_cli.training.job  # noqa: F401
    from laya_cli.runtime import progress

    progress.set_enabled(False)  # a child process of its own: nothing to restore
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if name == "baseline":
        import captum.attr  # noqa: F401
        import timm  # noqa: F401

        return {"torch_threads": torch.get_num_threads()}
    if name == "train_cache":
        from . import train_cache

        return train_cache.main(
            [
                f"--images-per-class={size['train_cache']['images_per_class']}",
                f"--epochs={size['train_cache']['epochs']}",
            ]
        )
    if name == "audit_speed":
        from . import audit_speed

        return audit_speed.main([*size["audit_speed"], "--device", device])
    if name == "network_ig":
        from . import network_audit

        return network_audit.routes_only(size["network_ig"]["images"], size["network_ig"]["steps"], device)
    if name == "audit_memory":
        from . import audit_memory

        return audit_memory.main(size["audit_memory"])
    if name == "memory_budget":
        from . import memory_budget

        return memory_budget.main(size["memory_budget"])
    if name == "startup":
        from . import startup

        return startup.run(**size["startup"])
    if name in ("plain", "audit"):
        from . import audit_speed

        plain, model, images, _ = audit_speed.build(size["phase_images"], device)
        floor = reset_peak()  # the model and images are built: measure the phase alone
        if device == "cuda":
            torch.cuda.synchronize()
            cuda_floor = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        if name == "plain":
            audit_speed.plain_inference(plain, model, images, device)
        else:
            audit_speed.audit(model, images, size["phase_steps"], device)
        out = {"images": size["phase_images"]}
        if device == "cuda":
            torch.cuda.synchronize()
            out["phase_cuda_mb"] = (torch.cuda.max_memory_allocated() - cuda_floor) / 2**20
        out["seconds"] = time.perf_counter() - start
        if floor is not None:
            out["floor_mb"], out["phase_peak_mb"] = floor, peak_rss_mb() - floor
        return out
    raise ValueError(name)


def _child(names: list[str], size: dict, device: str, queue) -> None:
    """Run the benchmarks ``names`` one after the other in this process; one message per benchmark.

    The child leads a process group of its own (with the processes it starts), out of the terminal's:
    Ctrl-C reaches the parent only, which stops this whole group (``run_children``).
    """
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    try:
        release_sigint()  # a Ctrl-C that arrived while this process started is delivered here
    except KeyboardInterrupt:
        queue.put({"ok": False, "interrupted": True, "name": names[0]})
        return
    for name in names:
        start, cpu = time.perf_counter(), _cpu_s()
        try:
            result = _job(name, size, device)
            out = {"ok": True, "result": _plain(result), "peak_rss_mb": peak_rss_mb()}
            if device == "cuda":
                import torch

                out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
        except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent says "interrupted"
            queue.put({"ok": False, "interrupted": True, "name": name})
            return
        except BaseException as e:  # report, don't hang the parent
            out = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out["name"], out["job_s"], out["cpu_s"] = name, time.perf_counter() - start, _cpu_s() - cpu
        queue.put(out)


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and of the child processes it has waited for."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return time.process_time()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _plain(obj):
    """JSON-friendly copy of a benchmark's result dict."""
    return json.loads(json.dumps(obj, default=str))


def run_children(names: list[str], size: dict, device: str):
    """Run ``names`` in one fresh child process; yield (name, message) as each benchmark ends.

    A benchmark that failed yields its message with ``ok`` False (the caller decides); Ctrl-C in the
    parent or the child stops the child and raises KeyboardInterrupt here.
    """
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(list(names), size, device, queue), name=f"bench-{'+'.join(names)}")
    start = time.perf_counter()
    try:
        with sigint_held():  # the child starts deaf to Ctrl-C (no traceback from its bootstrap), then
            proc.start()  # leaves the terminal's process group; the parent stops it below
        for name in names:
            while True:  # read before join: a large result must be drained for the child to exit
                try:
                    out = queue.get(timeout=1.0)
                    break
                except queue_mod.Empty:
                    if not proc.is_alive():
                        raise RuntimeError(
                            f"benchmark {name} died without a result (exit code {proc.exitcode})"
                        ) from None
            if out.get("interrupted"):
                raise KeyboardInterrupt
            now = time.perf_counter()
            out["wall_s"], start = now - start, now
            yield name, out
        proc.join()
    finally:
        if proc.is_alive():  # interrupted, or the caller stopped early: no orphan benchmark left running
            _stop(proc)


@contextlib.contextmanager
def sigint_held():
    """SIGINT blocked, not ignored, while a child process starts: the child inherits the blocked mask
    (deaf during its bootstrap, until ``release_sigint``), and a Ctrl-C in this window stays pending
    and reaches the parent as KeyboardInterrupt when the block ends (ignoring it lost it: the run went on)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # checks signals: a pending Ctrl-C raises here


def release_sigint() -> None:
    """Unblock SIGINT in a benchmark child (blocked by ``sigint_held``); one that is pending raises now."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop(proc) -> None:
    """Stop a benchmark child and every process it started (its process group), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (AttributeError, OSError):  # no process groups here, or the child had not made its own yet
        proc.terminate()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


def run_child(name: str, size: dict, device: str) -> dict:
    """One benchmark in a fresh process of its own (its peak memory is its own)."""
    for _, out in run_children([name], size, device):
        if not out["ok"]:
            raise RuntimeError(f"benchmark {name} failed: {out['error']}\n{out['traceback']}")
        return out
    raise RuntimeError(f"benchmark {name} gave no result")  # pragma: no cover


# --------------------------------------------------------------------------- all of them


def run_all(quick: bool = False, device: str = "cpu", jobs=None) -> dict:
    """Every benchmark; SIGTERM (a CI timeout) stops the running child and its processes, like Ctrl-C."""
    from laya_cli.runtime.errors import sigterm_as_interrupt

    with sigterm_as_interrupt():
        return _run_all(quick, device, jobs)


def _run_all(quick: bool, device: str, jobs) -> dict:
    size = SIZES["quick" if quick else "full"]
    start = time.perf_counter()
    runs, skipped = {}, {}
    names = list(jobs or (QUICK_JOBS if quick else JOBS))
    # Full: each benchmark in its own fresh process. Quick: all in one, imports paid once.
    groups = [names] if quick else [[n] for n in names]
    for group in groups:
        say(f"--- {group[0]}")
        try:
            for name, out in run_children(group, size, device):
                if not out["ok"]:
                    if name not in OPTIONAL:
                        raise RuntimeError(f"benchmark {name} failed: {out['error']}\n{out['traceback']}")
                    skipped[name] = f"benchmark {name} failed: {out['error']}".splitlines()[0]
                    say(f"skipped {name}: {skipped[name]}")
                else:
                    runs[name] = out
                following = group[group.index(name) + 1 :]
                if following:
                    say(f"--- {following[0]}")
        except RuntimeError as e:
            if not (len(group) == 1 and group[0] in OPTIONAL and group[0] not in skipped):
                raise
            skipped[group[0]] = str(e).splitlines()[0]
            say(f"skipped {group[0]}: {skipped[group[0]]}")
    threads = runs.get("baseline", {}).get("result", {}).get("torch_threads")
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    summary = {
        "quick": quick,
        "device": device,
        "torch_threads": threads,
        "cpu_count": os.cpu_count(),
        "runs": runs,
        "skipped": skipped,
        "wall_s": time.perf_counter() - start,
    }
    summary["ratios"] = ratios(summary)
    return summary


def ratios(summary: dict) -> list[dict]:
    """The side-by-side rows: (what, numerator, denominator, ratio, target)."""
    runs = summary["runs"]
    rows = []
    if "audit_speed" in runs:
        rows += _audit_speed_rows(runs["audit_speed"]["result"])
    if "network_ig" in runs:
        rows += _network_ig_rows(runs["network_ig"]["result"])
    if "train_cache" in runs:
        rows += _train_cache_rows(runs["train_cache"]["result"])
    if "plain" in runs and "audit" in runs:
        rows += _peak_memory_rows(runs)
    if "audit_memory" in runs:
        rows += _audit_memory_rows(runs["audit_memory"]["result"])
    if "memory_budget" in runs:
        rows += _memory_budget_rows(runs["memory_budget"]["result"])
    if "startup" in runs:
        rows += _startup_rows(runs["startup"]["result"])
    return rows


def _audit_speed_rows(a: dict) -> list[dict]:
    """benchmarks.audit_speed: the audit against plain inference, and naive Captum against the audit."""
    scaled = a["naive_images"] != a["images"] or len(a["naive_blocks"]) != 12
    return [
        {
            "what": "audit / plain inference",
            "num": f"{a['audit_s']:.3f} s",
            "den": f"{a['plain_s']:.3f} s",
            "ratio": a["audit_over_plain"],
            "target": "≤ 1.1×",
            "note": f"the default audit: features + laya + ig + gradxact + LOLO; {a['images']} images, {a['device']}",
        },
        {
            "what": "audit --metrics all / plain",
            "num": f"{a['audit_all_metrics_s']:.3f} s",
            "den": f"{a['plain_s']:.3f} s",
            "ratio": a["audit_all_metrics_over_plain"],
            "target": "on request",
            "note": "the same audit with AOPC, sufficiency, completeness and the model-randomisation check",
        },
        {
            "what": "naive Captum / ours",
            "num": f"{a['naive_s']:.1f} s",
            "den": f"{a['audit_s']:.3f} s",
            "ratio": a["naive_over_audit"],
            "target": "≥ 20×",
            "note": (
                "naive: Captum LayerIntegratedGradients per block over the full model, "
                f"{a['steps']} steps; "
                + (
                    f"measured {a['naive_measured_s']:.1f} s on blocks {a['naive_blocks']} × "
                    f"{a['naive_images']} images and scaled linearly to all"
                    if scaled
                    else "measured in full"
                )
            ),
        },
    ]


def _network_ig_rows(n: dict) -> list[dict]:
    """benchmarks.network_audit.ig_routes: network IG, Captum's straightforward route against ours."""
    return [
        {
            "what": "network IG: Captum / ours",
            "num": f"{n['captum_ig_s']:.1f} s",
            "den": f"{n['ours_ig_s']:.1f} s",
            "ratio": n["captum_over_ours"],
            "target": "≥ 2×, completeness no worse",
            "note": (
                f"ViT-tiny, {n['route_images']} images × 12 blocks; Captum: {n['steps']} steps, completeness "
                f"{n['captum_completeness']:.5f}; ours: --ig-tol {n['ig_tol']:g}, mean {n['ours_mean_steps']:.1f} "
                f"steps, completeness {n['ours_completeness']:.5f}"
            ),
        }
    ]


def _train_cache_rows(t: dict) -> list[dict]:
    """benchmarks.train_cache: head training without the feature cache, and with it cold, against warm."""
    return [
        {
            "what": "train: no cache / warm cache",
            "num": f"{t['naive_s']:.2f} s",
            "den": f"{t['warm_s']:.2f} s",
            "ratio": t["naive/warm"],
            "target": "≥ 10×",
            "note": f"frozen ViT-tiny, {t['images']} images, {t['epochs']} epochs; no cache = backbone on every batch",
        },
        {
            "what": "train: cold cache / warm cache",
            "num": f"{t['cold_s']:.2f} s",
            "den": f"{t['warm_s']:.2f} s",
            "ratio": t["cold/warm"],
            "target": "",
            "note": "cold = extract once + train",
        },
    ]


def _peak_memory_rows(runs: dict) -> list[dict]:
    """The plain and audit runs: the audit's peak memory against plain inference's (RSS, and CUDA if used)."""
    p, q = runs["plain"], runs["audit"]
    pr, qr = p["result"], q["result"]
    if "phase_peak_mb" in pr and "phase_peak_mb" in qr:
        a, b = qr["phase_peak_mb"], pr["phase_peak_mb"]
        note = (
            f"peak RSS of the phase alone, above the RSS once model and images are built "
            f"({qr['floor_mb']:.0f} / {pr['floor_mb']:.0f} MiB); whole processes "
            f"{q['peak_rss_mb']:.0f} / {p['peak_rss_mb']:.0f} MiB"
        )
    else:  # no peak reset on this OS: whole processes above the baseline process
        base = runs.get("baseline", {}).get("peak_rss_mb") or 0.0
        a, b = q["peak_rss_mb"] - base, p["peak_rss_mb"] - base
        note = f"whole processes above the baseline process ({base:.0f} MiB)"
    rows = [
        {
            "what": "peak RSS: audit / plain",
            "num": f"{a:.0f} MiB",
            "den": f"{b:.0f} MiB",
            "ratio": a / b if b > 0 else float("nan"),
            "target": "",
            "note": note,
        }
    ]
    if pr.get("phase_cuda_mb"):
        rows.append(
            {
                "what": "peak CUDA: audit / plain",
                "num": f"{qr['phase_cuda_mb']:.0f} MiB",
                "den": f"{pr['phase_cuda_mb']:.0f} MiB",
                "ratio": qr["phase_cuda_mb"] / pr["phase_cuda_mb"],
                "target": "",
                "note": "torch.cuda.max_memory_allocated above the built model, the phase alone",
            }
        )
    return rows


def _startup_rows(r: dict) -> list[dict]:
    """benchmarks.startup: each command's start-to-exit time over ``python -c "import torch"``."""
    rows = []
    try:
        torch_s = r["torch_s"]
        helps = [x for x in r["rows"] if x["command"].endswith("--help")]
        for x in helps[:1] + sorted(helps[1:], key=lambda x: -x["median_s"])[:1]:  # laya --help, the slowest other
            rows.append(
                {
                    "what": f"{x['command']} / import torch",
                    "num": f"{x['median_s']:.2f} s",
                    "den": f"{torch_s:.2f} s",
                    "ratio": x["over_torch"],
                    "target": "≤ 0.15×",
                    "note": f"startup: wall time, fresh process each, median of {r['rounds']} round-robin "
                    f"round(s); CPU time {x.get('cpu_over_torch', float('nan')):.3f}× torch's"
                    + ("" if x is helps[0] else " (the slowest 'laya <cmd> --help')"),
                }
            )
        for x in (x for x in r["rows"] if x["command"].startswith("laya info")):
            rows.append(
                {
                    "what": "laya info / import torch",
                    "num": f"{x['median_s']:.2f} s",
                    "den": f"{torch_s:.2f} s",
                    "ratio": x["over_torch"],
                    "target": "≤ torch + 1 s",
                    "note": f"startup: laya info on a digits checkpoint = torch + {x['minus_torch_s']:.2f} s",
                }
            )
    except (KeyError, TypeError, ZeroDivisionError):  # another version of startup: its own printout stands
        pass
    return rows


def _audit_memory_rows(r: dict) -> list[dict]:
    """benchmarks.audit_memory: how the audit's peak memory grows with the number of samples."""
    rows = []
    try:
        for mode, cells in r["rows"].items():
            if len(cells) < 2:
                continue
            a, b = cells[0], cells[-1]
            grow_a, grow_b = a["peak_mb"] - a["floor_mb"], b["peak_mb"] - b["floor_mb"]
            rows.append(
                {
                    "what": f"audit memory, {mode}: {b['samples']:,} / {a['samples']:,}",
                    "num": f"{grow_b:.0f} MiB",
                    "den": f"{grow_a:.0f} MiB",
                    "ratio": grow_b / grow_a if grow_a >= 1 else float("nan"),
                    "target": "",
                    "note": f"audit_memory, {r['dataset']} test samples, features {mode}: peak RSS "
                    f"above the process's floor (imports + model), one fresh process per size",
                }
            )
    except (KeyError, TypeError, IndexError):  # another version of audit_memory: its own printout stands
        pass
    return rows


def _memory_budget_rows(r: dict) -> list[dict]:
    """benchmarks.memory_budget: the CNN network-scope IG audit within --max-memory 2G vs unbounded."""
    try:
        a, b = r["rows"][0], r["rows"][-1]
        return [
            {
                "what": f"network IG peak RSS, {b['budget']} / {a['budget']}",
                "num": f"{b['peak_mb']:.0f} MiB",
                "den": f"{a['peak_mb']:.0f} MiB",
                "ratio": b["peak_mb"] / a["peak_mb"],
                "target": f"≤ {b['budget_mb']:.0f} MiB",
                "note": f"cnn, {r['samples']} samples × {r['steps']} steps, laya audit --scope network --compare ig; "
                f"{r['differ']} of {r['compared']} numbers differ (largest {r['max_diff']:.1e})",
            }
        ]
    except (KeyError, TypeError, IndexError, ZeroDivisionError):  # another version: its own printout stands
        return []


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--json", dest="json_out", default=None, help="write every number to this file")
    args = parser.parse_args(argv)
    from laya_cli.runtime.fileio import atomic_write_text

    from .tables import speed_tables

    if args.device.strip().lower() == "cpu":
        device = "cpu"  # no torch in this process: the benchmarks import it in their own
    else:
        from laya_cli.runtime.device import resolve_device

        device = resolve_device(args.device)
    try:
        summary = run_all(quick=args.quick, device=device)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: run_all stopped its child; exit as every laya command does
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    console().print(speed_tables(summary))
    if args.json_out:
        atomic_write_text(args.json_out, json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
