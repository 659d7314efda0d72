"""``--align λ --align-target network`` on a causal language model, side by side with the plain head: per-token
network-scope faithfulness of α against AtP and Grad×Act, effective layers, held-out CE, the early-exit table.

    python -m benchmarks.lm_align --model DIR --corpus DIR [--out DIR] [--variants plain,rank,both] [--seeds 1337]
                                  [--epochs 1] [--batch-size 128] [--objective kl] [--layer-dropout 0.3]
                                  [--samples 2000] [--exit-tokens 20000] [--align 1] [--jobs 1]

DIR is a ``save_pretrained`` causal LM (``python -m benchmarks.causal_lm``) and its corpus (train.txt/test.txt).
Per variant and seed, each a ``laya`` subprocess, timed: ``train --task lm`` (``default``: laya's defaults;
plain: ``--align 0 --exit-aware 0``; ``rank``/``both``/``distill``:
``--align λ --align-target network --align-loss rank|both|distill``, λ from ``--align`` or the name: ``both-3``;
``…+head``: ``--align-target both``, the head's own effects ranked too;
``…+trunc``: also ``--exit-aware W``, the head trained truncated at random depths too, W from ``--trunc-weight``;
``…+upd``, last: ``--reads updates``, the head weighs the blocks' updates h_i − h_{i−1})
→ ``info --json`` → ``audit --scope both --compare laya,gradxact,atp`` → ``depth``. A run whose checkpoint (or
whose three JSON files) exist is reused. Printed: one row per run, the train-time ratio to the plain run of its
seed, then the goals: α's network faithfulness ≥ AtP's, and the α-guided exit ≥ 20 % of layers at ≤ 1 % CE and
ahead of the confidence exit (each exit's best point within 1 % of the model's cross-entropy, ``laya depth``'s
``best_vs_model``; "own full head": within 1 % of the head's own full-depth prediction); with more than one
seed, a row per variant: mean [95 % t interval over seeds], α − AtP
and α-exit − p_max-exit paired within each run. ``--jobs N`` runs N (variant, seed) runs at once (a GPU has room;
2 CPU cores do not).
``--cost-steps N`` instead times N training steps without and with the term on the same batches, interleaved
(``step_cost``: the term's cost, free of the load a shared machine puts on whole runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .say import say

LOSSES = ("rank", "both", "distill")  # a variant: plain, or LOSS, or LOSS-λ (rank-3: --align 3 --align-loss rank)
TRUNCATED = "+trunc"  # …+trunc: also --exit-aware (random truncation; --trunc-weight W), e.g. rank+trunc
WITH_HEAD = "+head"  # LOSS[-λ]+head: --align-target both (the head's own term added), e.g. rank-0.3+head+trunc
UPDATES = "+upd"  # any variant, last: --reads updates (the head weighs the blocks' updates), e.g. rank+trunc+upd
# Every variant pins what it names (plain: --align 0 --exit-aware 0 --reads states), now that --task lm has
# defaults of all three; "default" is laya's own defaults, no option given.


def variant_options(variant: str, default_align: str, trunc_weight: str = "1") -> tuple[str, ...]:
    """``laya train``'s options of one variant name, what the head reads pinned too (``default``: none)."""
    base = variant.removesuffix(UPDATES)
    reads = ("--reads", "updates" if base != variant else "states")
    if base == "default":
        return reads if base != variant else ()
    return (*named_options(base, default_align, trunc_weight), *reads)


def named_options(variant: str, default_align: str, trunc_weight: str) -> tuple[str, ...]:
    base = variant.removesuffix(TRUNCATED)
    truncated = ("--exit-aware", trunc_weight if base != variant else "0")
    if base == "plain":
        return ("--align", "0", *truncated)
    network = base.removesuffix(WITH_HEAD)
    target = "both" if network != base else "network"
    loss, _, weight = network.partition("-")
    if loss not in LOSSES:
        raise SystemExit(
            f"variant {variant!r}: default, plain, or one of {', '.join(LOSSES)} with an optional -λ, then +head, "
            "then +trunc, then +upd"
        )
    return ("--align", weight or default_align, "--align-target", target, "--align-loss", loss, *truncated)


