"""Does α stay informative? The training variants of issue 36 over seeds, with 95 % t intervals.

    python -m benchmarks.collapse [--cases minilm,fashion,vit] [--seeds 3] [--samples 200] [--out collapse-run]
                                  [--variants plain,align,...] [--json collapse.json]

For each case and training variant, ``--seeds`` heads are trained (``laya_cli.training.job.train``: what ``laya
train`` runs) and audited (``laya_cli.auditing.job.audit_job``: what ``laya audit --scope both --ablation bypass
--compare gradxact --samples N`` runs) on the same seeded test samples. Printed per case, each as mean [95 % t
interval over the seeds] (``laya_cli.stats.tinterval``):

- test accuracy (the whole test split);
- α's effective number of layers exp H(α) and entropy H (nats), per sample then averaged, and the top-layer spread
  (``laya_cli.auditing.collapse``), on the audited samples;
- faithfulness of α (Spearman against leave-one-layer-out effects) at head scope (mean ablation) and at network
  scope (the case's network removal: ``bypass`` on residual models), Grad×Act's at network scope, and the paired
  difference α − Grad×Act there;
- Deletion@1 of α at both scopes.

Cases: ``minilm`` (the real pretrained all-MiniLM-L6-v2, frozen, 2,000 WordNet noun glosses, ``--max-length 32``,
10 epochs: ``benchmarks/minilm.py``), ``fashion`` (real Fashion-MNIST, the paper's MLP trained end to end,
the docs' config; its blocks change width, so its network removal is ``mean``), ``vit`` (timm's
``vit_tiny_patch16_224`` at 32 pixels, **random initialisation, frozen** — no pretrained weights offline — on
Fashion-MNIST; a frozen random transformer, said so wherever it is reported). A ``concat`` head per seed gives the
accuracy reference ("the best head"). Runs are kept in ``--out`` (checkpoint and result per run) and reused.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

VARIANTS: dict[str, dict] = {
    "plain": {},
    "align": {"align": 1.0},
    "layer-norm": {"layer_norm": True},
    "dropout": {"layer_dropout": 0.3},
    "entropy": {"alpha_entropy": 0.3},
    "entropy-linear": {"alpha_entropy": 1.0, "alpha_entropy_schedule": "linear"},
    "tau": {"tau_start": 6.0},
    "ln+align": {"layer_norm": True, "align": 1.0},
    "ln+dropout+entropy": {"layer_norm": True, "layer_dropout": 0.3, "alpha_entropy": 0.3},
    "ln+align+entropy": {"layer_norm": True, "align": 1.0, "alpha_entropy": 0.3},
}
HEAD_OPTIONS = ("layer_norm",)  # the rest are TrainingSettings's


@dataclass
class Case:
    backbone: str
    dataset: str
    epochs: int
    network_ablation: str
    what: str
    extra: dict = field(default_factory=dict)  # TrainJobSettings fields


def cases(out: Path) -> dict[str, Case]:
    from benchmarks.minilm import minilm_dir, wordnet_csv

    model = minilm_dir(fetch=False)
    wordnet = Path(os.environ.get("LAYA_WORDNET_CSV", out / "wordnet-nouns-8.csv"))
    if model is not None and not wordnet.is_file():
        wordnet_csv(wordnet)
    found = {
        "minilm": Case(
            f"hf:{model}",
            f"csv:{wordnet}",
            10,
            "bypass",
            "all-MiniLM-L6-v2 (pretrained, frozen), WordNet nouns 8 classes, --max-length 32, 10 epochs",
            {"max_length": 32, "finetune": False},
        ),
        "fashion": Case(
            "mlp", "fashion-mnist", 50, "mean", "paper MLP end to end, Fashion-MNIST, <=50 epochs, patience 5"
        ),
        "vit": Case(
            "timm:vit_tiny_patch16_224",
            "fashion-mnist",
            10,
            "bypass",
            "timm vit_tiny_patch16_224 at 32 px, random init, frozen, Fashion-MNIST, 10 epochs",
            {"pretrained": False, "finetune": False, "input_size": 32},
        ),
    }
    if model is None:
        found.pop("minilm")
    return found


def request(case: Case, head: str, options: dict, seed: int, out: Path):
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    head_options = {k: v for k, v in options.items() if k in HEAD_OPTIONS}
    train_options = {k: v for k, v in options.items() if k not in HEAD_OPTIONS}
    # issue 36's variants, as measured then: no term unless one is named, and --align against the head's effects
    # (laya's defaults now give some kinds a network term: benchmarks.network_alignment measures those)
    train_options = {"align": 0.0, **train_options}
    train_options.setdefault("align_target", "head" if train_options["align"] else None)
    return TrainJobSettings(
        backbone=case.backbone,
        head=head,
        head_config=HeadSettings(**head_options),
        data=DataSettings(name=case.dataset, seed=seed),
        train=TrainingSettings(epochs=case.epochs, seed=seed, **train_options),
        out=str(out),
        restart=True,
        **case.extra,
    )


def measure(ckpt_path: Path, case: Case, samples: int) -> dict:
    """The audit of one checkpoint: α's collapse measures, faithfulness and Deletion@1 at both scopes."""
    from functools import partial

    from laya_cli.auditing.collapse import collapse_summary
    from laya_cli.auditing.job import audit_job
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model

    model = load_model(ckpt_path)
    settings = AuditSettings(ablation=case.network_ablation, ci=0, randomisation_samples=0).validate()
    load = partial(load_eval_data, model, samples=samples, seed=settings.seed, stream=True)
    result = audit_job(model, load, ["laya", "gradxact", "random"], settings, "both")
    alpha = result.samples["scores"]["laya"]
    summary = collapse_summary(alpha)
    head, net = result.methods, result.network.methods
    return {
        "test_accuracy": model.checkpoint["metrics"]["test_accuracy"],
        "epochs_run": model.checkpoint["metrics"]["epochs_run"],
        "effective_layers": summary["effective_layers_mean"],
        "entropy": summary["entropy_mean"],
        "top_layer_spread": summary["top_layer_spread"],
        "mean_alpha": [round(float(a), 4) for a in alpha.double().mean(0)],
        "faith_head": head["laya"].faithfulness,
        "faith_head_gradxact": head["gradxact"].faithfulness,
        "faith_net": net["laya"].faithfulness,
        "faith_net_gradxact": net["gradxact"].faithfulness,
        "d1_head": head["laya"].deletion_at_1,
        "d1_net": net["laya"].deletion_at_1,
        "undefined_head": head["laya"].undefined,
        "undefined_net": net["laya"].undefined,
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
    ckpt = folder / f"{variant}-{seed}.pt"
    head, options = ("concat", {}) if variant == "concat" else ("laya", VARIANTS[variant])
    started = time.perf_counter()
    with progress.enabled(False):
        ckpt_dict = train(request(case, head, options, seed, ckpt))
        trained = time.perf_counter() - started
        if head == "concat":
            result = {"test_accuracy": ckpt_dict["metrics"]["test_accuracy"]}
        else:
            result = measure(ckpt, case, samples)
    result.update(seconds_train=round(trained, 1), seconds=round(time.perf_counter() - started, 1))
    record.write_text(json.dumps(result))
    return result


COLUMNS = (
    ("test_accuracy", "test acc", 4),
    ("effective_layers", "eff. layers", 2),
    ("entropy", "H(α)", 3),
    ("top_layer_spread", "spread", 3),
    ("faith_head", "faith α head", 3),
    ("faith_net", "faith α net", 3),
    ("faith_net_gradxact", "faith G×A net", 3),
    ("net_minus_gradxact", "α − G×A net", 3),
    ("d1_head", "D@1 α head", 3),
    ("d1_net", "D@1 α net", 3),
)


def cell(values: list[float], digits: int) -> str:
    from laya_cli.stats.tinterval import t_interval

    t = t_interval(values)
    if t.n == 0:
        return "n/a"
    if math.isnan(t.low):
        return f"{t.mean:.{digits}f}"
    return f"{t.mean:.{digits}f} [{t.low:.{digits}f}, {t.high:.{digits}f}]"


def goals(results: dict[str, list[dict]]) -> list[str]:
    """Issue 36's goals per variant with α: ≥ 2 effective layers, test accuracy within 0.5 pp of the best head (the
    best mean over every row, concat included), α's network faithfulness ≥ Grad×Act's (the paired difference over
    seeds); "yes" on the mean, "(CI)" added where the 95 % interval clears the bar too."""
    from laya_cli.stats.tinterval import t_interval

    best = max(t_interval([r["test_accuracy"] for r in runs]).mean for runs in results.values() if runs)
    lines = [
        f"goals (best head: mean test accuracy {best:.4f}; yes = the mean meets it, CI = its 95 % interval does too):",
        "",
        "| variant | ≥ 2 effective layers | accuracy ≥ best − 0.5 pp | α ≥ Grad×Act (network) | all three |",
        "|---|---|---|---|---|",
    ]
    for variant, runs in results.items():
        if not runs or "effective_layers" not in runs[0]:
            continue
        checks = [
            (t_interval([r["effective_layers"] for r in runs]), 2.0),
            (t_interval([r["test_accuracy"] for r in runs]), best - 0.005),
            (t_interval([r["faith_net"] - r["faith_net_gradxact"] for r in runs]), 0.0),
        ]
        marks = [("yes" + (" (CI)" if t.low >= bar else "")) if t.mean >= bar else "no" for t, bar in checks]
        met = all(m != "no" for m in marks)
        lines.append(f"| {variant} | " + " | ".join(marks) + f" | {'**met**' if met else 'missed'} |")
    return lines


def table(case_name: str, case: Case, results: dict[str, list[dict]]) -> list[str]:
    """One Markdown table: a row per variant, each metric as mean [95 % t interval over seeds]; then the goals."""
    lines = [
        f"### {case_name}: {case.what}; network removal {case.network_ablation}",
        "",
        "| variant | seeds | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    for variant, runs in results.items():
        for r in runs:
            if "faith_net" in r:
                r["net_minus_gradxact"] = r["faith_net"] - r["faith_net_gradxact"]
        cells = [cell([r[k] for r in runs if k in r], d) if any(k in r for r in runs) else "–" for k, _, d in COLUMNS]
        lines.append(f"| {variant} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines + [""] + goals(results)


def main(argv=None) -> None:
    from benchmarks.say import say

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="minilm,fashion,vit")
    parser.add_argument("--variants", default=",".join(["concat", *VARIANTS]))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1337, 1338, … (the paper's first)")
    parser.add_argument("--samples", type=int, default=200, help="test samples audited at both scopes")
    parser.add_argument("--out", default="collapse-run", help="folder for the checkpoints and per-run results")
    parser.add_argument("--json", default=None, help="write every run's numbers here")
    parser.add_argument("--kept", action="store_true", help="only the runs already kept in --out (train nothing)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    known = cases(out)
    every: dict = {}
    for case_name in args.cases.split(","):
        if case_name not in known:
            say(f"skipped {case_name}: not available here (all-MiniLM-L6-v2 missing?)")
            continue
        case, results = known[case_name], {}  # variant -> its runs, one per seed
        for variant in args.variants.split(","):
            results[variant] = []
            for seed in range(1337, 1337 + args.seeds):
                if args.kept and not (out / case_name / f"{variant}-{seed}.json").is_file():
                    continue
                r = run_one(case_name, case, variant, seed, out, args.samples)
                say(f"{case_name} {variant} seed {seed}: " + json.dumps(r))
                results[variant].append(r)
            if not results[variant]:
                results.pop(variant)
        every[case_name] = results
        say("\n".join(table(case_name, case, results)) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1))


if __name__ == "__main__":
    main()
