"""How far can any function of the taps, pooled or not, rank the network's layer effects? The ceiling of an α.

    python -m benchmarks.alpha_ceiling CKPT [CKPT ...] [--seeds 3] [--steps 3000] [--train-rows 0]
                                       [--test-rows 0] [--no-unpooled] [--probes P,..] [--attn-width 64]
                                       [--reuse] [--json F]

α reads only the pooled taps r_1..r_L, so it can be no more faithful at network scope than the best function of
them. For each frozen checkpoint (a head trained by ``laya train``; bypass removal where the blocks keep their shape,
else mean), this computes every training and test row's network-scope effects Δᴺ under the checkpoint's own head
(the audit's patching code, ``removal_effects``) and fits **probes**: a scorer that is free to serve the ranking only
(no classification to serve, its own inputs), trained with the ranking loss laya's ``--align`` uses on every
training row, early-stopped on a tenth of them, then scored on the test rows by the audit's faithfulness (Spearman
against Δᴺ, ties within 1e-5). Printed per checkpoint, on the test split: α's faithfulness, the static order of α's
mean (``global``), the best static order (the training rows' mean Δᴺ: what any input-independent α reaches), each
probe's (mean over ``--seeds`` initialisations), and Grad×Act's and AtP's from the audit kept beside the checkpoint
(below; else ``benchmarks.network_alignment``'s record ``NAME.json``); with several checkpoints (seeds of one
variant), a last row of means [95 % t intervals].

  probe-raw   an MLP (hidden 256) on the standardised raw pooled taps, all of them concatenated;
  probe-z     the same MLP on the head's own adapted taps z_i = g_i(r_i) (what its scorer reads);
  probe-lin   a linear map of the raw taps.
  probe-attn  the same ranking MLP over the **unpooled** taps: every token's state of a transformer's tap (padding
              masked out; the CLS token and any other prefix kept), every spatial position of a CNN's (maps
              adaptive-average-pooled to at most 8×8 positions first, ``MAX_SIDE``: memory), read per layer through
              a light attention pooling of its own (one learned query per layer, keys and values linear maps of the
              standardised positions; a zero query starts it as the masked mean). Hooked where laya pools: the raw
              tap activations ``NetworkScope.activations`` returns, before ``TappedBackbone.pool_tap``.

``--test-rows N`` scores on the N test rows ``laya audit --samples N`` audits (its seed 0), so AtP and Grad×Act read
from ``CKPT.audit.json`` (``laya audit CKPT --scope network --compare gradxact,atp --ablation bypass --samples N
--json CKPT.audit.json``) are on the same rows; ``--train-rows N`` fits the probes on a seeded N of the training rows
(the unpooled taps of every row of a large training split do not fit in memory).

If the probes reach no further than the static order, the per-sample part of the effects is not in the pooled taps
and no head that reads them can follow it (a method that runs the network, as AtP does, can). If they do, the head's
training is what holds α back. If probe-attn reaches AtP where the pooled probes do not, a head that reads the
unpooled taps could reach the network's answer; if it does not, such a reader (one query per layer, these rows)
cannot either. Results: docs/results/alpha-ceiling.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import NamedTuple

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
    ("probe-attn", "probe-attn (unpooled)"),
    ("gradxact", "Grad×Act"),
    ("atp", "AtP"),
)
MAX_SIDE = 8  # a CNN tap's map is adaptive-average-pooled to at most MAX_SIDE × MAX_SIDE positions (memory)
ATTN_WIDTH = 64  # the attention probe's key/value width per layer
PROBES = ("probe-raw", "probe-z", "probe-lin", "probe-attn")


class Effects(NamedTuple):
    feats: list  # the pooled taps r_1..r_L
    target: torch.Tensor  # ŷ under the checkpoint's head
    delta: torch.Tensor  # (N, L) network-scope effects Δᴺ
    positions: list | None  # per tap (N, P, D) float16 positions and their (N, P) mask; None unless asked


def effects_of(
    model, images, device: str = "cpu", batch_size: int = 64, unpooled: bool = False, max_side: int = MAX_SIDE
) -> Effects:
    """Pooled taps, ŷ and Δᴺ of ``images`` under the checkpoint's head, with the training's removal; ``unpooled``:
    each tap's positions too (``unpooled_tap``), padded to the longest batch's."""
    from laya_cli.auditing.network.patching import NetworkScope, removal_effects
    from laya_cli.data.images import image_batches
    from laya_cli.features.extraction import to_float_images
    from laya_cli.training.network_target import resolved_removal

    removal = resolved_removal(model.backbone)
    if removal != "bypass":
        raise SystemExit(f"alpha_ceiling: bypass removal only (this backbone's is {removal})")
    net = NetworkScope(model.backbone, model.head, None, ablation=removal)
    model.backbone.eval(), model.head.eval()
    parts, positions = [], []
    for xb in image_batches(images, batch_size, 0, len(images)):
        x = to_float_images(xb.to(device) if torch.is_tensor(xb) else xb)
        with torch.no_grad():
            hs = net.activations(x)
            if unpooled:  # before removed_taps: its passes leave the backbone's mask at the last one's rows
                positions.append([unpooled_tap(model.backbone, i, h, max_side) for i, h in enumerate(hs)])
            feats = net.pooled(hs)
            target = model.head(feats).logits.argmax(-1)
            delta = removal_effects(model.head, feats, net.removed_taps(x, hs), target)
        parts.append((feats, target, delta))
    feats = [torch.cat([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
    taps = [padded([batch[i] for batch in positions]) for i in range(len(feats))] if unpooled else None
    return Effects(feats, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts]), taps)


def unpooled_tap(backbone, i: int, h: torch.Tensor, max_side: int = MAX_SIDE) -> tuple[torch.Tensor, torch.Tensor]:
    """Tap ``i``'s raw activation as (B, P, D) float16 positions and a (B, P) mask of the real ones: a token
    sequence's tokens (the text adapter's mask keeps padding out), a map's positions (adaptive-average-pooled to at
    most ``max_side`` × ``max_side``), a vector as one position."""
    layout = backbone.tap_format(i, h).layout
    if layout == "NC":
        tokens = h.unsqueeze(1)
    elif layout in ("NCHW", "NHWC"):
        maps = h if layout == "NCHW" else h.permute(0, 3, 1, 2)
        side = (min(maps.shape[2], max_side), min(maps.shape[3], max_side))
        tokens = nn.functional.adaptive_avg_pool2d(maps, side).flatten(2).transpose(1, 2)
    else:
        tokens = h
    mask = backbone.adapter.batch_mask(h) if layout == "NLC" else None
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
    return tokens.half(), mask


def padded(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Batches of (B, P_b, D) positions and masks as one (N, max P_b, D) pair, the added positions masked out (a
    text batch is cut after its longest text)."""
    width = max(t.shape[1] for t, _ in parts)
    tokens = torch.cat([nn.functional.pad(t, (0, 0, 0, width - t.shape[1])) for t, _ in parts])
    mask = torch.cat([nn.functional.pad(m, (0, width - m.shape[1])) for _, m in parts])
    return tokens, mask