def laya(*args: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "laya_cli", *args], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"laya {args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def run(a, variant: str, seed: int) -> dict:
    out = a.out / f"{variant}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    ckpt, info, audit, depth = (out / n for n in ("lm.pt", "info.json", "audit.json", "depth.json"))
    options = variant_options(variant, a.align, a.trunc_weight)
    seconds = None
    finished = all(f.is_file() for f in (info, audit, depth))  # a run read back from its JSON files alone
    if not ckpt.is_file() and not finished:
        seconds = laya("train", "--task", "lm", "--backbone", f"hf:{a.model}", "--dataset", f"text:{a.corpus}",
                       "--epochs", a.epochs, "--objective", a.objective, "--layer-dropout", a.layer_dropout,
                       "--block-size", a.block_size, "--batch-size", a.batch_size, "--seed", str(seed), *options,
                       "--out", str(ckpt), "--quiet")  # fmt: skip
        (out / "train_seconds.json").write_text(json.dumps(seconds))
    if not finished:
        info.write_text(subprocess.run([sys.executable, "-m", "laya_cli", "info", str(ckpt), "--json"],
                                       capture_output=True, text=True, check=True).stdout)  # fmt: skip
    if not audit.is_file():
        laya("audit", str(ckpt), "--scope", "both", "--compare", "laya,gradxact,atp", "--samples", a.samples,
             "--json", str(audit), "--quiet")  # fmt: skip
    if not depth.is_file():
        laya("depth", str(ckpt), "--samples", a.exit_tokens, "--json", str(depth))
    timed = out / "train_seconds.json"
    seconds = json.loads(timed.read_text()) if timed.is_file() else None
    meta, doc, exits = (json.loads(f.read_text()) for f in (info, audit, depth))
    net = doc["network"]["methods"]
    saving = lambda p, which="best_vs_model": (exits[which].get(p) or {}).get("saving", 0.0)  # noqa: E731
    return {
        "variant": variant, "seed": seed, "train_s": seconds,
        "ce": meta["metrics"]["heads"]["laya"]["ce"], "model_ce": meta["metrics"]["heads"]["last"]["ce"],
        "alpha_last": meta["metrics"]["layers"][-1]["alpha"],
        "effective": (doc.get("alpha_collapse") or {}).get("effective_layers_mean"),
        **{f"net_{m}": net[m]["faithfulness"] for m in ("laya", "atp", "gradxact")},
        "head_laya": doc["methods"]["laya"]["faithfulness"],
        "exit_alpha": saving("alpha_mass"), "exit_pmax": saving("p_max"), "exit_tuned": saving("tuned_p_max"),
        "exit_alpha_own": saving("alpha_mass", "best"), "exit_oracle": exits["oracle"]["saving"],
    }  # fmt: skip


def attempt(a, variant: str, seed: int) -> dict | None:
    """One run; a failed one is said (its laya output) and left out of the tables, so the others still report."""
    try:
        return run(a, variant, seed)
    except SystemExit as failed:
        say(f"{variant} seed {seed}: {failed}")
        return None


