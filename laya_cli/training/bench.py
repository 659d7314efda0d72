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

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from ..auditing.registry import compared_by_default
from ..auditing.settings import AuditSettings
from ..runtime import distributed
from ..runtime.declare import (
    COUNT_MAX,
    SEED_MAX,
    STEPS_MAX,
    check_at_least,
    check_fields,
    evolve,
    refuse_other_task,
    setting,
)
from ..runtime.errors import LayaError, TrainingInterrupted, match_choice
from ..runtime.fileio import (
    atomic_write_text,
    check_writable,
    claim,
    file_sha256,
    json_safe,
    made_folders,
    strict_json,
)
from ..runtime.progress import log
from .bench_stats import asked_scope, machine, pair_with_laya, scored_methods, seed_stats, slug
from .settings import TrainJobSettings, diff_options

HEAD_ORDER = ("last", "concat", "scalarmix", "laya")
DEFAULT_HEADS = ",".join(HEAD_ORDER)
# Bench-only head names: a head kind trained with other options, compared as a head of its own.
VARIANTS = {"laya-aligned": "laya"}  # laya trained with --align (BenchSettings.align)
DEFAULT_COMPARE = compared_by_default("bench")  # ig,gradxact,contrib,global (the methods' records say)
LM_COMPARE = compared_by_default("lm-bench")  # a language model's bench audits α and Grad×Act unless --compare says
RECORD_FORMAT = "laya-bench-run"
RECORD_VERSION = 1
BENCH_FORMAT = "laya-bench"


def parse_heads(spec: str | Sequence[str]) -> list[str]:
    """Comma list of head kinds or VARIANTS (in the order given, duplicates dropped); unknown names suggest."""
    from ..model.heads import HEADS

    names = spec.split(",") if isinstance(spec, str) else list(spec)
    heads: list[str] = []
    for name in (n.strip() for n in names):
        if not name:
            continue
        name = match_choice("head", name, [*HEADS, *VARIANTS])
        if name not in heads:
            heads.append(name)
    if not heads:
        raise LayaError(f"--heads is empty: give one or more of {', '.join(HEAD_ORDER)}")
    return heads


def check_dataset_name(name: str) -> str:
    """The dataset's registered spelling (case-insensitive), checked without loading anything."""
    from ..data.datasets import dataset_name

    name = dataset_name(name)
    if name.startswith("folder:") and not name.partition(":")[2]:
        raise LayaError("--dataset folder:PATH needs a path")
    return name


