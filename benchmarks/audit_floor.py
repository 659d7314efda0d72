"""The audit's price against its floor, per scope, side by side in one run.

    python -m benchmarks.audit_floor [--model resnet34] [--side 64] [--images 64] [--repeats 3] [--threads N]
                                     [--compare METHODS] [--network-compare METHODS]

The floor of a scope is what its effects Δ cannot be computed without:
  head     the model's forward to its last tap (the taps r_1..r_L) + L + 1 head passes (the head intact, then
           each r_i replaced by r̄_i);
  network  the forward to the last tap + for each removed layer i only the layers after it (the earlier taps cannot
           change: ``continue_from``) + L + 1 head passes.
The audit is what ``laya audit M [--scope network --ablation bypass]`` runs on the same images with laya's defaults
(the scope's ``--compare``: ig,gradxact at head scope, gradxact,atp at network scope; the bootstrap intervals, the
model-randomisation check on the first 256 samples), each scope alone; ``--compare`` / ``--network-compare`` time
another list of methods beside the default's (``--network-compare ig,gradxact``: the network default before).

Model: a frozen timm CNN (random weights, pretrained=False: costs do not depend on the weights) tapped at its
residual blocks (``--taps blocks``: 13 for resnet34), a LAYA head built directly, ``--images`` random images of
``--side`` px. Timings: ``--repeats`` rounds after a warm-up, every phase once per round back to back (a shared
machine's load then slows a round's phases alike); medians, ratios the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from .audit_speed import interleaved, median_ratio


def build(name: str, side: int, n_images: int, device: str = "cpu", seed: int = 0):
    """(the plain timm model with its classifier, LayaModel over the same frozen weights, uint8 images)."""
    import timm

    from laya_cli.backbones.build import BackboneSpec, build_backbone
    from laya_cli.features.extraction import to_float_images
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel

    torch.manual_seed(seed)
    spec = BackboneSpec(f"timm:{name}", [], "auto", False, False, 3, (side, side), side)
    backbone = build_backbone(spec).eval().to(device)
    plain = timm.create_model(name, pretrained=False).eval().to(device)
    plain.load_state_dict(backbone.model.state_dict(), strict=False)
    for p in (*backbone.parameters(), *plain.parameters()):
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n_images, 3, side, side), dtype=torch.uint8, generator=g).to(device)
    with torch.no_grad():
        feats = backbone(to_float_images(images))
    head = build_head("laya", [f.shape[-1] for f in feats], 10).eval().to(device)
    model = LayaModel(backbone, head, spec, "laya", [str(c) for c in range(10)], [f.mean(0) for f in feats])
    model.checkpoint = {"tap_reference": None}
    return plain, model, images


def eval_data(model, images):
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.evaldata import EvalData

    feats = model.features(images)
    return EvalData(LayerFeatures(feats, torch.zeros(len(images), dtype=torch.long)), images,
                    torch.arange(len(images)), "random")  # fmt: skip


@torch.no_grad()
def forward(plain, model, images) -> None:
    from laya_cli.features.extraction import to_float_images

    plain(model.backbone.adapter(to_float_images(images)))


@torch.no_grad()
def head_floor(model, images) -> None:
    """The taps, then the head intact and with each r_i := r̄_i (L + 1 head passes)."""
    from laya_cli.auditing.metrics import lolo_effects

    feats = model.features(images)
    target = model.head(feats).logits.argmax(-1)
    lolo_effects(model.head, feats, target, model.reference, "mean")


@torch.no_grad()
def network_floor(model, images) -> None:
    """The taps (one pass, each block's input kept), each block bypassed with only the blocks after it run, and
    the L + 1 head passes: ``NetworkScope.effects``, which the audit runs for Δ."""
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.features.extraction import to_float_images

    net = NetworkScope(model.backbone, model.head, None, ablation="bypass")
    x = to_float_images(images)
    hs = net.activations(x)
    feats = net.pooled(hs)
    net.effects(x, hs, feats, model.head(feats).logits.argmax(-1))


def audit(model, images, scope: str, methods: list[str], device: str = "cpu") -> None:
    from laya_cli.auditing.job import run_scoped_audit
    from laya_cli.auditing.settings import AuditSettings

    settings = AuditSettings(ablation="bypass" if scope == "network" else "mean", batch_size=len(images), device=device)
    run_scoped_audit(model, eval_data(model, images), ["laya", *methods, "random"], settings.validate(), scope)


def phases(plain, model, images, lists: dict[str, dict[str, list[str]]], device: str) -> dict:
    """Every timed phase: the forward, each scope's floor, and each scope's audit with each list of methods."""
    out = {"forward": lambda: forward(plain, model, images), "head floor": lambda: head_floor(model, images),
           "network floor": lambda: network_floor(model, images)}  # fmt: skip
    for scope, named in lists.items():
        for k, m in named.items():
            run = lambda s=scope, m=m: audit(model, images, s, m, device)  # noqa: E731
            out[f"{scope} audit ({k}: {','.join(m) or 'none'})"] = run
    return out


def measure(name: str, side: int, n_images: int, repeats: int, device: str, lists: dict) -> dict:
    """{phase: seconds, × forward, × its scope's floor} (medians over interleaved rounds), and the setting."""
    plain, model, images = build(name, side, n_images, device)
    timed = phases(plain, model, images, lists, device)
    rounds = interleaved(timed, device, repeats)
    times = {k: v["times"] for k, v in rounds.items()}
    out = {"model": name, "side": side, "images": n_images, "taps": len(model.backbone.layer_names),
           "device": device, "repeats": repeats, "phases": {}}  # fmt: skip
    for k in timed:
        floor = "head floor" if k.startswith("head") else "network floor" if k.startswith("network") else None
        out["phases"][k] = {
            "seconds": statistics.median(times[k]),
            "over_forward": median_ratio(times[k], times["forward"]),
            "over_floor": median_ratio(times[k], times[floor]) if floor and k != floor else None,
        }
    return out


def table(out: dict) -> list[str]:
    lines = [f"timm {out['model']} (random weights, frozen), {out['taps']} residual-block taps, LAYA head; "
             f"{out['images']} images {out['side']}×{out['side']}; {out['device']}; medians of {out['repeats']} rounds",
             "", "| phase | seconds | × forward | × its scope's floor |", "|---|---:|---:|---:|"]  # fmt: skip
    for k, r in out["phases"].items():
        vs = r["over_floor"]
        cell = "–" if vs is None else f"{vs:.2f}×" + (" (goal ≤ 1.5×: met)" if vs <= 1.5 else " (goal ≤ 1.5×: missed)")
        lines.append(f"| {k} | {r['seconds']:.3f} | {r['over_forward']:.2f}× | {cell} |")
    return lines


def method_lists(compare: str | None, network_compare: str | None) -> dict:
    """Per scope the default's methods (``auditing.settings.SCOPE_COMPARE``) and any list asked for beside them."""
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import compare_for

    lists = {}
    for scope, asked in (("head", compare), ("network", network_compare)):
        default = parse_methods(compare_for(None, scope))[1:-1]
        lists[scope] = {"default": default}
        if asked is not None and parse_methods(asked)[1:-1] != default:
            lists[scope]["asked"] = parse_methods(asked)[1:-1]
    return lists


def main(argv=None) -> dict:
    from laya_cli.runtime import progress

    from .say import say

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet34")
    p.add_argument("--side", type=int, default=64)
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--compare", default=None, help="head scope: time these methods beside the default's")
    p.add_argument("--network-compare", default=None, help="network scope: the same (e.g. ig,gradxact: laya before)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    progress.set_enabled(False)
    out = measure(a.model, a.side, a.images, a.repeats, "cpu", method_lists(a.compare, a.network_compare))
    out["device"] = f"cpu, {torch.get_num_threads()} torch threads"
    for line in table(out):
        say(line)
    return out


if __name__ == "__main__":
    main()
