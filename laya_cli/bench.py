"""``laya bench``: the paper's head comparison, redone on your backbone and data.

Every head (``last``, ``concat``, ``scalarmix``, ``laya``) is trained with every seed on the
same backbone configuration and the same test split, then audited on the same test samples.
The bench reports test accuracy and macro-F1 per head, and faithfulness and Deletion@1 per
attribution method and head, as mean ± std over seeds.

Seeds: run ``k`` (0-based) uses seed ``base_seed + k`` for initialisation, shuffling and the
validation split, exactly as ``laya train --seed`` (base 1337: run 0 is the paper config).
The test split never moves (docs/datasets.md), and every run is audited on the same seeded
subset of it (``audit_seed``), so heads and seeds are compared on identical images.

Resumable: each run leaves ``<out>/<dataset>-<backbone>/<head>-seed<seed>.pt`` (the
checkpoint) and ``<head>-seed<seed>.json`` (its options, test metrics and audit), both
written atomically. A run whose two files exist and whose recorded options match is read
back, not redone; a run interrupted mid-training continues from its last finished epoch.
Documented in docs/benchmarks.md.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import platform
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from .errors import LayaError, TrainingInterrupted, unknown_choice
from .fileio import atomic_write_text, check_writable, json_safe, strict_json
from .heads import HeadConfig
from .progress import log

HEAD_ORDER = ("last", "concat", "scalarmix", "laya")
DEFAULT_HEADS = "last,concat,scalarmix,laya"
DEFAULT_COMPARE = "ig,gradxact,contrib,global"
RECORD_FORMAT = "laya-bench-run"
RECORD_VERSION = 1
BENCH_FORMAT = "laya-bench"


def parse_heads(spec: str | Sequence[str]) -> list[str]:
    """Comma list of head kinds (in the order given, duplicates dropped); unknown names suggest."""
    from .heads import HEADS

    names = spec.split(",") if isinstance(spec, str) else list(spec)
    heads: list[str] = []
    for name in (n.strip() for n in names):
        if not name:
            continue
        if name not in HEADS:
            raise unknown_choice("head", name, HEADS)
        if name not in heads:
            heads.append(name)
    if not heads:
        raise LayaError(f"--heads is empty: give one or more of {', '.join(HEAD_ORDER)}")
    return heads


def check_dataset_name(name: str) -> None:
    from .data import DATASETS

    if name.startswith("folder:"):
        if not name.partition(":")[2]:
            raise LayaError("--dataset folder:PATH needs a path")
        return
    if name not in DATASETS:
        raise unknown_choice("dataset", name, [*DATASETS, "folder:PATH"])


def slug(text: str) -> str:
    """A file-name-safe version of a dataset/backbone name (folder:~/x -> folder_x)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


