"""``laya bench --task lm``: the LAYA head and the tuned lens of a causal language model trained with every seed
(and each ``--objective``: kl, ce), each run's held-out figures (``train_lm``'s: per layer the logit and tuned
lenses' KL to the model's final distribution and cross-entropy, LAYA's mean α, in bits per token; the LAYA head's
and the model's) and its per-token audit on the question ``laya audit`` asks of the checkpoint (faithfulness,
Deletion@1 per method, ``token_audit_job``), then each figure's mean and 95 % Student-t interval over the seeds
(``bench.seed_stats``).

Runs go to ``OUT/<text>-<model>-lm/<objective>-seed<S>.pt`` beside a ``.json`` record of the audit; a checkpoint
whose recorded training options match is reused (and its audit, when the audit options match too), so an
interrupted bench continues where it stopped. Each function takes the bench's one request, ``bench.BenchSettings``
(not imported: the language model's task, ``exporting.tasks``, calls this module)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..auditing.settings import AuditSettings
from ..backbones.lm import parse_device_map
from ..model.checkpoint import read_checkpoint
from ..runtime.declare import evolve, split_csv
from ..runtime.errors import LayaError, match_choice
from ..runtime.fileio import atomic_write_text, claim, json_safe, made_folders, strict_json
from .bench_stats import machine, seed_stats, slug
from .lm import resolved_lm_request, train_config, train_lm
from .settings import OBJECTIVES, TrainJobSettings

LM_BENCH_FORMAT = "laya-bench-lm"
LM_RECORD_FORMAT = "laya-bench-lm-run"
FIGURES = ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce", "alpha")
AUDIT_METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")
# The training options the bench's JSON shows (the rest are in each run's checkpoint)
BENCH_TRAIN = ("epochs", "batch_size", "lr", "block_size", "eval_tokens", "layer_dropout", "exit_aware", "patience",
               "device_map")  # fmt: skip


def lm_folder(bench) -> Path:
    """``OUT/<text>-<model>-lm``: where a language model's bench keeps its runs."""
    text = Path(bench.train.data.name.partition(":")[2].rstrip("/")).name or "text"
    return Path(bench.out).expanduser() / f"{slug(text)}-{slug(Path(bench.train.backbone).name)}-lm"


def run_request(bench, objective: str, seed: int) -> TrainJobSettings:
    """One run: the template with its objective, seed and checkpoint set."""
    req = bench.train
    lm, train, data = evolve(req.lm, objective=objective), evolve(req.train, seed=seed), evolve(req.data, seed=seed)
    out = str(lm_folder(bench) / f"{objective}-seed{seed}.pt")
    return evolve(req, lm=lm, train=train, data=data, out=out, command_line=None)


def audit_options(bench) -> dict:
    """What must match for a run's recorded audit to be reused (everything but the device)."""
    s = asdict(bench.audit)
    s.pop("device")
    # "scope": each run is audited on its checkpoint's question (audit_run); a record from before asked the head's
    asked = "question"
    return json.loads(strict_json({**s, "methods": bench.methods(), "samples": bench.audit_samples, "scope": asked}))


def check_lm_bench(bench):
    """A language model's bench, checked before its folder is made: the objectives by name, the corpus named, the
    training template resolved as each run resolves it, the device map and the audit's settings."""
    objectives = [match_choice("--objective", o.strip(), OBJECTIVES) for o in split_csv(bench.objectives)]
    if not objectives:
        raise LayaError(f"--objective: one or more of {', '.join(OBJECTIVES)} (comma list)")
    bench.objectives = list(dict.fromkeys(objectives))
    bench.train = resolved_lm_request(bench.train)  # a new template: the caller's is left as it is
    if bench.train.lm.device_map is not None:  # a bad map: one line before the bench folder is made
        parse_device_map(bench.train.lm.device_map)
    bench.audit.validate()
    bench.methods()
    return bench


# Where a run ran, not what it trained: a run trained on one device, or placed by --device-map, is reused by a bench
# on another (the placed model's figures are the whole one's: tests/test_lm_device_map.py)
PLACEMENT = ("device", "device_map", "out")


def _comparable(config: dict) -> dict:
    return {k: v for k, v in json.loads(strict_json(config)).items() if k not in PLACEMENT}


