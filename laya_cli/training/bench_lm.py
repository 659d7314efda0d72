"""``laya bench --task lm``: the LAYA head and the tuned lens of a causal language model trained with every seed
(and each ``--objective``: kl, ce), each run's held-out figures (``train_lm``'s: per layer the logit and tuned
lenses' KL to the model's final distribution and cross-entropy, LAYA's mean α, in bits per token; the LAYA head's
and the model's) and its per-token audit at head scope (faithfulness, Deletion@1 per method, ``token_audit_job``),
then each figure's mean and 95 % Student-t interval over the seeds (``bench.seed_stats``).

Runs go to ``OUT/<text>-<model>-lm/<objective>-seed<S>.pt`` beside a ``.json`` record of the audit; a checkpoint
whose recorded training options match is reused (and its audit, when the audit options match too), so an
interrupted bench continues where it stopped."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..backbones.causal import parse_device_map
from ..model.checkpoint import read_checkpoint
from ..runtime.config import AuditSettings, check_at_least
from ..runtime.errors import LayaError, match_choice
from ..runtime.fileio import atomic_write_text, json_safe, strict_json
from .bench import machine, seed_stats, slug
from .lm import OBJECTIVES, LMRequest, train_config, train_lm

LM_BENCH_FORMAT = "laya-bench-lm"
LM_RECORD_FORMAT = "laya-bench-lm-run"
FIGURES = ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce", "alpha")
AUDIT_METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")


@dataclass
class LMBenchRequest:
    """Every (objective, seed) run is ``train`` with its objective, seed and output set; audited at head scope on
    ``audit_samples`` held-out positions (0: no audit)."""

    train: LMRequest
    objectives: list[str] = field(default_factory=lambda: ["kl"])
    seeds: int = 3
    base_seed: int = 1337
    out: str = "bench"
    compare: str = "gradxact"
    audit: AuditSettings = field(default_factory=AuditSettings)
    audit_samples: int = 2000
    redo: bool = False

    @property
    def folder(self) -> Path:
        text = Path(self.train.dataset.partition(":")[2].rstrip("/")).name or "text"
        return Path(self.out).expanduser() / f"{slug(text)}-{slug(Path(self.train.backbone).name)}-lm"

    @property
    def seed_values(self) -> list[int]:
        return [self.base_seed + k for k in range(self.seeds)]

    def methods(self) -> list[str]:
        from ..auditing.names import parse_methods

        return parse_methods(self.compare)

    def run_request(self, objective: str, seed: int) -> LMRequest:
        req = copy.deepcopy(self.train)
        req.objective, req.seed, req.out = objective, seed, self.folder / f"{objective}-seed{seed}.pt"
        req.command_line = None
        return req

    def audit_options(self) -> dict:
        s = asdict(self.audit)
        s.pop("device")
        return json.loads(strict_json({**s, "methods": self.methods(), "samples": self.audit_samples}))

    def validate(self) -> LMBenchRequest:
        objectives = [match_choice("--objective", o.strip(), OBJECTIVES) for o in self.objectives if o.strip()]
        if not objectives:
            raise LayaError(f"--objective: one or more of {', '.join(OBJECTIVES)} (comma list)")
        self.objectives = list(dict.fromkeys(objectives))
        check_at_least("--seeds", self.seeds)
        check_at_least("--audit-samples", self.audit_samples, 0)
        if not self.train.dataset.startswith("text:") or not self.train.dataset.partition(":")[2]:
            raise LayaError(f"--task lm reads a text corpus: --dataset text:PATH, not {self.train.dataset}")
        if self.train.device_map is not None:  # a bad map: one line before the bench folder is made
            parse_device_map(self.train.device_map)
        self.audit.validate()
        self.methods()
        return self


# Where a run ran, not what it trained: a run trained on one device, or placed by --device-map, is reused by a bench
# on another (the placed model's figures are the whole one's: tests/test_lm_device_map.py)
PLACEMENT = ("device", "device_map", "out")


def _comparable(config: dict) -> dict:
    return {k: v for k, v in json.loads(strict_json(config)).items() if k not in PLACEMENT}


def _reusable(bench: LMBenchRequest, req: LMRequest) -> dict | None:
    """The run's checkpoint when it was trained with the same options (never with ``--redo``); one trained with
    other options is refused, as the classifiers' bench refuses it, rather than overwritten."""
    if bench.redo or not Path(req.out).is_file():
        return None
    ckpt = read_checkpoint(req.out)
    same_head = (ckpt.get("head") or {}).get("config") == req.head.to_dict()
    same = _comparable(ckpt.get("train_config") or {}) == _comparable(train_config(req))
    if not (same and same_head and ckpt.get("task") == "lm"):
        raise LayaError(f"{req.out} was trained with other options: --redo retrains every run, or give another --out")
    return ckpt