@dataclass
class BenchSettings:
    """Every (head, seed) run is ``train`` with its head, seed and output path set, audited with ``audit``; a
    language model's bench (``train.task`` lm: training/bench_lm.py) runs every (objective, seed) instead."""

    PANEL: ClassVar[str] = "Bench"

    train: TrainJobSettings = field(default_factory=TrainJobSettings)  # the template (paper config by default)
    audit: AuditSettings = field(default_factory=AuditSettings)
    heads: list[str] = setting(
        "Comma list of heads to compare: last, concat, scalarmix, laya, laya-aligned (laya trained with --align).",
        factory=lambda: list(HEAD_ORDER),
        cli_type=str,
        command_default=DEFAULT_HEADS,
        task="classify",
        panel="Main",
    )
    align: float = setting(
        1.0,
        "λ for the laya-aligned head of --heads (a laya head trained with --align λ).",
        minimum=0,
        rule="0 or positive (positive for the laya-aligned head)",
        task="classify",
    )
    objectives: list[str] = setting(
        "The objectives trained, each with every seed: kl, ce or kl,ce (comma list).",
        factory=lambda: ["kl"],
        param="objective",
        cli_type=str,
        command_default="kl",
        task="lm",
    )
    seeds: int = setting(
        3,
        "Runs per head; run k uses seed --base-seed + k (init, shuffling, validation split).",
        minimum=1,
        panel="Main",
        maximum=STEPS_MAX,
    )
    base_seed: int = setting(1337, "Seed of the first run (1337: the paper config).", minimum=0, maximum=SEED_MAX)
    out: str = setting(
        "bench",
        "Output folder; runs go to OUT/<dataset>-<backbone>/ and finished ones are reused.",
        cli_type=Path,
        panel="Main",
    )
    compare: str | None = setting(
        None,
        "Methods audited besides laya and random (comma list, 'all' or ''; default ig,gradxact,contrib,global; a "
        "language model's: gradxact).",
    )
    audit_samples: int | None = setting(
        2000,
        "Audit this many test samples (the same seeded subset for every run; more than the test split = all; a "
        "language model's: held-out positions, 0 = no audit).",
        minimum=0,
        maximum=COUNT_MAX,
    )  # None: the whole test split
    redo: bool = setting(False, "Retrain and re-audit every run, even finished ones.")

    @property
    def dataset(self) -> str:
        return self.train.data.name

    @property
    def backbone(self) -> str:
        return self.train.backbone

    @property
    def device(self) -> str:
        return self.train.train.device

    @property
    def folder(self) -> Path:
        return Path(self.out).expanduser() / f"{slug(self.dataset)}-{slug(self.backbone)}"

    @property
    def seed_values(self) -> list[int]:
        return [self.base_seed + k for k in range(self.seeds)]

    def methods(self) -> list[str]:
        from ..auditing.names import parse_methods

        return parse_methods(self.compare)

    def audit_settings(self) -> AuditSettings:
        return AuditSettings(**{**asdict(self.audit), "device": self.device, "by_class": False})

    def train_request(self, head: str, seed: int) -> TrainJobSettings:
        from .defaults import resolved_request  # the backbones (torch): not at laya --help

        train = evolve(self.train.train, seed=seed, **({"align": self.align} if head == "laya-aligned" else {}))
        req = evolve(self.train, head=VARIANTS.get(head, head), data=evolve(self.train.data, seed=seed), train=train,
                     out=str(self.run_path(head, seed, ".pt")), resume=False)  # fmt: skip
        return resolved_request(req)  # as laya train resolves it, before its options are compared

    def run_path(self, head: str, seed: int, suffix: str) -> Path:
        return self.folder / f"{head}-seed{seed}{suffix}"

    def audit_options(self) -> dict:
        """What must match for a recorded audit to be reused (everything but the device)."""
        s = asdict(self.audit_settings())
        s.pop("device")
        s.pop("by_class")
        s.pop("internal_batch_size")  # a memory bound: same numbers either way
        # "scope": each run is audited on its checkpoint's question (asked_of); a record from before asked the head's
        asked = {"scope": "question"}
        return {**s, "metrics": list(s["metrics"]), "methods": self.methods(), "samples": self.audit_samples, **asked}

    def validate(self) -> BenchSettings:
        """The declared checks, a setting of the other task refused, then a classifier's bench's own checks (a
        language model's: ``bench_lm.check_lm_bench``)."""
        check_fields(self)
        if self.base_seed + self.seeds - 1 > SEED_MAX:
            raise LayaError(f"--base-seed {self.base_seed} with --seeds {self.seeds}: the last run's seed would pass "
                            f"{SEED_MAX:,}, the largest seed")  # fmt: skip
        check_fields(self.train)  # its task first: what the rest is checked against
        refuse_other_task(self, self.train.task)
        if self.compare is None:
            self.compare = LM_COMPARE if self.train.is_lm else DEFAULT_COMPARE
        if self.train.is_lm:
            return self
        if self.train.train.layer_dropout:
            raise LayaError("--layer-dropout: laya bench compares the heads under the paper's training (--task lm: "
                            "the language model's heads)")  # fmt: skip
        self.train = evolve(self.train, data=evolve(self.train.data, name=check_dataset_name(self.dataset)))
        self.heads = parse_heads(self.heads)
        check_at_least("--audit-samples", self.audit_samples)
        if "laya-aligned" in self.heads and not self.align > 0:
            raise LayaError(f"--align must be positive for the laya-aligned head, got {self.align}")
        self.train.validate()
        self.audit.validate()
        self.audit_settings().validate()
        self.methods()
        if self.audit.ablation == "mask" and any(VARIANTS.get(h, h) not in ("laya", "scalarmix") for h in self.heads):
            raise LayaError(
                "--ablation mask needs heads with layer weights (laya, scalarmix); "
                "use --ablation mean or zero to compare every head"
            )
        return self