@dataclass
class BenchRequest:
    dataset: str = "digits"
    backbone: str = "mlp"
    heads: list[str] = field(default_factory=lambda: list(HEAD_ORDER))
    seeds: int = 3
    base_seed: int = 1337
    out: str = "bench"
    data_dir: str | None = None
    label: str = "genre"
    image_size: int | None = None
    head_config: HeadConfig = field(default_factory=HeadConfig)  # the paper's by default
    epochs: int = 50
    batch_size: int = 128
    lr: float = 3e-4
    patience: int = 5
    layers: list[str] = field(default_factory=list)
    pool: str = "auto"
    pretrained: bool | None = None  # None: as train (pretrained for frozen hub backbones)
    weights: str | None = None
    finetune: bool | None = None
    use_cache: bool = True
    # audit
    compare: str = DEFAULT_COMPARE
    audit_samples: int | None = 2000  # None: the whole test split
    audit_seed: int = 0
    ablation: str = "mean"
    target: str = "predicted"
    reduce: str = "sum"
    steps: int = 32
    audit_batch_size: int = 256
    device: str = "cpu"
    redo: bool = False  # retrain and re-audit every run even when a matching one is on disk

    # ----------------------------------------------------------------- derived
    @property
    def folder(self) -> Path:
        return Path(self.out).expanduser() / f"{slug(self.dataset)}-{slug(self.backbone)}"

    @property
    def seed_values(self) -> list[int]:
        return [self.base_seed + k for k in range(self.seeds)]

    def methods(self) -> list[str]:
        from .audit import parse_methods

        return parse_methods(self.compare)

    def audit_settings(self):
        from .audit import AuditSettings

        return AuditSettings(ablation=self.ablation, target=self.target, reduce=self.reduce, steps=self.steps,
                             batch_size=self.audit_batch_size, seed=self.audit_seed, device=self.device)

    def train_request(self, head: str, seed: int):
        from .data import DataRequest
        from .train import TrainConfig, TrainRequest

        return TrainRequest(
            backbone=self.backbone, head=head, head_config=copy.deepcopy(self.head_config),
            data=DataRequest(name=self.dataset, data_dir=self.data_dir, image_size=self.image_size,
                             label=self.label, seed=seed),
            train=TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, patience=self.patience,
                              seed=seed, device=self.device),
            layers=list(self.layers), pool=self.pool, pretrained=self.pretrained, weights=self.weights,
            finetune=self.finetune, use_cache=self.use_cache, out=str(self.run_path(head, seed, ".pt")),
        )

    def run_path(self, head: str, seed: int, suffix: str) -> Path:
        return self.folder / f"{head}-seed{seed}{suffix}"

    def audit_options(self) -> dict:
        """What must match for a recorded audit to be reused (everything but the device)."""
        s = asdict(self.audit_settings())
        s.pop("device")
        s.pop("by_class")
        s.pop("internal_batch_size")  # a memory bound: same numbers either way
        return {**s, "methods": self.methods(), "samples": self.audit_samples}

    def validate(self) -> "BenchRequest":
        from .train import TrainConfig

        check_dataset_name(self.dataset)
        self.heads = parse_heads(self.heads)
        if self.seeds < 1:
            raise LayaError(f"--seeds must be at least 1, got {self.seeds}")
        if self.audit_samples is not None and self.audit_samples < 1:
            raise LayaError(f"--audit-samples must be at least 1, got {self.audit_samples}")
        if self.pool not in ("auto", "cls", "mean"):
            raise LayaError(f"--pool must be auto, cls or mean, got '{self.pool}'")
        TrainConfig(self.epochs, self.batch_size, self.lr, self.patience).validate()
        self.head_config.validate()
        self.audit_settings().validate()
        self.methods()
        if self.ablation == "mask" and any(h not in ("laya", "scalarmix") for h in self.heads):
            raise LayaError("--ablation mask needs heads with layer weights (laya, scalarmix); "
                            "use --ablation mean or zero to compare every head")
        return self


def train_options(req) -> dict:
    """The options of one training run that must match for it to be reused (a TrainRequest minus
    where it is written, resume, the cache switch and the device)."""
    d = json.loads(json.dumps(asdict(req), default=str))
    for k in ("out", "resume", "use_cache"):
        d.pop(k, None)
    d.get("train", {}).pop("device", None)
    return d


def _diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k} {a!r} -> {b!r}")
    return out


def options_changes(recorded: dict, wanted: dict) -> list[str]:
    """How ``wanted`` differs from ``recorded`` training options. An option that a newer laya added
    (absent from the record) counts as a change only when it is set to something else than its default."""
    from .train import TrainRequest

    defaults = train_options(TrainRequest())

    def fill(rec: dict, want: dict, dflt: dict) -> dict:
        out = dict(rec)
        for k, v in want.items():
            if k not in rec and k in dflt:
                out[k] = dflt[k]
            elif isinstance(v, dict) and isinstance(rec.get(k), dict) and isinstance(dflt.get(k), dict):
                out[k] = fill(rec[k], v, dflt[k])
        return out

    return _diff(fill(recorded, wanted, defaults), wanted)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_record(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        return None
    return rec


def _write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, strict_json(obj))


# --------------------------------------------------------------------------- one run


@dataclass
class RunOutcome:
    head: str
    seed: int
    record: dict
    trained: bool  # False: the checkpoint was reused
    audited: bool  # False: the audit was reused


