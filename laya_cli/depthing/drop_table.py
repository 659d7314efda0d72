"""``laya depth --drop K``: the drop table (``dropping.drop_table``), what each dropped model costs, and with
``--out`` the checkpoint of the model without the layers one order chose.

Cost is measured on the model itself: FLOPs (``compute.count_flops``) of the backbone's forward up to its last tap
with the dropped blocks replaced by ``Bypass`` (``TappedBackbone.dropped``), and for the chosen order the wall time
of that forward next to the full one's, side by side in each round: the median time with its interval, and the
speed-up full ÷ dropped round by round, its median and interval (``timing``), called measured only where that
interval excludes 1. The written checkpoint keeps the head as it is (a dropped tap reads the stream entering its
block, which is what the table scored) and recomputes the head-scope reference r̄_i on the training split through the
dropped model, since every tap after a dropped block now reads another stream. Definitions: docs/depth.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ..data.images import image_batches
from ..features.extraction import to_float_images
from ..runtime.distributed import barrier, is_main
from ..runtime.fileio import json_safe, strict_json
from .compute import count_flops
from .drop_orders import drop_table
from .settings import DepthSettings

DROP_FORMAT = "laya-drop"
DROP_VERSION = 1


@dataclass
class DropResult:
    settings: dict
    n_samples: int  # test samples each row is scored on
    n_val: int  # validation samples the orders were chosen on
    layers: list[str]
    scores: dict  # per order read off a score: one value per layer
    orders: dict  # order -> tap indices, first dropped first
    rows: list[dict]  # order, k, dropped (indices and names), accuracy [Wilson 95 %], flops_fraction
    timing: list[dict]  # the chosen order at k = 0..K: seconds per image, measured and FLOPs speed-ups
    goals: dict | None  # at 25 % of the layers dropped: alpha against greedy and block influence
    written: dict | None = None  # the checkpoint --out wrote
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return json_safe({"format": DROP_FORMAT, "version": DROP_VERSION, **asdict(self)})

    def to_json(self) -> str:
        return strict_json(self.to_dict())


def backbone_flops(backbone, x: Tensor) -> int:
    """FLOPs per input of the backbone's forward up to its last tap (what laya runs for every prediction)."""
    backbone.eval()
    return count_flops(lambda: backbone(x), backbone) // x.shape[0]


@torch.no_grad()
def round_seconds(backbones: list, x: Tensor, repeats: int) -> list[list[float]]:
    """Wall seconds of each backbone's forward on ``x`` in each of ``repeats`` rounds (all timed in turn in every
    round, after one warm-up pass each): one list per backbone."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for b in backbones:
        b.eval()(x)  # warm-up
    times: list[list[float]] = [[] for _ in backbones]
    for _ in range(repeats):
        for i, b in enumerate(backbones):
            sync()
            t0 = time.perf_counter()
            b(x)
            sync()
            times[i].append(time.perf_counter() - t0)
    return times


def timing_row(full: list[float], rounds: list[float], per: int) -> dict:
    """One dropped model's measured cost beside the full one's rounds (``per`` inputs a round): its median seconds
    per input with their interval, and the speed-up full ÷ dropped per round — its median, interval and what they
    say (``timing.speedup_verdict``: faster, slower, same, noisy, or single under 3 rounds)."""
    from ..stats.timing import ratio_summary, seconds_summary, speedup_verdict

    secs, speed = seconds_summary(rounds, per), ratio_summary(full, rounds)
    return {"seconds_per_image": secs["seconds"], "seconds_range": secs["interval"], "speedup": speed["value"],
            "speedup_interval": speed["interval"], "speedup_verdict": speedup_verdict(speed),
            "rounds": len(rounds)}  # fmt: skip


@dataclass
class DropData:
    """What ``--drop`` reads: the test inputs the rows are scored on, the validation split the orders are chosen on,
    and the training split the written checkpoint's reference is computed on; each ``(inputs, labels)``."""

    test: tuple
    val: tuple
    train: tuple
    name: str