def train_options(req: TrainJobSettings) -> dict:
    """The options of one training run that must match for it to be reused, as JSON would hold them."""
    return req.recorded_options()


def options_changes(recorded: dict, wanted: dict) -> list[str]:
    """How ``wanted`` differs from ``recorded`` training options. An option that a newer laya added
    (absent from the record) counts as a change only when it is set to something else than its default."""
    return diff_options(recorded, wanted, train_options(TrainJobSettings()))


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


def _train_run(bench: BenchSettings, head: str, seed: int) -> dict:
    """Train (or continue an interrupted training of) one run; returns its record (no audit yet)."""
    from .job import train
    from .loop import load_train_state

    req = bench.train_request(head, seed)
    options = train_options(req)
    if req.state_path.is_file() and not bench.redo:
        try:  # an interrupted training of this very run: continue from its last finished epoch
            load_train_state(req.state_path, req.fingerprint(), train_options(req))
            req = evolve(req, resume=True)
        except LayaError:
            log(f"{req.state_path} is a partial run with other options or unreadable: starting over", "yellow")
    if not req.resume:
        req.state_path.unlink(missing_ok=True)
    start = time.perf_counter()
    ckpt = train(req)
    seconds = time.perf_counter() - start
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "head": head,
        "seed": seed,
        "checkpoint": Path(req.out).name,
        "checkpoint_sha256": file_sha256(Path(req.out)),
        "train_options": options,
        "metrics": ckpt["metrics"],
        "train_seconds": seconds,
        "resumed": req.resume,
        "device": bench.device,
        "audit_options": None,
        "audit": None,
    }


def asked_of(bench: BenchSettings, ckpt: dict) -> tuple[str, str]:
    """The scope and removal ``laya audit`` of a run's checkpoint asks by default: the question its α was trained on
    (auditing/question.py: head and mean for a head trained only to predict), the removal given instead where
    ``--ablation`` was (as the language model's bench, ``bench_lm.audit_run``)."""
    from ..auditing.question import audit_scope_and_removal, checkpoint_question, given_or_changed

    ablation = bench.audit.ablation if given_or_changed(bench.audit, "ablation", "mean") else None
    return audit_scope_and_removal(checkpoint_question(ckpt), None, ablation)


def _audit_run(bench: BenchSettings, record: dict) -> dict:
    from functools import partial

    from ..auditing.job import audit_job
    from ..auditing.question import given_or_changed
    from ..auditing.settings import network_methods
    from ..model.checkpoint import read_checkpoint
    from ..model.evaldata import load_eval_data
    from ..model.laya_model import model_from_checkpoint

    path = bench.folder / record["checkpoint"]
    start = time.perf_counter()
    ckpt = read_checkpoint(path)
    model = model_from_checkpoint(ckpt)
    scope, removal = asked_of(bench, ckpt)
    data = partial(load_eval_data, model, samples=bench.audit_samples, seed=bench.audit.seed, device=bench.device,
                   use_cache=bench.train.use_cache)  # fmt: skip
    settings = evolve(bench.audit_settings(), ablation=removal)
    # the network scope without IG (a reference there) unless --compare named it, as laya audit's default
    network = network_methods(bench.methods(), given_or_changed(bench, "compare", DEFAULT_COMPARE))
    result = audit_job(model, data, bench.methods(), settings, scope, bench.train.use_cache, network_methods=network)
    result.settings.update({"model": str(path), "samples": bench.audit_samples, "scope": scope})
    record = dict(record)
    record["audit"] = result.to_dict()
    record["audit_options"] = bench.audit_options()
    record["audit_seconds"] = time.perf_counter() - start
    return record