def _train_run(bench: BenchRequest, head: str, seed: int) -> dict:
    """Train (or continue an interrupted training of) one run; returns its record (no audit yet)."""
    from .train import load_train_state, train

    req = bench.train_request(head, seed)
    options = train_options(req)
    if req.state_path.is_file() and not bench.redo:
        try:  # an interrupted training of this very run: continue from its last finished epoch
            load_train_state(req.state_path, req.fingerprint())
            req.resume = True
        except LayaError:
            log(f"[yellow]{req.state_path} is a partial run with other options or unreadable: starting over[/]")
    if not req.resume:
        req.state_path.unlink(missing_ok=True)
    start = time.perf_counter()
    ckpt = train(req)
    seconds = time.perf_counter() - start
    return {
        "format": RECORD_FORMAT, "version": RECORD_VERSION, "head": head, "seed": seed,
        "checkpoint": Path(req.out).name, "checkpoint_sha256": _sha256(Path(req.out)),
        "train_options": options, "metrics": ckpt["metrics"], "train_seconds": seconds,
        "resumed": req.resume, "device": bench.device, "audit_options": None, "audit": None,
    }


def _audit_run(bench: BenchRequest, record: dict) -> dict:
    from .audit import run_audit
    from .checkpoint import load_model
    from .evaldata import load_eval_data

    path = bench.folder / record["checkpoint"]
    start = time.perf_counter()
    model = load_model(path)
    data = load_eval_data(model, samples=bench.audit_samples, seed=bench.audit_seed, device=bench.device,
                          use_cache=bench.use_cache)
    result = run_audit(model, data, bench.methods(), bench.audit_settings())
    result.settings.update({"model": str(path), "samples": bench.audit_samples})
    record = dict(record)
    record["audit"] = result.to_dict()
    record["audit_options"] = bench.audit_options()
    record["audit_seconds"] = time.perf_counter() - start
    return record


def _reusable_training(bench: BenchRequest, head: str, seed: int, record: dict | None) -> bool:
    """Whether the run's checkpoint on disk can be reused; raise when it was made with other options."""
    ckpt = bench.run_path(head, seed, ".pt")
    if bench.redo or record is None or not ckpt.is_file():
        return False
    wanted = train_options(bench.train_request(head, seed))
    changes = options_changes(record.get("train_options") or {}, wanted)
    if changes:
        shown = "; ".join(changes[:4]) + (f"; … ({len(changes)} in all)" if len(changes) > 4 else "")
        raise LayaError(f"{ckpt} was trained with other options ({shown}); use another --out, "
                        f"or --redo to retrain every run")
    if record.get("checkpoint_sha256") != _sha256(ckpt):
        log(f"[yellow]{ckpt} changed since it was recorded: retraining it[/]")
        return False
    return True


def run_one(bench: BenchRequest, head: str, seed: int) -> RunOutcome:
    record_path = bench.run_path(head, seed, ".json")
    record = _read_record(record_path) if record_path.is_file() else None
    trained = audited = False
    if not _reusable_training(bench, head, seed, record):
        record = _train_run(bench, head, seed)
        _write_json(record_path, record)  # the training is safe on disk before the audit starts
        trained = True
    if record.get("audit") is None or record.get("audit_options") != bench.audit_options():
        record = _audit_run(bench, record)
        _write_json(record_path, record)
        audited = True
    return RunOutcome(head, seed, record, trained, audited)


# --------------------------------------------------------------------------- the bench