def load_drop_data(model, dataset=None, data_dir=None, samples=None, seed=0, encoding=None) -> DropData:
    """The checkpoint's data set (or ``dataset``) split as ``--drop`` uses it; ``samples``: a seeded test subset."""
    from ..data.images import take
    from ..model.evaldata import model_dataset, select_samples

    req, data = model_dataset(model, dataset, data_dir, encoding)
    index = select_samples(len(data.test), samples, seed)
    test = (take(data.test.images, index), data.test.labels[index])
    return DropData(test, (data.val.images, data.val.labels), (data.train.images, data.train.labels), req.name)


def drop_job(model, load_data, settings: DepthSettings, out: str | Path | None = None) -> DropResult:
    """``laya depth --drop K [--out small.pt]`` on a loaded model: checks that need no data, the data, the table,
    and the checkpoint. One line when K exceeds the layers that may go, or the chosen order does not exist."""
    from ..backbones.taps import DROP_NEEDS
    from ..runtime.errors import LayaError
    from .drop_orders import droppable

    candidates = droppable(model)
    if settings.drop > len(candidates):
        raise LayaError(
            f"--drop {settings.drop}: at most {len(candidates)} of this model's {model.num_layers} layers can be "
            f"dropped (never the last tap{', nor one dropped already' if model.spec.dropped else ''})"
        )
    with torch.no_grad():  # every tap's block must keep its input's shape (the scores read all of them)
        model.backbone.eval().activations_and_inputs(model.backbone.probe_input(), needs=DROP_NEEDS)
    if settings.drop_order == "alpha" and not getattr(model.head, "has_alpha", False):
        raise LayaError(
            "a head without α has no alpha order: choose --drop-order block-influence, network, reverse or greedy"
        )
    data = load_data()
    x_time = to_float_images(next(image_batches(data.test[0], settings.time_batch)))  # the timed batch
    result = run_drop(model, data.test, data.val, settings, x_time)
    result.settings["dataset"] = data.name
    if out is not None:
        result.written = write_dropped(model, result, settings, data.train, data.test, out)
    return result


def run_drop(model, test, val, settings: DepthSettings, x_time: Tensor) -> DropResult:
    """The drop table up to ``settings.drop`` layers (orders chosen on ``val``, scored on ``test``; both
    ``(inputs, labels)``), each row's FLOPs fraction, and the chosen order's measured time per k."""
    dev, K = settings.device, settings.drop
    run = {"batch_size": settings.batch_size, "device": dev}
    table = drop_table(model, val, test, K, settings.drop_draws, settings.seed, **run)
    backbone, names = model.backbone.to(dev).eval(), table["layers"]
    x1 = x_time[:1].to(dev)
    full_flops, flops = backbone_flops(backbone, x1), {}
    for r in table["rows"]:
        key = frozenset(r["dropped"])
        if key not in flops:
            flops[key] = backbone_flops(backbone.dropped(sorted(key)), x1) if key else full_flops
        r["flops_fraction"] = flops[key] / max(full_flops, 1)
        r["dropped_layers"] = [names[i] for i in r["dropped"]]
    chosen = table["orders"][settings.drop_order]
    timing = []
    if settings.time_repeats > 0:
        sets = [chosen[:k] for k in range(len(chosen[:K]) + 1)]
        rounds = round_seconds([backbone.dropped(s) for s in sets], x_time.to(dev), settings.time_repeats)
        for k, s in enumerate(sets):
            fraction = flops[frozenset(s)] / max(full_flops, 1)
            timing.append({"k": k, "dropped": s, "dropped_layers": [names[i] for i in s],
                           **timing_row(rounds[0], rounds[k], x_time.shape[0]), "flops_fraction": fraction,
                           "flops_speedup": 1 / fraction if fraction > 0 else math.inf})  # fmt: skip
    return DropResult(
        settings=_settings_record(settings, full_flops, x_time),
        n_samples=len(test[1]),
        n_val=len(val[1]),
        layers=names,
        scores=table["scores"],
        orders=table["orders"],
        rows=table["rows"],
        timing=timing,
        goals=quarter_goals(table["rows"], len(names)),
    )


def _settings_record(settings: DepthSettings, full_flops: int, x_time: Tensor) -> dict:
    return {"drop": settings.drop, "drop_order": settings.drop_order, "draws": settings.drop_draws,
            "seed": settings.seed, "time_repeats": settings.time_repeats, "time_batch": int(x_time.shape[0]),
            "device": settings.device, "full_flops": full_flops}  # fmt: skip


