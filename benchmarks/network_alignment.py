"""Does ranking α against network-scope effects (``align_target="network"``) make it a network-scope account?

    python -m benchmarks.network_alignment [--cases demo,bert] [--variants plain,head,net] [--seeds 1]
                                           [--samples 0] [--out netalign-run] [--json F] [--kept]

For each case and variant, ``--seeds`` heads are trained (``laya_cli.training.job.train``, what ``laya train`` runs,
with ``align_target`` passed as the keyword the CLI's ``--align-target`` will set) and audited at network scope
(``laya_cli.auditing.job.audit_job``: what ``laya audit M --scope network --compare gradxact,atp [--ablation A]``
runs, A the case's removal) on the test split (``--samples 0``: all of it). Printed per case, each as mean [95 % t
interval over the seeds]: test accuracy, α's effective layers on the test split (the checkpoint's, what ``laya info``
reads), network-scope faithfulness of α, Grad×Act and AtP, α − AtP (paired per seed), training seconds per epoch
and that time over the plain variant's (same seeds).

Cases:
  demo    ``make demo``: the paper MLP trained end to end on scikit-learn's digits, laya's defaults (≤ 50 epochs,
          patience 5); its blocks change width, so the network removal is ``mean``.
  bert    a 4-layer BERT (hidden 64) built from a config, random initialisation, **frozen**, on 2,000 WordNet noun
          glosses of 8 classes (Debian ``wordnet-base``), ``--max-length 32``, 10 epochs; removal ``bypass``.
  frozen-mlp  the paper MLP, random initialisation, frozen (``--frozen``), on digits; removal ``mean``.
Runs are kept in ``--out`` and reused; ``--kept`` prints the tables from kept runs only.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

VARIANTS: dict[str, dict] = {
    "plain": {},
    "head": {"align": 1.0},
    "net": {"align": 1.0, "align_target": "network"},
    "net-3": {"align": 3.0, "align_target": "network"},
    "head+ln": {"align": 1.0, "layer_norm": True},
    "net+ln": {"align": 1.0, "align_target": "network", "layer_norm": True},
    "head+ent": {"align": 1.0, "alpha_entropy": 0.3},
    "net+ent": {"align": 1.0, "align_target": "network", "alpha_entropy": 0.3},
}
HEAD_OPTIONS = ("layer_norm",)
KEYWORDS = ("align_target",)  # train()'s keywords until TrainConfig has the field


@dataclass
class Case:
    backbone: str
    dataset: str
    epochs: int
    removal: str  # the network-scope removal the target and the audit use
    what: str
    extra: dict = field(default_factory=dict)  # TrainRequest fields
    patience: int = 5


def cases(out: Path) -> dict[str, Case]:
    found = {
        "demo": Case("mlp", "digits", 50, "mean", "make demo: paper MLP end to end, digits, <=50 epochs, patience 5"),
        "frozen-mlp": Case(
            "mlp", "digits", 50, "mean", "paper MLP, random init, frozen, digits, <=50 epochs", {"finetune": False}
        ),
    }
    bert = _bert_case(out)
    if bert is not None:
        found["bert"] = bert
    return found


def _bert_case(out: Path) -> Case | None:
    """The frozen random BERT on WordNet glosses; None without WordNet or transformers."""
    try:
        import transformers
    except ImportError:
        return None
    from benchmarks.minilm import wordnet_csv
    from benchmarks.text import SMALL

    csv = out / "wordnet-nouns-8.csv"
    if not csv.is_file() and wordnet_csv(csv) is None:
        return None
    model = out / "bert"
    if not (model / "config.json").is_file():
        import torch

        torch.manual_seed(0)
        transformers.AutoModel.from_config(
            transformers.BertConfig(max_position_embeddings=64, **SMALL)
        ).save_pretrained(model)
    what = "BERT 4 layers, hidden 64, random init, frozen; WordNet nouns 8 classes, --max-length 32, 10 epochs"
    return Case(f"hf:{model}", f"csv:{csv}", 10, "bypass", what, {"max_length": 32, "finetune": False})


def request(case: Case, options: dict, seed: int, out: Path):
    from laya_cli.runtime.config import DataRequest, HeadConfig, TrainConfig, TrainRequest

    head = {k: v for k, v in options.items() if k in HEAD_OPTIONS}
    train = {k: v for k, v in options.items() if k not in HEAD_OPTIONS + KEYWORDS}
    return TrainRequest(
        backbone=case.backbone,
        head="laya",
        head_config=HeadConfig(**head),
        data=DataRequest(name=case.dataset, seed=seed),
        train=TrainConfig(epochs=case.epochs, patience=case.patience, seed=seed, **train),
        out=str(out),
        restart=True,
        **case.extra,
    )


def measure(ckpt_path: Path, case: Case, samples: int) -> dict:
    """The network-scope audit of one checkpoint (``--scope network --compare gradxact,atp --ablation removal``)."""
    from functools import partial

    from laya_cli.auditing.job import audit_job
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model
    from laya_cli.runtime.config import AuditSettings

    model = load_model(ckpt_path)
    settings = AuditSettings(ablation=case.removal, ci=0, randomisation_samples=0).validate()
    load = partial(load_eval_data, model, samples=samples or None, seed=settings.seed, stream=True)
    net = audit_job(model, load, ["laya", "gradxact", "atp", "random"], settings, "network").network.methods
    metrics = model.checkpoint["metrics"]
    return {
        "test_accuracy": metrics["test_accuracy"],
        "epochs_run": metrics["epochs_run"],
        "effective_layers": metrics["alpha_collapse"]["effective_layers_mean"],
        "faith_net": net["laya"].faithfulness,
        "faith_net_gradxact": net["gradxact"].faithfulness,
        "faith_net_atp": net["atp"].faithfulness,
        "faith_net_random": net["random"].faithfulness,
        "d1_net": net["laya"].deletion_at_1,
        "align_removal": model.checkpoint["train_config"].get("align_removal"),
    }


def run_one(case_name: str, case: Case, variant: str, seed: int, out: Path, samples: int) -> dict:
    """Train (unless kept) and audit one head; the result is kept beside its checkpoint."""
    from laya_cli.runtime import progress
    from laya_cli.training.job import train

    folder = out / case_name
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / f"{variant}-{seed}.json"
    if record.is_file():
        return json.loads(record.read_text())
    ckpt, options = folder / f"{variant}-{seed}.pt", VARIANTS[variant]
    keywords = {k: v for k, v in options.items() if k in KEYWORDS}
    with progress.enabled(False):
        started = time.perf_counter()
        trained = train(request(case, options, seed, ckpt), **keywords)
        seconds = time.perf_counter() - started
        result = measure(ckpt, case, samples)
    epoch_seconds = sum(r["seconds"] for r in trained["history"]) / len(trained["history"])
    result.update(seconds_train=round(seconds, 1), seconds_per_epoch=round(epoch_seconds, 3))
    record.write_text(json.dumps(result))
    return result


COLUMNS = (
    ("test_accuracy", "test acc", 4),
    ("effective_layers", "eff. layers", 2),
    ("faith_net", "faith α net", 3),
    ("faith_net_gradxact", "faith G×A net", 3),
    ("faith_net_atp", "faith AtP net", 3),
    ("minus_atp", "α − AtP", 3),
    ("seconds_per_epoch", "s/epoch", 2),
    ("time_ratio", "time / plain", 2),
)


def cell(values: list[float], digits: int) -> str:
    import math

    from laya_cli.stats.tinterval import t_interval

    t = t_interval(values)
    if t.n == 0:
        return "n/a"
    if math.isnan(t.low):
        return f"{t.mean:.{digits}f}"
    return f"{t.mean:.{digits}f} [{t.low:.{digits}f}, {t.high:.{digits}f}]"


def table(case_name: str, case: Case, results: dict[str, dict[int, dict]]) -> list[str]:
    """One Markdown table: a row per variant, each metric as mean [95 % t interval over seeds]."""
    plain = results.get("plain", {})
    lines = [
        f"### {case_name}: {case.what}; network removal {case.removal}",
        "",
        "| variant | seeds | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    for variant, runs in results.items():
        for seed, r in runs.items():
            r["minus_atp"] = r["faith_net"] - r["faith_net_atp"]
            if seed in plain:
                r["time_ratio"] = r["seconds_per_epoch"] / plain[seed]["seconds_per_epoch"]
        rows = list(runs.values())
        cells = [cell([r[k] for r in rows if k in r], d) if any(k in r for r in rows) else "–" for k, _, d in COLUMNS]
        lines.append(f"| {variant} | {len(rows)} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> None:
    from benchmarks.say import say

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="demo,bert")
    parser.add_argument("--variants", default="plain,head,net")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1337, 1338, … (laya's default first)")
    parser.add_argument("--samples", type=int, default=0, help="test samples audited (0: the whole test split)")
    parser.add_argument("--out", default="netalign-run", help="folder for the checkpoints and per-run results")
    parser.add_argument("--json", default=None, help="write every run's numbers here")
    parser.add_argument("--kept", action="store_true", help="only the runs already kept in --out (train nothing)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    known, every = cases(out), {}
    for case_name in args.cases.split(","):
        if case_name not in known:
            say(f"skipped {case_name}: not available here (WordNet or transformers missing?)")
            continue
        case, results = known[case_name], {}
        for variant in args.variants.split(","):
            results[variant] = {}
            for seed in range(1337, 1337 + args.seeds):
                if args.kept and not (out / case_name / f"{variant}-{seed}.json").is_file():
                    continue
                r = run_one(case_name, case, variant, seed, out, args.samples)
                say(f"{case_name} {variant} seed {seed}: " + json.dumps(r))
                results[variant][seed] = r
            if not results[variant]:
                results.pop(variant)
        every[case_name] = results
        say("\n".join(table(case_name, case, results)) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1))


if __name__ == "__main__":
    main()