def _stats(values: list[float]) -> dict:
    """Mean and sample standard deviation (n − 1; null with one value) over seeds, NaN-free values only."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    mean = statistics.fmean(vals) if vals else None
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return {"mean": mean, "std": std, "n": len(vals), "values": list(values)}


def aggregate(bench: BenchRequest, outcomes: list[RunOutcome]) -> dict:
    heads: dict[str, dict] = {}
    methods = bench.methods()
    for head in bench.heads:
        recs = [o.record for o in outcomes if o.head == head]
        metric = lambda k: _stats([r["metrics"][k] for r in recs])
        entry = {
            "runs": len(recs), "seeds": [r["seed"] for r in recs],
            "test_accuracy": metric("test_accuracy"), "test_macro_f1": metric("test_macro_f1"),
            "val_accuracy": metric("val_accuracy"), "epochs_run": metric("epochs_run"),
            "train_seconds": _stats([r.get("train_seconds") for r in recs]),
            "audit_seconds": _stats([r.get("audit_seconds") for r in recs]),
            "audit_accuracy": _stats([r["audit"]["accuracy"] for r in recs]),
            "audit_samples": recs[0]["audit"]["n_samples"] if recs else None,
            "methods": {},
        }
        for m in methods:
            per_run = [r["audit"]["methods"][m] for r in recs]
            available = all(p["available"] for p in per_run)
            entry["methods"][m] = {
                "available": available,
                "note": next((p["note"] for p in per_run if p.get("note")), None),
                "faithfulness": _stats([p["faithfulness"] for p in per_run]),
                "deletion@1": _stats([p["deletion@1"] for p in per_run]),
                "deletion@1_normalised": _stats([p["deletion@1_normalised"] for p in per_run]),
                "deletion@1_oracle": _stats([p["deletion@1_oracle"] for p in per_run]),
                "deletion@1_random": _stats([p["deletion@1_random"] for p in per_run]),
                "undefined": sum(int(p["undefined"]) for p in per_run),
                "defined": sum(int(p["defined"]) for p in per_run),
            }
        notes = []
        for r in recs:
            for n in r["audit"].get("notes", []):
                if n not in notes:
                    notes.append(n)
        entry["notes"] = notes
        heads[head] = entry
    return heads


def machine() -> dict:
    from . import __version__

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": str(torch.__version__), "laya": __version__}
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    return info


@dataclass
class BenchResult:
    request: BenchRequest
    heads: dict
    runs: list[dict]
    reused: int  # runs read back whole (training and audit)
    reaudited: int  # runs whose checkpoint was reused but audit redone
    wall_seconds: float

    def to_dict(self) -> dict:
        b = self.request
        return json_safe({
            "format": BENCH_FORMAT, "version": RECORD_VERSION,
            "bench": {
                "dataset": b.dataset, "backbone": b.backbone, "heads": list(b.heads), "seeds": b.seed_values,
                "base_seed": b.base_seed, "folder": str(b.folder), "data_dir": b.data_dir,
                "head_config": b.head_config.to_dict(),
                "train": {"epochs": b.epochs, "batch_size": b.batch_size, "lr": b.lr, "patience": b.patience,
                          "layers": list(b.layers), "pool": b.pool, "pretrained": b.pretrained,
                          "weights": b.weights, "finetune": b.finetune},
                "audit": b.audit_options(), "device": b.device,
            },
            "heads": self.heads,
            "runs": self.runs,
            "reused": self.reused, "reaudited": self.reaudited,
            "wall_seconds": self.wall_seconds,
            "compute_seconds": sum((r.get("train_seconds") or 0) + (r.get("audit_seconds") or 0) for r in self.runs),
            "machine": machine(),
        })

    def to_json(self) -> str:
        return strict_json(self.to_dict())


def run_bench(bench: BenchRequest, on_run: Callable[[RunOutcome, int, int], None] | None = None) -> BenchResult:
    """Train and audit every (head, seed) run that is not already finished, then aggregate."""
    bench.validate()
    if _under_torchrun():
        raise LayaError("laya bench runs in one process, not under torchrun; run it with plain `laya bench` "
                        "(use torchrun for single `laya train`/`laya audit` runs)")
    try:
        bench.folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LayaError(f"cannot create the bench folder {bench.folder}: {e.strerror or e}") from None
    check_writable(bench.folder / "probe")
    start = time.perf_counter()
    pairs = [(h, s) for h in bench.heads for s in bench.seed_values]
    finished = sum(1 for h, s in pairs if _is_finished(bench, h, s))
    if finished:
        log(f"reusing {finished} finished run{'s' if finished != 1 else ''} from {bench.folder}")
    outcomes: list[RunOutcome] = []
    for i, (head, seed) in enumerate(pairs, 1):
        try:
            if not _is_finished(bench, head, seed):
                log(f"[{i}/{len(pairs)}] {head} head, seed {seed} …")
            outcome = run_one(bench, head, seed)
        except TrainingInterrupted:
            done = len(outcomes)
            raise TrainingInterrupted(
                f"bench interrupted in run {head} seed {seed} ({done} of {len(pairs)} runs finished and kept "
                f"in {bench.folder}); run the same command again to continue") from None
        outcomes.append(outcome)
        if on_run:
            on_run(outcome, i, len(pairs))
    reused = sum(1 for o in outcomes if not o.trained and not o.audited)
    reaudited = sum(1 for o in outcomes if not o.trained and o.audited)
    runs = []
    for o in outcomes:
        r = o.record
        runs.append({"head": o.head, "seed": o.seed, "checkpoint": str(bench.folder / r["checkpoint"]),
                     "record": str(bench.run_path(o.head, o.seed, ".json")), "reused": not o.trained,
                     "reaudited": (not o.trained) and o.audited,
                     **{k: r["metrics"][k] for k in ("test_accuracy", "test_macro_f1", "val_accuracy",
                                                     "epochs_run", "best_epoch")},
                     "train_seconds": r.get("train_seconds"), "audit_seconds": r.get("audit_seconds")})
    return BenchResult(bench, aggregate(bench, outcomes), runs, reused, reaudited, time.perf_counter() - start)


def _under_torchrun() -> bool:
    try:
        from .distributed import active, env_world_size
    except ImportError:
        return False
    return active() or env_world_size() > 1


def _is_finished(bench: BenchRequest, head: str, seed: int) -> bool:
    """A run that will be read back whole (no training, no audit), without raising."""
    if bench.redo:
        return False
    rec_path, ckpt = bench.run_path(head, seed, ".json"), bench.run_path(head, seed, ".pt")
    if not (rec_path.is_file() and ckpt.is_file()):
        return False
    rec = _read_record(rec_path)
    return (rec is not None and not options_changes(rec.get("train_options") or {},
                                                    train_options(bench.train_request(head, seed)))
            and rec.get("audit") is not None and rec.get("audit_options") == bench.audit_options())


# --------------------------------------------------------------------------- rendering

def _pm(stats: dict, spec: str = "{:.4f}") -> str:
    m, s = stats.get("mean"), stats.get("std")
    if m is None:
        return "n/a"
    return spec.format(m) + ("" if s is None else " ± " + spec.format(s))


def _seconds(stats: dict) -> str:
    m = stats.get("mean")
    return "n/a" if m is None else _pm(stats, "{:.1f}" if m < 10 else "{:.0f}") + " s"


def _best(values: dict[str, float | None]) -> float | None:
    vals = [v for v in values.values() if v is not None]
    return max(vals) if vals else None


def table_rows(result: BenchResult) -> dict:
    """Plain cells for the three tables (used by the rich and Markdown renderers)."""
    heads = result.heads
    methods = result.request.methods()
    acc_best = {k: _best({h: e[k]["mean"] for h, e in heads.items()}) for k in ("test_accuracy", "test_macro_f1")}
    accuracy = []
    for h, e in heads.items():
        accuracy.append({
            "head": h,
            "cells": [(_pm(e["test_accuracy"]), e["test_accuracy"]["mean"] == acc_best["test_accuracy"]),
                      (_pm(e["test_macro_f1"]), e["test_macro_f1"]["mean"] == acc_best["test_macro_f1"]),
                      (_pm(e["epochs_run"], "{:.1f}"), False),
                      (_seconds(e["train_seconds"]), False),
                      (str(e["runs"]), False)],
        })
    per_metric = {}
    for key in ("faithfulness", "deletion@1"):
        rows = []
        col_best = {h: _best({m: e["methods"][m][key]["mean"] for m in methods
                              if m != "random" and e["methods"][m]["available"]}) for h, e in heads.items()}
        for m in methods:
            cells = []
            for h, e in heads.items():
                s = e["methods"][m]
                if not s["available"]:
                    cells.append(("n/a", False))
                else:
                    cells.append((_pm(s[key], "{:.3f}"), m != "random" and s[key]["mean"] is not None
                                  and s[key]["mean"] == col_best[h]))
            rows.append({"method": m, "cells": cells, "dim": False})
        if key == "deletion@1":
            for label, k in (("oracle", "deletion@1_oracle"), ("random exp.", "deletion@1_random")):
                cells = []
                for h, e in heads.items():
                    # Oracle/random depend only on Δ: take them from the random method, always available.
                    s = e["methods"]["random"][k]
                    cells.append((_pm(s, "{:.3f}"), False))
                rows.append({"method": label, "cells": cells, "dim": True})
        per_metric[key] = rows
    return {"accuracy": accuracy, "faithfulness": per_metric["faithfulness"], "deletion@1": per_metric["deletion@1"]}


ACC_HEADERS = ["test accuracy", "macro-F1", "epochs", "train time", "runs"]


def caption(result: BenchResult) -> str:
    b = result.request
    cfg = b.head_config
    samples = next(iter(result.heads.values()))["audit_samples"] if result.heads else None
    seeds = b.seed_values
    seed_text = f"seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return (f"{b.dataset} · {b.backbone} · {len(seeds)} {'seeds' if len(seeds) != 1 else 'seed'} ({seed_text}) · "
            f"d*={cfg.d_star} τ={cfg.tau:g} ψ={cfg.psi} score_hidden={cfg.score_hidden} · lr {b.lr:g} batch "
            f"{b.batch_size} ≤{b.epochs} epochs patience {b.patience} · audit {samples} test samples, ablation "
            f"{b.ablation}, target {b.target}, IG steps {b.steps} · mean ± std over seeds (std: n−1)")


def rich_tables(result: BenchResult) -> list:
    from rich import box
    from rich.table import Table

    rows = table_rows(result)
    heads = list(result.heads)
    style = lambda text, best: f"[bold green]{text}[/]" if best else text
    t1 = Table(title="laya bench: accuracy", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    t1.add_column("head", style="bold", no_wrap=True)
    for h in ACC_HEADERS:
        t1.add_column(h, justify="right", no_wrap=True)
    for r in rows["accuracy"]:
        t1.add_row(r["head"], *(style(t, b) for t, b in r["cells"]))
    tables = [t1]
    for key, title in (("faithfulness", "faithfulness (Spearman ρ with LOLO effects)"),
                       ("deletion@1", "Deletion@1 (drop in p_ŷ when the top-ranked layer is removed)")):
        t = Table(title=f"laya bench: {title}", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        t.add_column("method", style="bold", no_wrap=True)
        for h in heads:
            t.add_column(f"{h} head", justify="right", no_wrap=True)
        for r in rows[key]:
            name = f"[dim]{r['method']}[/]" if r["dim"] else r["method"]
            t.add_row(name, *(style(f"[dim]{c}[/]" if c == "n/a" else c, b) for c, b in r["cells"]))
        tables.append(t)
    return tables


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| :--- | " + " | ".join("---:" for _ in header[1:]) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


def markdown(result: BenchResult, title: str = "laya bench") -> str:
    rows = table_rows(result)
    heads = list(result.heads)
    bold = lambda t, b: f"**{t}**" if b else t
    lines = [f"### {title}: {result.request.dataset}, {result.request.backbone}", "",
             *_md_table(["head", *ACC_HEADERS], [[f"`{r['head']}`", *(bold(t, b) for t, b in r["cells"])]
                                                 for r in rows["accuracy"]])]
    for key, name in (("faithfulness", "Faithfulness (Spearman ρ with the LOLO effects)"),
                      ("deletion@1", "Deletion@1")):
        body = [[(f"_{r['method']}_" if r["dim"] else f"`{r['method']}`"), *(bold(t, b) for t, b in r["cells"])]
                for r in rows[key]]
        lines += ["", f"#### {name}", "", *_md_table(["method", *(f"{h} head" for h in heads)], body)]
    lines += ["", f"_{caption(result)}_"]
    notes = []
    for h, e in result.heads.items():
        for n in e["notes"]:
            notes.append(f"{h} head: {n}")
    if notes:
        lines += ["", *(f"- note: {n}" for n in notes)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- speed


def load_speed_benchmarks():
    """The ``benchmarks`` package of a source checkout (``laya bench speed`` runs it)."""
    import importlib
    import sys

    try:
        return importlib.import_module("benchmarks.__main__")
    except ModuleNotFoundError:
        pass
    root = Path(__file__).resolve().parents[1]
    if not (root / "benchmarks" / "__main__.py").is_file():
        raise LayaError("laya bench speed needs laya's source checkout (its benchmarks/ folder); "
                        "clone the repository and run it there, or run: python -m benchmarks")
    sys.path.insert(0, str(root))
    return importlib.import_module("benchmarks.__main__")