def _reusable_training(bench: BenchSettings, head: str, seed: int, record: dict | None) -> bool:
    """Whether the run's checkpoint on disk can be reused; raise when it was made with other options."""
    ckpt = bench.run_path(head, seed, ".pt")
    if bench.redo or record is None or not ckpt.is_file():
        return False
    wanted = train_options(bench.train_request(head, seed))
    changes = options_changes(record.get("train_options") or {}, wanted)
    if changes:
        shown = "; ".join(changes[:4]) + (f"; … ({len(changes)} in all)" if len(changes) > 4 else "")
        raise LayaError(
            f"{ckpt} was trained with other options ({shown}); use another --out, or --redo to retrain every run"
        )
    if record.get("checkpoint_sha256") != file_sha256(ckpt):
        log(f"{ckpt} changed since it was recorded: retraining it", "yellow")
        return False
    return True


def run_one(bench: BenchSettings, head: str, seed: int) -> RunOutcome:
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


def aggregate(bench: BenchSettings, outcomes: list[RunOutcome]) -> dict:
    heads: dict[str, dict] = {}
    methods = bench.methods()
    for head in bench.heads:
        recs = [o.record for o in outcomes if o.head == head]
        metric = lambda k, recs=recs: seed_stats([r["metrics"][k] for r in recs])
        entry = {
            "runs": len(recs),
            "seeds": [r["seed"] for r in recs],
            "test_accuracy": metric("test_accuracy"),
            "test_macro_f1": metric("test_macro_f1"),
            "val_accuracy": metric("val_accuracy"),
            "epochs_run": metric("epochs_run"),
            "train_seconds": seed_stats([r.get("train_seconds") for r in recs]),
            "audit_seconds": seed_stats([r.get("audit_seconds") for r in recs]),
            "audit_accuracy": seed_stats([r["audit"]["accuracy"] for r in recs]),
            "audit_samples": recs[0]["audit"]["n_samples"] if recs else None,
            # the scope each run's audit asked (its checkpoint's question): one scope, or every one its seeds asked
            "audit_scope": _one_or_all([asked_scope(r["audit"]) for r in recs]),
            "methods": {},
        }
        for m in methods:
            per_run = [scored_methods(r["audit"])[m] for r in recs]
            available = all(p["available"] for p in per_run)
            entry["methods"][m] = {
                "available": available,
                "note": next((p["note"] for p in per_run if p.get("note")), None),
                "faithfulness": seed_stats([p["faithfulness"] for p in per_run]),
                "deletion@1": seed_stats([p["deletion@1"] for p in per_run]),
                "deletion@1_normalised": seed_stats([p["deletion@1_normalised"] for p in per_run]),
                "deletion@1_oracle": seed_stats([p["deletion@1_oracle"] for p in per_run]),
                "deletion@1_random": seed_stats([p["deletion@1_random"] for p in per_run]),
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
    pair_with_laya(heads, {h: [o.record for o in outcomes if o.head == h] for h in bench.heads})  # bench_stats.py
    return heads


def _one_or_all(values: list):
    """The value every run shares, else the list of each run's (in the runs' order); None without runs."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else (distinct or None)


@dataclass
class BenchResult:
    request: BenchSettings
    heads: dict
    runs: list[dict]
    reused: int  # runs read back whole (training and audit)
    reaudited: int  # runs whose checkpoint was reused but audit redone
    wall_seconds: float

    def to_dict(self) -> dict:
        b = self.request
        t = b.train
        return json_safe(
            {
                "format": BENCH_FORMAT,
                "version": RECORD_VERSION,
                "bench": {
                    "dataset": b.dataset,
                    "backbone": b.backbone,
                    "heads": list(b.heads),
                    "seeds": b.seed_values,
                    "base_seed": b.base_seed,
                    "folder": str(b.folder),
                    "data_dir": t.data.data_dir,
                    "head_config": t.head_config.to_dict(),
                    "train": {
                        "epochs": t.train.epochs,
                        "batch_size": t.train.batch_size,
                        "lr": t.train.lr,
                        "patience": t.train.patience,
                        "layers": list(t.layers),
                        "pool": t.pool,
                        "pretrained": t.pretrained,
                        "weights": t.weights,
                        "finetune": t.finetune,
                    },
                    "audit": b.audit_options(),
                    "device": b.device,
                },
                "heads": self.heads,
                "runs": self.runs,
                "reused": self.reused,
                "reaudited": self.reaudited,
                "wall_seconds": self.wall_seconds,
                "compute_seconds": sum(
                    (r.get("train_seconds") or 0) + (r.get("audit_seconds") or 0) for r in self.runs
                ),
                "machine": machine(),
            }
        )

    def to_json(self) -> str:
        return strict_json(self.to_dict())


def run_bench(bench: BenchSettings, on_run: Callable[[RunOutcome, int, int], None] | None = None) -> BenchResult:
    """A classifier's bench: train and audit every (head, seed) run that is not already finished, then aggregate
    (a language model's, ``--task lm``, is ``bench_lm.run_lm_bench``'s: the request's task chooses,
    ``exporting.tasks``)."""
    bench.validate()
    if distributed.active() or distributed.env_world_size() > 1:
        raise LayaError(
            "laya bench runs in one process, not under torchrun; run it with plain `laya bench` "
            "(use torchrun for single `laya train`/`laya audit` runs)"
        )
    with made_folders(bench.folder, "the bench folder"):  # a bench that fails leaves no folder it made
        check_writable(bench.folder / "probe")
        claim(bench.folder)  # one bench at a time in a folder
        return _run_all(bench, on_run)


def _run_all(bench: BenchSettings, on_run) -> BenchResult:
    """Every (head, seed) run in the bench's folder, trained and audited or reused, and their aggregate."""
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
                f"in {bench.folder}); run the same command again to continue"
            ) from None
        outcomes.append(outcome)
        if on_run:
            on_run(outcome, i, len(pairs))
    reused = sum(1 for o in outcomes if not o.trained and not o.audited)
    reaudited = sum(1 for o in outcomes if not o.trained and o.audited)
    runs = []
    for o in outcomes:
        r = o.record
        runs.append(
            {
                "head": o.head,
                "seed": o.seed,
                "checkpoint": str(bench.folder / r["checkpoint"]),
                "record": str(bench.run_path(o.head, o.seed, ".json")),
                "reused": not o.trained,
                "reaudited": (not o.trained) and o.audited,
                **{
                    k: r["metrics"][k]
                    for k in ("test_accuracy", "test_macro_f1", "val_accuracy", "epochs_run", "best_epoch")
                },
                "train_seconds": r.get("train_seconds"),
                "audit_seconds": r.get("audit_seconds"),
                "audit_scope": asked_scope(r["audit"]),
            }
        )
    return BenchResult(bench, aggregate(bench, outcomes), runs, reused, reaudited, time.perf_counter() - start)


def _is_finished(bench: BenchSettings, head: str, seed: int) -> bool:
    """A run that will be read back whole (no training, no audit), without raising."""
    if bench.redo:
        return False
    rec_path, ckpt = bench.run_path(head, seed, ".json"), bench.run_path(head, seed, ".pt")
    if not (rec_path.is_file() and ckpt.is_file()):
        return False
    rec = _read_record(rec_path)
    return (
        rec is not None
        and not options_changes(rec.get("train_options") or {}, train_options(bench.train_request(head, seed)))
        and rec.get("audit") is not None
        and rec.get("audit_options") == bench.audit_options()
    )