def _record(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("format") == LM_RECORD_FORMAT else None


def audit_run(bench: LMBenchRequest, ckpt: dict) -> dict:
    """The head-scope per-token audit of one run's checkpoint: accuracy and each method's figures."""
    from ..auditing.tokens import token_audit_job
    from ..model.lenses import lens_model_from_checkpoint

    device = bench.train.device
    model = lens_model_from_checkpoint(ckpt, bench.train.device_map).to(device)
    settings = AuditSettings(**{**asdict(bench.audit), "device": device, "ci": 0.0})
    doc = token_audit_job(model, bench.methods(), settings, "head", None, bench.audit_samples).to_dict()
    methods = {m: {k: v.get(k) for k in AUDIT_METRICS} for m, v in doc["methods"].items()}
    return {"n_samples": doc["n_samples"], "accuracy": doc["accuracy"], "methods": methods}


def run_one(bench: LMBenchRequest, objective: str, seed: int, ckpt: dict | None) -> dict:
    """One run: trained (or its checkpoint ``ckpt`` reused), audited (or its audit reused); its record."""
    req = bench.run_request(objective, seed)
    rec_path = Path(req.out).with_suffix(".json")
    trained, start = False, time.perf_counter()
    rec = _record(rec_path) if ckpt is not None else None
    if ckpt is None:
        ckpt, trained = train_lm(req), True
    train_seconds = time.perf_counter() - start if trained else (rec or {}).get("train_seconds")
    audit, audit_seconds = None, None
    if rec is not None and rec.get("audit_options") == bench.audit_options():
        audit, audit_seconds = rec.get("audit"), rec.get("audit_seconds")
    elif bench.audit_samples:
        start = time.perf_counter()
        audit, audit_seconds = audit_run(bench, ckpt), time.perf_counter() - start
    rec = {
        "format": LM_RECORD_FORMAT, "objective": objective, "seed": seed, "checkpoint": str(req.out),
        "trained": trained, "train_seconds": train_seconds, "epochs_run": len(ckpt.get("history") or []),
        "metrics": ckpt["metrics"], "audit_options": bench.audit_options(), "audit": audit,
        "audit_seconds": audit_seconds,
    }  # fmt: skip
    atomic_write_text(rec_path, strict_json(json_safe(rec)))
    return rec


def aggregate(records: list[dict], methods: list[str]) -> dict:
    """The runs of one objective: every held-out figure and audit figure as ``seed_stats`` over the seeds, in the
    shape of one checkpoint's ``metrics`` (``layers``, ``heads``) so the same table renders both."""
    ms = [r["metrics"] for r in records]
    layers = [{k: seed_stats([m["layers"][i][k] for m in ms]) for k in FIGURES} for i in range(len(ms[0]["layers"]))]
    heads = {h: {k: seed_stats([m["heads"][h][k] for m in ms]) for k in ("kl", "ce")} for h in ("laya", "last")}
    audited = [r["audit"] for r in records if r.get("audit")]
    audit = {
        m: {k: seed_stats([a["methods"][m][k] for a in audited if m in a["methods"]]) for k in AUDIT_METRICS}
        for m in methods
    }
    return {
        "runs": len(records), "seeds": [r["seed"] for r in records], "tokens": ms[0]["tokens"], "layers": layers,
        "heads": heads, "audit": audit if audited else None,
        "audit_samples": audited[0]["n_samples"] if audited else 0,
        "audit_accuracy": seed_stats([a["accuracy"] for a in audited]),
        "epochs_run": seed_stats([r["epochs_run"] for r in records]),
        "train_seconds": seed_stats([r.get("train_seconds") for r in records]),
    }  # fmt: skip


def run_lm_bench(bench: LMBenchRequest, on_run: Callable[[dict, int, int], None] | None = None) -> dict:
    """Every (objective, seed) run trained and audited (or reused), then aggregated per objective; the JSON."""
    bench.validate()
    try:
        bench.folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LayaError(f"cannot create the bench folder {bench.folder}: {e.strerror or e}") from None
    start, records = time.perf_counter(), []
    pairs = [(o, s) for o in bench.objectives for s in bench.seed_values]
    reused = [_reusable(bench, bench.run_request(o, s)) for o, s in pairs]  # a mismatch: before any training
    for i, ((objective, seed), ckpt) in enumerate(zip(pairs, reused), 1):
        records.append(run_one(bench, objective, seed, ckpt))
        if on_run:
            on_run(records[-1], i, len(pairs))
    layers = list(read_checkpoint(records[0]["checkpoint"])["layers"])
    by_objective = {
        o: aggregate([r for r in records if r["objective"] == o], bench.methods()) for o in bench.objectives
    }
    t = bench.train
    return json_safe({
        "format": LM_BENCH_FORMAT, "task": "lm",
        "bench": {"backbone": t.backbone, "dataset": t.dataset, "objectives": bench.objectives,
                  "seeds": bench.seed_values, "folder": str(bench.folder), "layers": layers,
                  "train": {k: getattr(t, k) for k in ("epochs", "batch_size", "lr", "block_size", "eval_tokens",
                                                       "layer_dropout", "exit_aware", "patience",
                                                       "device_map")},
                  "audit": bench.audit_options()},
        "objectives": by_objective,
        "runs": [{k: r[k] for k in ("objective", "seed", "checkpoint", "trained", "train_seconds", "audit_seconds")}
                 for r in records],
        "wall_seconds": time.perf_counter() - start,
        "machine": machine(),
    })  # fmt: skip