def faithfulness(scores: torch.Tensor, delta: torch.Tensor) -> float:
    """The audit's faithfulness: mean Spearman over the rows where both vary (ties within ``TOL``)."""
    from laya_cli.auditing.metrics import spearman_rows

    rho = spearman_rows(scores, delta, TOL)
    return float(rho[~rho.isnan()].mean())


def mlp(width: int, layers: int, hidden: int | None) -> nn.Module:
    """The pooled probes' scorer: an MLP (hidden 256, GELU, dropout 0.1) or, with ``hidden`` None, a linear map."""
    if hidden is None:
        return nn.Linear(width, layers)
    return nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Dropout(0.1), nn.Linear(hidden, layers))


class AttentionPoolProbe(nn.Module):
    """probe-attn: per layer, one learned query attends over that layer's positions (keys and values linear maps of
    them, masked positions left out); the layers' pooled values, concatenated, feed the pooled probes' MLP.

    Computed in the order that costs least, with the same result: q·(W_k x_p + b_k) = (W_kᵀq)·x_p + q·b_k, whose
    last term is the same at every position and leaves the softmax unchanged; and Σ_p a_p (W_v x_p + b_v) =
    W_v (Σ_p a_p x_p) + b_v because the weights sum to one. So each position costs one dot product, not two
    D × width maps (MiniLM: 32 tokens × 384 wide, six layers, 256 rows a step, on a CPU)."""

    def __init__(self, dims: list[int], layers: int, width: int = ATTN_WIDTH, hidden: int = 256):
        super().__init__()
        self.keys = nn.ModuleList(nn.Linear(d, width) for d in dims)
        self.values = nn.ModuleList(nn.Linear(d, width) for d in dims)
        self.queries = nn.Parameter(torch.zeros(len(dims), width))  # zero: it starts as the masked mean
        self.mlp = mlp(len(dims) * width, layers, hidden)

    def weights(self, i: int, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, P) attention of layer ``i``'s query over its positions; masked ones get none."""
        key = self.keys[i].weight.T @ self.queries[i] / math.sqrt(self.queries.shape[1])
        return torch.softmax((tokens @ key).masked_fill(~mask, -math.inf), dim=-1)

    def forward(self, taps: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        pooled = [
            self.values[i](torch.einsum("bp,bpd->bd", self.weights(i, tokens, mask), tokens))
            for i, (tokens, mask) in enumerate(taps)
        ]
        return self.mlp(torch.cat(pooled, dim=1))


def rows_of(x, index: torch.Tensor):
    """Rows ``index`` of a probe's input: a tensor, or the unpooled taps' (positions, mask) pairs (float32)."""
    if torch.is_tensor(x):
        return x[index]
    return [(tokens[index].float(), mask[index]) for tokens, mask in x]


def fit_probe(x, delta: torch.Tensor, hidden: int | None, seed: int, steps: int, build=None) -> nn.Module:
    """A scorer x → L scores, trained by laya's ranking loss on 90 % of the rows, the best of the other 10 % kept.
    ``build``: makes the scorer (after the seed is set); else the pooled probes' MLP on a tensor ``x``."""
    from laya_cli.training.alignment import ranking_loss

    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(delta), generator=g)
    held = order[: max(1, len(delta) // 10)]
    fit = order[len(held) :]
    torch.manual_seed(seed)
    probe = build() if build is not None else mlp(x.shape[1], delta.shape[1], hidden)
    opt = torch.optim.AdamW(probe.parameters(), lr=1e-3, weight_decay=1e-2)
    held_x = rows_of(x, held)
    best, best_state = -math.inf, None
    for step in range(steps):
        probe.train()
        batch = fit[torch.randint(len(fit), (min(256, len(fit)),), generator=g)]
        loss = ranking_loss(probe(rows_of(x, batch)), delta[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 49:
            probe.eval()
            with torch.no_grad():
                score = faithfulness(probe(held_x), delta[held])
            if score > best:
                best, best_state = score, {k: v.clone() for k, v in probe.state_dict().items()}
    probe.load_state_dict(best_state)
    return probe.eval()


def standardised(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def standardised_positions(train: list, test: list) -> tuple[list, list]:
    """Each tap's positions standardised per channel by the training rows' real positions (masked ones set to 0),
    kept float16."""
    out_train, out_test = [], []
    for (tokens, mask), (test_tokens, test_mask) in zip(train, test):
        real = tokens[mask].float()
        mean, std = real.mean(0), real.std(0).clamp_min(1e-6)
        for (t, m), out in (((tokens, mask), out_train), ((test_tokens, test_mask), out_test)):
            z = ((t.float() - mean) / std).masked_fill(~m.unsqueeze(-1), 0.0)
            out.append((z.half(), m))
    return out_train, out_test


def split_rows(split, rows: int, seed: int = 0):
    """``rows`` of a split's images, as ``laya audit --samples rows`` selects them (0: all)."""
    from laya_cli.data.images import take
    from laya_cli.model.evaldata import select_samples

    return take(split.images, select_samples(len(split.images), rows or None, seed))


def probe_scores(inputs: dict, train_delta, test_delta, seeds: int, steps: int) -> dict:
    """Each probe's test faithfulness per seed: ``inputs`` maps a probe's name to (train x, test x, builder)."""
    row = {}
    for name, (x_train, x_test, build) in inputs.items():
        started, scores = time.perf_counter(), []
        for seed in range(seeds):
            probe = fit_probe(x_train, train_delta, None, seed, steps, build)
            with torch.no_grad():
                scores.append(faithfulness(probe(rows_of(x_test, torch.arange(len(test_delta)))), test_delta))
        row[name] = sum(scores) / len(scores)
        row[name + "_seeds"] = scores
        row[name + "_seconds"] = round(time.perf_counter() - started, 1)  # all its seeds, on a shared machine
    return row


def pooled_taps(head, feats: list[torch.Tensor]) -> list[torch.Tensor]:
    """r_1..r_L as the pooled probes read them. Under ``--alpha-reader positions`` each row leaves the backbone
    packed with its tap's positions after r_i; the pooled probes must not read those (they would stop being the
    pooled ceiling, and MiniLM's rows would be 33× as wide)."""
    return head.pooled(feats) if getattr(head, "reads_positions", False) else list(feats)


def ceiling(
    ckpt: Path,
    seeds: int,
    steps: int,
    train_rows: int = 0,
    test_rows: int = 0,
    unpooled: bool = True,
    probes: tuple[str, ...] = PROBES,
    width: int = ATTN_WIDTH,
) -> dict:
    from laya_cli.model.evaldata import model_dataset
    from laya_cli.model.laya_model import load_model

    model = load_model(ckpt)
    _, data = model_dataset(model)
    started = time.perf_counter()
    train = effects_of(model, split_rows(data.train, train_rows), unpooled=unpooled)
    test = effects_of(model, split_rows(data.test, test_rows), unpooled=unpooled)
    seconds = round(time.perf_counter() - started, 1)
    with torch.no_grad():
        alpha = model.head(test.feats).alpha
        z_train = model.head.embed(train.feats).flatten(1)
        z_test = model.head.embed(test.feats).flatten(1)
    row = {
        "checkpoint": str(ckpt),
        "test_accuracy": model.checkpoint["metrics"]["test_accuracy"],
        "train_rows": len(train.delta),
        "test_rows": len(test.delta),
        "alpha": faithfulness(alpha, test.delta),
        "global": faithfulness(alpha.mean(0).expand_as(alpha), test.delta),
        "best_static": faithfulness(train.delta.mean(0).expand_as(test.delta), test.delta),
        "effects_seconds": seconds,
    }
    raw = standardised(
        torch.cat(pooled_taps(model.head, train.feats), 1), torch.cat(pooled_taps(model.head, test.feats), 1)
    )
    z = standardised(z_train, z_test)
    L = train.delta.shape[1]

    def pooled_mlp(width: int, hidden: int | None):
        return lambda: mlp(width, L, hidden)

    inputs = {
        "probe-raw": (*raw, pooled_mlp(raw[0].shape[1], 256)),
        "probe-z": (*z, pooled_mlp(z[0].shape[1], 256)),
        "probe-lin": (*raw, pooled_mlp(raw[0].shape[1], None)),
    }
    if unpooled:
        taps = standardised_positions(train.positions, test.positions)
        dims = [tokens.shape[-1] for tokens, _ in taps[0]]
        inputs["probe-attn"] = (*taps, lambda: AttentionPoolProbe(dims, L, width))
        row["positions"] = [tokens.shape[1] for tokens, _ in taps[0]]
        row["unpooled_mb"] = round(sum(t.numel() * 2 + m.numel() for part in taps for t, m in part) / 2**20, 1)
    inputs = {name: given for name, given in inputs.items() if name in probes}
    row.update(probe_scores(inputs, train.delta, test.delta, seeds, steps))
    return row


def audited(ckpt: Path) -> dict:
    """AtP's and Grad×Act's network-scope faithfulness from the audit kept beside the checkpoint: ``laya audit
    ... --json CKPT.audit.json``, else ``benchmarks.network_alignment``'s record ``NAME.json``."""
    audit = ckpt.with_name(ckpt.name + ".audit.json")
    if audit.is_file():
        methods = json.loads(audit.read_text())["network"]["methods"]
        pairs = (("atp", "atp"), ("gradxact", "gradxact"), ("alpha_audit", "laya"))  # α: a check on the same rows
        return {k: methods.get(m, {}).get("faithfulness") for k, m in pairs}
    kept = ckpt.with_suffix(".json")
    record = json.loads(kept.read_text()) if kept.is_file() else {}
    return {"atp": record.get("faith_net_atp"), "gradxact": record.get("faith_net_gradxact")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+", type=Path)
    p.add_argument("--seeds", type=int, default=3, help="probe initialisations per checkpoint")
    p.add_argument("--steps", type=int, default=3000, help="probe training steps (batches of 256 rows)")
    p.add_argument("--train-rows", type=int, default=0, help="fit on a seeded subset of the training rows (0: all)")
    p.add_argument("--test-rows", type=int, default=0, help="score on laya audit --samples N's test rows (0: all)")
    p.add_argument("--no-unpooled", dest="unpooled", action="store_false", help="the pooled probes only")
    p.add_argument("--probes", default=",".join(PROBES), help="which probes to fit (comma-separated)")
    p.add_argument("--attn-width", type=int, default=ATTN_WIDTH, help="probe-attn's key/value width per layer")
    p.add_argument("--reuse", action="store_true", help="a checkpoint's kept CKPT.ceiling.json instead of a new fit")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows = []
    columns = [c for c in COLUMNS if a.unpooled or c[0] != "probe-attn"]
    print("| checkpoint | test acc | " + " | ".join(title for _, title in columns) + " |")
    print("|---|---:|" + "---:|" * len(columns))
    for ckpt in a.checkpoints:
        # every checkpoint's row, kept beside it (another probe-attn width: a file of its own)
        width = "" if a.attn_width == ATTN_WIDTH else f"-w{a.attn_width}"
        kept = ckpt.with_name(f"{ckpt.name}.ceiling{width}.json")
        if a.reuse and kept.is_file():
            r = json.loads(kept.read_text())
        else:
            probes = tuple(a.probes.split(","))
            fitted = ceiling(ckpt, a.seeds, a.steps, a.train_rows, a.test_rows, a.unpooled, probes, a.attn_width)
            r = {**fitted, **audited(ckpt)}
            kept.write_text(json.dumps(r, indent=1))
        rows.append(r)
        cells = [f"{r[k]:.3f}" if r.get(k) is not None else "—" for k, _ in columns]
        print(f"| {ckpt.name} | {r['test_accuracy']:.4f} | " + " | ".join(cells) + " |", flush=True)
    if len(rows) > 1:
        from .network_alignment import cell

        kept = [[r[k] for r in rows if r.get(k) is not None] for k in ("test_accuracy", *dict(columns))]
        means = [cell(values, 3) if values else "—" for values in kept]
        print(f"| mean of {len(rows)} | " + " | ".join(means) + " |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