def quarter_goals(rows: list[dict], n_layers: int) -> dict | None:
    """Issue 35's comparison at 25 % of the layers dropped: α-guided against the greedy oracle (within 1 pp?) and
    against Block Influence (ahead?) and the reverse order (no worse?). None when the table does not reach that many
    layers."""
    quarter = max(1, math.floor(0.25 * n_layers))
    acc = {r["order"]: r["accuracy"] for r in rows if r["k"] == quarter}
    if not {"alpha", "greedy", "block-influence"} <= set(acc):
        return None
    return {"k": quarter, "alpha": acc["alpha"], "greedy": acc["greedy"], "block_influence": acc["block-influence"],
            "within_1pp_of_greedy": acc["greedy"] - acc["alpha"] <= 0.01,
            "ahead_of_block_influence": acc["alpha"] > acc["block-influence"], "reverse": acc.get("reverse"),
            "no_worse_than_reverse": acc["alpha"] >= acc["reverse"] if "reverse" in acc else None}  # fmt: skip


def write_dropped(model, result: DropResult, settings: DepthSettings, train, test, out: str | Path) -> dict:
    """Write the checkpoint of ``model`` without the first ``settings.drop`` layers of the chosen order; its test
    accuracy measured through the dropped model itself (not the bypass hooks the table used), its reference
    recomputed on ``train`` (inputs, labels). Returns what ``laya info`` shows of it (``result.written``)."""
    from ..auditing.metrics import macro_f1
    from ..backbones.build import BackboneSpec
    from ..features.extraction import extract
    from ..model.checkpoint import save_checkpoint
    from .analysis import n_parameters, reshaped_checkpoint
    from .drop_orders import predictions

    dev = settings.device
    drop = sorted(result.orders[settings.drop_order][: settings.drop])
    small = model.backbone.dropped(drop)
    spec = BackboneSpec.from_dict(model.checkpoint["backbone"]["spec"])
    spec.dropped = sorted({*spec.dropped, *drop})
    names = [model.layer_names[i] for i in drop]
    reference = extract(small, *train, device=dev, description="reference").mean()
    reference = [r.detach().cpu() for r in reference]
    pred = predictions(small, model.head, test[0], batch_size=settings.batch_size, device=dev)
    accuracy, f1 = float((pred == test[1]).double().mean()), macro_f1(pred, test[1], len(model.classes))
    row = next(r for r in result.rows if r["order"] == settings.drop_order and r["k"] == len(drop))
    timed = next((t for t in result.timing if t["k"] == len(drop)), {})
    kept, full = n_parameters(small.model.state_dict()), n_parameters(model.backbone.model.state_dict())
    written = {
        "out": str(out),
        "dropped": drop,
        "layers": names,
        "order": settings.drop_order,
        "of": len(model.layer_names),
        "test_accuracy": accuracy,
        "table_accuracy": row["accuracy"],
        "full_test_accuracy": _full(result),
        "parameters": kept,
        "parameters_full": full,
        "flops_fraction": row["flops_fraction"],
        "speedup": timed.get("speedup"),  # the median over ``timing_rounds`` rounds of full ÷ dropped
        "timing_rounds": timed.get("rounds"),
        "speedup_interval": timed.get("speedup_interval"),  # the median's interval; None under 3 rounds
        "speedup_verdict": timed.get("speedup_verdict"),  # faster/slower (interval excludes 1), same, noisy, single
        "flops_speedup": timed.get("flops_speedup"),
        "evaluated_on": {"samples": len(test[1])},
    }
    how = f"without {', '.join(names)} (dropped by {settings.drop_order})"
    metrics = {"test_accuracy": accuracy, "test_macro_f1": f1}
    ckpt = reshaped_checkpoint(model, small, spec, model.head, reference, metrics, how)
    ckpt["dropped"] = written
    if is_main():
        save_checkpoint(ckpt, out)
    barrier()
    return written


def _full(result: DropResult) -> float:
    return next(r["accuracy"] for r in result.rows if r["k"] == 0)