def step_cost(a, steps: int) -> None:
    """Seconds per training step without and with the term on the same batches, interleaved (plain, term, plain,
    …, so a shared machine's load falls on both alike): the term's cost, measured in-process."""
    import torch

    from laya_cli.backbones.lm import build_language_model
    from laya_cli.backbones.spec import BackboneSpec
    from laya_cli.data.corpus import open_corpus
    from laya_cli.features.lm_positions import batches, token_states
    from laya_cli.model.lm_heads import LayaLMHead
    from laya_cli.model.settings import HeadSettings
    from laya_cli.training.lm import train_step
    from laya_cli.training.lm_alignment import TokenAlignment

    lm = build_language_model(BackboneSpec(f"hf:{a.model}", pretrained=True, task="lm"))
    torch.manual_seed(0)
    laya_head = LayaLMHead(lm.num_layers, int(lm.readout.unembedding.weight.shape[1]), lm.readout, HeadSettings())
    opt = torch.optim.Adam([q for q in laya_head.parameters() if q.requires_grad], lr=3e-4)
    term = TokenAlignment(1.0, "scorer", "rank", 0)
    times = {"plain": [], "term": []}
    source = batches(lm, open_corpus(str(a.corpus)), "train", int(a.block_size), int(a.batch_size), seed=0)
    for _, x in zip(range(steps), source):
        for kind in ("plain", "term"):
            start = time.perf_counter()
            hs, y = token_states(lm, x)
            align = (lambda: term.loss(lm.backbone, laya_head, x, hs)) if kind == "term" else None  # noqa: B023
            train_step(laya_head, None, hs, y, a.objective, opt, 0.0, None, align)
            times[kind].append(time.perf_counter() - start)
    plain, with_term = (sorted(times[k])[len(times[k]) // 2] for k in ("plain", "term"))  # medians
    say(f"term cost, {steps} steps of {a.batch_size} blocks × {a.block_size} tokens, medians: plain "
        f"{plain:.3f} s/step, with the term {with_term:.3f} s/step (× {with_term / plain:.2f})")  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("lm-align"))
    p.add_argument("--variants", default="plain,rank,both")
    p.add_argument("--seeds", default="1337")
    p.add_argument("--epochs", default="1")
    p.add_argument("--objective", default="kl")
    p.add_argument("--layer-dropout", default="0.3")
    p.add_argument("--block-size", default="128")
    p.add_argument("--batch-size", default="128", help="blocks per batch (laya train's default 128)")
    p.add_argument("--samples", default="2000")
    p.add_argument("--exit-tokens", default="20000")
    p.add_argument("--align", default="1")
    p.add_argument("--trunc-weight", default="1", help="--exit-aware W of the …+trunc variants")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each its own laya processes; for a GPU)")
    p.add_argument("--cost-steps", type=int, default=0, help="only time N steps without and with the term")
    a = p.parse_args(argv)
    if not (a.model / "config.json").is_file():
        say(f"skipped: no model at {a.model} (python -m benchmarks.causal_lm --out DIR makes one)")
        return
    if a.cost_steps:
        step_cost(a, a.cost_steps)
        return
    for v in a.variants.split(","):
        variant_options(v, a.align)  # a bad name stops here, before any run
    todo = [(v, int(s)) for s in a.seeds.split(",") for v in a.variants.split(",")]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = [r for r in pool.map(lambda job: attempt(a, *job), todo) if r is not None]
    if not rows:
        raise SystemExit("no run finished")
    plain = {r["seed"]: r["train_s"] for r in rows if r["variant"] == "plain"}
    f = lambda x, spec="{:.3f}": "—" if x is None else spec.format(x)  # noqa: E731
    say(
        "| variant | seed | train s (× plain) | held-out CE bits | α on last | effective layers | network faith α "
        "| AtP | Grad×Act | head faith α | α-exit saved ≤1 % over the model | p_max-exit saved | oracle |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["train_s"] / plain[r["seed"]] if r["train_s"] and plain.get(r["seed"]) else None
        train = "reused" if r["train_s"] is None else f"{r['train_s']:.0f} ({f(ratio, '{:.2f}')}×)"
        say(f"| {r['variant']} | {r['seed']} | {train} | {r['ce']:.3f} | {r['alpha_last']:.3f} | "
            f"{f(r['effective'], '{:.2f}')} | {f(r['net_laya'])} | {f(r['net_atp'])} | {f(r['net_gradxact'])} | "
            f"{f(r['head_laya'])} | {100 * r['exit_alpha']:.1f} % | {100 * r['exit_pmax']:.1f} % | "
            f"{100 * r['exit_oracle']:.1f} % |")  # fmt: skip
    say("goals:")
    for r in rows:
        faithful = r["net_laya"] is not None and r["net_atp"] is not None and r["net_laya"] >= r["net_atp"]
        exits = r["exit_alpha"] >= 0.20 and r["exit_alpha"] > r["exit_pmax"]
        say(f"  {r['variant']} seed {r['seed']}: α network faithfulness ≥ AtP's {'met' if faithful else 'MISSED'}; "
            f"α-exit ≥ 20 % at ≤ 1 % CE and ahead of p_max {'met' if exits else 'MISSED'}")  # fmt: skip
    if len({r["seed"] for r in rows}) > 1:
        say("")
        for line in seed_table(rows):
            say(line)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))


SEED_COLUMNS = (
    ("ce", "held-out CE bits", 3),
    ("effective", "effective layers", 2),
    ("net_laya", "network faith α", 3),
    ("net_atp", "AtP", 3),
    ("minus_atp", "α − AtP (paired)", 3),
    ("head_laya", "head faith α", 3),
    ("exit_alpha", "α-exit saved", 3),
    ("exit_alpha_own", "α-exit saved, own full head", 3),
    ("exit_pmax", "p_max-exit saved", 3),
    ("exit_tuned", "tuned-lens exit saved", 3),
    ("exit_gap", "α-exit − p_max-exit (paired)", 3),
    ("exit_oracle", "oracle", 3),
)


def seed_table(rows: list[dict]) -> list[str]:
    """A row per variant: each figure as mean [95 % t interval over seeds]; the differences paired within a run."""
    from .network_alignment import cell

    lines = ["| variant | seeds | " + " | ".join(t for _, t, _ in SEED_COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(SEED_COLUMNS)]  # fmt: skip
    for variant in dict.fromkeys(r["variant"] for r in rows):
        runs = [r for r in rows if r["variant"] == variant]
        for r in runs:
            defined = r["net_laya"] is not None and r["net_atp"] is not None
            r["minus_atp"] = r["net_laya"] - r["net_atp"] if defined else None
            r["exit_gap"] = r["exit_alpha"] - r["exit_pmax"]
        cells = [cell([r[k] for r in runs if r.get(k) is not None], d) for k, _, d in SEED_COLUMNS]
        lines.append(f"| {variant} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    main()