def _reusable(bench, req: TrainJobSettings) -> dict | None:
    """The run's checkpoint when it was trained with the same options (never with ``--redo``); one trained with
    other options is refused, as the classifiers' bench refuses it, rather than overwritten."""
    if bench.redo or not Path(req.out).is_file():
        return None
    ckpt = read_checkpoint(req.out)
    same_head = (ckpt.get("head") or {}).get("config") == req.head_config.to_dict()
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


def audit_run(bench, ckpt: dict) -> dict:
    """The per-token audit of one run's checkpoint that ``laya audit`` of it runs by default: the question α was
    trained on (auditing/question.py: a language model aligned by default, network scope with bypass), the removal
    given instead where ``--ablation`` was; its scope, accuracy and each method's figures at that scope."""
    from ..auditing.lm import token_audit_job
    from ..auditing.question import audit_scope_and_removal, checkpoint_question, given_or_changed
    from ..model.lm_heads import lm_from_checkpoint

    device = bench.train.train.device
    model = lm_from_checkpoint(ckpt, bench.train.lm.device_map).to(device)
    ablation = bench.audit.ablation if given_or_changed(bench.audit, "ablation", "mean") else None
    scope, removal = audit_scope_and_removal(checkpoint_question(ckpt), None, ablation)
    settings = AuditSettings(**{**asdict(bench.audit), "device": device, "ci": 0.0, "ablation": removal})
    doc = token_audit_job(model, bench.methods(), settings, scope, None, bench.audit_samples).to_dict()
    scored = doc["network"]["methods"] if scope == "network" else doc["methods"]  # both: the head's, as laya audit
    methods = {m: {k: v.get(k) for k in AUDIT_METRICS} for m, v in scored.items()}
    return {"scope": scope, "n_samples": doc["n_samples"], "accuracy": doc["accuracy"], "methods": methods}


def run_one(bench, objective: str, seed: int, ckpt: dict | None) -> dict:
    """One run: trained (or its checkpoint ``ckpt`` reused), audited (or its audit reused); its record."""
    req = run_request(bench, objective, seed)
    rec_path = Path(req.out).with_suffix(".json")
    trained, start = False, time.perf_counter()
    rec = _record(rec_path) if ckpt is not None else None
    if ckpt is None:
        ckpt, trained = train_lm(req), True
    train_seconds = time.perf_counter() - start if trained else (rec or {}).get("train_seconds")
    audit, audit_seconds = None, None
    if rec is not None and rec.get("audit_options") == audit_options(bench):
        audit, audit_seconds = rec.get("audit"), rec.get("audit_seconds")
    elif bench.audit_samples:
        start = time.perf_counter()
        audit, audit_seconds = audit_run(bench, ckpt), time.perf_counter() - start
    rec = {
        "format": LM_RECORD_FORMAT, "objective": objective, "seed": seed, "checkpoint": str(req.out),
        "trained": trained, "train_seconds": train_seconds, "epochs_run": len(ckpt.get("history") or []),
        "metrics": ckpt["metrics"], "audit_options": audit_options(bench), "audit": audit,
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


def run_lm_bench(bench, on_run: Callable[[dict, int, int], None] | None = None) -> dict:
    """Every (objective, seed) run trained and audited (or reused), then aggregated per objective; the JSON."""
    folder = lm_folder(check_lm_bench(bench))
    with made_folders(folder, "the bench folder"):  # a bench that fails leaves no folder it made
        claim(folder)  # one bench at a time in a folder
        return _run_lm_all(bench, folder, on_run)


def _run_lm_all(bench, folder: Path, on_run) -> dict:
    start, records = time.perf_counter(), []
    pairs = [(o, s) for o in bench.objectives for s in bench.seed_values]
    reused = [_reusable(bench, run_request(bench, o, s)) for o, s in pairs]  # a mismatch: before any training
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
        "bench": {"backbone": t.backbone, "dataset": t.data.name, "objectives": bench.objectives,
                  "seeds": bench.seed_values, "folder": str(folder), "layers": layers,
                  "train": {k: v for k, v in {**train_config(t), "exit_aware": t.train.exit_aware}.items()
                            if k in BENCH_TRAIN},
                  "audit": audit_options(bench)},
        "objectives": by_objective,
        "runs": [{k: r[k] for k in ("objective", "seed", "checkpoint", "trained", "train_seconds", "audit_seconds")}
                 for r in records],
        "wall_seconds": time.perf_counter() - start,
        "machine": machine(),
    })  # fmt: skip
