"""How far can any function of the pooled taps rank the network's layer effects? The ceiling of an intrinsic α.

    python -m benchmarks.alpha_ceiling CKPT [CKPT ...] [--seeds 3] [--steps 3000] [--json F]

α reads only the pooled taps r_1..r_L, so it can be no more faithful at network scope than the best function of
them. For each frozen checkpoint (a head trained by ``laya train``; bypass removal where the blocks keep their shape,
else mean), this computes every training and test row's network-scope effects Δᴺ under the checkpoint's own head
(the audit's patching code, ``removal_effects``) and fits **probes**: a scorer that is free to serve the ranking only
(no classification to serve, its own inputs), trained with the ranking loss laya's ``--align`` uses on every
training row, early-stopped on a tenth of them, then scored on the test rows by the audit's faithfulness (Spearman
against Δᴺ, ties within 1e-5). Printed per checkpoint, on the test split: α's faithfulness, the static order of α's
mean (``global``), the best static order (the training rows' mean Δᴺ: what any input-independent α reaches), each
probe's (mean over ``--seeds`` initialisations), and AtP's where ``benchmarks.network_alignment`` kept the
checkpoint's audit beside it (``NAME.json``); with several checkpoints (seeds of one variant), a last row of means
[95 % t intervals].

  probe-raw   an MLP (hidden 256) on the standardised raw pooled taps, all of them concatenated;
  probe-z     the same MLP on the head's own adapted taps z_i = g_i(r_i) (what its scorer reads);
  probe-lin   a linear map of the raw taps.

If the probes reach no further than the static order, the per-sample part of the effects is not in the pooled taps
and no head that reads them can follow it (a method that runs the network, as AtP does, can). If they do, the head's
training is what holds α back.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from torch import nn

TOL = 1e-5  # the audit's --tie-tol
COLUMNS = (
    ("alpha", "α"),
    ("global", "global (α's mean)"),
    ("best_static", "best static order"),
    ("probe-raw", "probe-raw"),
    ("probe-z", "probe-z"),
    ("probe-lin", "probe-lin"),
    ("atp", "AtP"),
)


def effects_of(model, images, device: str = "cpu", batch_size: int = 64) -> tuple[list, torch.Tensor, torch.Tensor]:
    """(pooled taps r_1..r_L, ŷ, Δᴺ) of ``images`` under the checkpoint's head, with the training's removal."""
    from laya_cli.auditing.network.patching import NetworkScope, removal_effects
    from laya_cli.data.images import image_batches
    from laya_cli.features.extraction import to_float_images
    from laya_cli.training.network_target import resolved_removal

    removal = resolved_removal(model.backbone)
    if removal != "bypass":
        raise SystemExit(f"alpha_ceiling: bypass removal only (this backbone's is {removal})")
    net = NetworkScope(model.backbone, model.head, None, ablation=removal)
    model.backbone.eval(), model.head.eval()
    parts = []
    for xb in image_batches(images, batch_size, 0, len(images)):
        x = to_float_images(xb.to(device) if torch.is_tensor(xb) else xb)
        with torch.no_grad():
            hs = net.activations(x)
            feats = net.pooled(hs)
            target = model.head(feats).logits.argmax(-1)
            delta = removal_effects(model.head, feats, net.removed_taps(x, hs), target)
        parts.append((feats, target, delta))
    feats = [torch.cat([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
    return feats, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


def faithfulness(scores: torch.Tensor, delta: torch.Tensor) -> float:
    """The audit's faithfulness: mean Spearman over the rows where both vary (ties within ``TOL``)."""
    from laya_cli.auditing.metrics import spearman_rows

    rho = spearman_rows(scores, delta, TOL)
    return float(rho[~rho.isnan()].mean())


def fit_probe(x: torch.Tensor, delta: torch.Tensor, hidden: int | None, seed: int, steps: int) -> nn.Module:
    """A scorer x → L scores, trained by laya's ranking loss on 90 % of the rows, the best of the other 10 % kept."""
    from laya_cli.training.alignment import ranking_loss

    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    held = order[: max(1, len(x) // 10)]
    fit = order[len(held) :]
    torch.manual_seed(seed)
    L = delta.shape[1]
    probe = (
        nn.Linear(x.shape[1], L)
        if hidden is None
        else nn.Sequential(nn.Linear(x.shape[1], hidden), nn.GELU(), nn.Dropout(0.1), nn.Linear(hidden, L))
    )
    opt = torch.optim.AdamW(probe.parameters(), lr=1e-3, weight_decay=1e-2)
    best, best_state = -math.inf, None
    for step in range(steps):
        probe.train()
        batch = fit[torch.randint(len(fit), (min(256, len(fit)),), generator=g)]
        loss = ranking_loss(probe(x[batch]), delta[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 49:
            probe.eval()
            with torch.no_grad():
                score = faithfulness(probe(x[held]), delta[held])
            if score > best:
                best, best_state = score, {k: v.clone() for k, v in probe.state_dict().items()}
    probe.load_state_dict(best_state)
    return probe.eval()


def standardised(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def ceiling(ckpt: Path, seeds: int, steps: int) -> dict:
    from laya_cli.model.evaldata import model_dataset
    from laya_cli.model.laya_model import load_model

    model = load_model(ckpt)
    _, data = model_dataset(model)
    train_feats, _, train_delta = effects_of(model, data.train.images)
    test_feats, _, test_delta = effects_of(model, data.test.images)
    with torch.no_grad():
        alpha = model.head(test_feats).alpha
        z_train = model.head.embed(train_feats).flatten(1)
        z_test = model.head.embed(test_feats).flatten(1)
    row = {
        "checkpoint": str(ckpt),
        "train_rows": len(train_delta),
        "test_rows": len(test_delta),
        "alpha": faithfulness(alpha, test_delta),
        "global": faithfulness(alpha.mean(0).expand_as(alpha), test_delta),
        "best_static": faithfulness(train_delta.mean(0).expand_as(test_delta), test_delta),
    }
    raw = standardised(torch.cat(train_feats, 1), torch.cat(test_feats, 1))
    z = standardised(z_train, z_test)
    for name, (x_train, x_test), hidden in (("probe-raw", raw, 256), ("probe-z", z, 256), ("probe-lin", raw, None)):
        scores = []
        for seed in range(seeds):
            probe = fit_probe(x_train, train_delta, hidden, seed, steps)
            with torch.no_grad():
                scores.append(faithfulness(probe(x_test), test_delta))
        row[name] = sum(scores) / len(scores)
        row[name + "_seeds"] = scores
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+", type=Path)
    p.add_argument("--seeds", type=int, default=3, help="probe initialisations per checkpoint")
    p.add_argument("--steps", type=int, default=3000, help="probe training steps (batches of 256 rows)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows = []
    print("| checkpoint | " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for ckpt in a.checkpoints:
        r = ceiling(ckpt, a.seeds, a.steps)
        kept = ckpt.with_suffix(".json")  # benchmarks.network_alignment's audit of this checkpoint
        r["atp"] = json.loads(kept.read_text()).get("faith_net_atp") if kept.is_file() else None
        rows.append(r)
        print(f"| {ckpt.name} | " + " | ".join(f"{r[k]:.3f}" if r[k] is not None else "—" for k, _ in COLUMNS) + " |")
    if len(rows) > 1:
        from .network_alignment import cell

        means = [cell([r[k] for r in rows if r[k] is not None], 3) for k, _ in COLUMNS]
        print(f"| mean of {len(rows)} | " + " | ".join(means) + " |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
