"""What `laya audit` costs, next to plain inference and to the naive Captum route, in one run.

    python -m benchmarks.audit_speed [--images 64] [--steps 32] [--device auto]
                                     [--naive-blocks K] [--naive-images M] [--repeats 3]

Model: a frozen timm:vit_tiny_patch16_224 (random weights, pretrained=False: no download)
with a LAYA head over its 12 blocks (CLS token), built directly (no training: costs do not
depend on the weights). 64 random 224×224 images.

  plain   one inference pass of the timm model (its own classifier) over the images.
  audit   what `laya audit --compare ig,gradxact` does for them: one tapped backbone pass to
          extract r_1..r_12, then on the head only: laya (α), ig (Captum IntegratedGradients
          over (r_1..r_12), at most 32 steps, each sample's steps from --ig-tol), gradxact
          (Captum InputXGradient), the LOLO effects (13 head passes), Spearman and Deletion@1.
  all     the same with ``--metrics all``: AOPC, sufficiency, completeness and the cascading
          model-randomisation check too (side by side with the default, in the same run).
  naive   per-layer IG the way one would write it without a head-level view: Captum's
          LayerIntegratedGradients over the full model (images -> ViT -> head -> p_ŷ), one
          call per block (the blocks depend on each other, so Captum cannot take them
          together), 32 steps each, input baseline = the zero (mean) image. Each call runs
          32 full forward passes and backward passes through the rest of the network.

The naive route is slow: on a CPU it is measured on ``--naive-blocks`` evenly spaced blocks
(first and last by default) and ``--naive-images`` images, then scaled linearly to 12
blocks × 64 images (Captum's chunks keep the same number of rows, so the work is linear in
both); the printout says when it is. On CUDA it runs in full by default.
Timings: ``--repeats`` rounds after one warm-up round, each round timing every phase back to back
(plain, extraction, audit, --metrics all, ig only), so that load drifting on a shared machine slows
a round's phases alike; times are medians over rounds, a ratio is the median of the per-round
ratios (the naive route: one run).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from laya_cli.auditing.names import METRIC_GROUPS

MODEL = "vit_tiny_patch16_224"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int = 1, warmup: int = 0) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(phases: dict, device: str, repeats: int, warmup: int = 1) -> dict:
    """Each phase timed once per round, the phases one after the other within a round, so that a machine whose
    load drifts slows the phases of a round alike: {phase: {"times": [...], "median": s}}."""
    for _ in range(warmup):
        for fn in phases.values():
            fn()
    times = {k: [] for k in phases}
    for _ in range(repeats):
        for k, fn in phases.items():
            times[k].append(timed(fn, device))
    return {k: {"times": t, "median": statistics.median(t)} for k, t in times.items()}


def median_ratio(num: list[float], den: list[float]) -> float:
    """The median over rounds of the per-round ratio (each round's two phases ran back to back)."""
    return statistics.median(a / b for a, b in zip(num, den))


def frozen_timm(name: str, device: str, seed: int = 0):
    """(plain timm model ``name``, laya's tapped backbone over the same frozen weights, its spec): random
    weights (pretrained=False: no download), 224×224 inputs."""
    import timm

    from laya_cli.backbones.build import BackboneSpec, build_backbone

    torch.manual_seed(seed)
    spec = BackboneSpec(
        f"timm:{name}", [], "auto", pretrained=False, finetune=False, in_channels=3, image_size=(224, 224)
    )
    backbone = build_backbone(spec).eval().to(device)
    plain = timm.create_model(name, pretrained=False).eval().to(device)
    plain.load_state_dict(backbone.model.state_dict(), strict=False)  # same trunk, plus its classifier
    for p in (*backbone.parameters(), *plain.parameters()):
        p.requires_grad_(False)
    return plain, backbone, spec


def build(n_images: int, device: str, seed: int = 0):
    """(plain timm model, LayaModel over the same weights, uint8 images, class names)."""
    from laya_cli.features.extraction import to_float_images
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel

    plain, backbone, spec = frozen_timm(MODEL, device, seed)
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n_images, 3, 224, 224), dtype=torch.uint8, generator=g)
    with torch.no_grad():
        feats = backbone(to_float_images(images).to(device))
    classes = [str(c) for c in range(10)]
    head = build_head("laya", [f.shape[-1] for f in feats], len(classes)).eval().to(device)
    model = LayaModel(backbone, head, spec, "laya", classes, [f.mean(0) for f in feats])
    return plain, model, images, classes


def plain_inference(plain, model, images, device: str):
    from laya_cli.features.extraction import to_float_images

    with torch.inference_mode():
        return plain(model.backbone.adapter(to_float_images(images.to(device))))


def audit(model, images, steps: int, device: str, methods=("laya", "ig", "gradxact"), metrics=()):
    """The audit's work for these images: one tapped backbone pass, then head-only methods and the metrics asked
    for (``metrics``: the deeper groups, as ``laya audit --metrics``)."""
    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.extraction import LayerFeatures

    feats = model.features(images.to(device))
    labels = torch.zeros(len(images), dtype=torch.long)
    settings = AuditSettings(steps=steps, batch_size=len(images), device=device, metrics=tuple(metrics))
    return run_audit(model, LayerFeatures(feats, labels), list(methods), settings)


def vit_taps(vit, x):
    """A timm ViT forward that returns the CLS token after every block (no hooks, so a
    LayerIntegratedGradients patch of block i reaches both the head's r_i and blocks > i)."""
    x = vit.patch_embed(x)
    x = vit._pos_embed(x)
    x = vit.patch_drop(x)
    x = vit.norm_pre(x)
    taps = []
    for block in vit.blocks:
        x = block(x)
        taps.append(x[:, 0])
    return taps


def naive_layer_ig(plain, model, images, blocks, steps: int, device: str, internal_batch_size: int = 64):
    """Per-layer IG over the full model, one LayerIntegratedGradients call per block: (B, len(blocks))."""
    from captum.attr import LayerIntegratedGradients

    from laya_cli.features.extraction import to_float_images

    x = model.backbone.adapter(to_float_images(images.to(device)))
    forward = lambda inp: F.softmax(model.head(vit_taps(plain, inp)).logits, dim=-1)
    with torch.no_grad():
        target = forward(x).argmax(-1)
    scores = []
    for i in blocks:
        lig = LayerIntegratedGradients(forward, plain.blocks[i])
        attr = lig.attribute(
            x,
            baselines=torch.zeros_like(x),
            target=target,
            n_steps=steps,
            internal_batch_size=max(internal_batch_size, len(x)),
        )
        scores.append(attr.flatten(1).sum(-1).detach())
    return torch.stack(scores, 1)


def evenly_spaced(n: int, k: int) -> list[int]:
    if k >= n:
        return list(range(n))
    if k == 1:
        return [n // 2]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs before each timing (0: a smoke run)")
    parser.add_argument(
        "--naive-blocks", type=int, default=None, help="blocks measured (default: all on cuda, 2 on cpu)"
    )
    parser.add_argument(
        "--naive-images", type=int, default=None, help="images measured (default: all on cuda, 8 on cpu)"
    )
    return parser


def main(argv=None) -> dict:
    from laya_cli.runtime import progress
    from laya_cli.runtime.device import resolve_device

    args = _parser().parse_args(argv)
    progress.set_enabled(False)  # a benchmark process of its own
    device = resolve_device(args.device)
    on_gpu = device == "cuda"

    plain, model, images, _ = build(args.images, device)
    n_blocks = len(plain.blocks)
    phases = {
        "plain": lambda: plain_inference(plain, model, images, device),
        "extract": lambda: model.features(images.to(device)),
        "audit": lambda: audit(model, images, args.steps, device),
        "all": lambda: audit(model, images, args.steps, device, metrics=METRIC_GROUPS),
        "ig_only": lambda: audit(model, images, args.steps, device, methods=("ig",)),
    }
    rounds = interleaved(phases, device, args.repeats, args.warmup)
    t_plain, t_extract, t_audit, t_all, t_ig_only = (rounds[k]["median"] for k in phases)

    k = min(args.naive_blocks or (n_blocks if on_gpu else 2), n_blocks)
    m = min(args.naive_images or (args.images if on_gpu else 8), args.images)
    blocks = evenly_spaced(n_blocks, k)
    naive_lig = lambda: naive_layer_ig(plain, model, images[:m], blocks, args.steps, device)
    if args.warmup:
        naive_layer_ig(plain, model, images[:1], blocks[:1], 2, device)  # warm-up
    t_naive_measured = timed(naive_lig, device)
    scale = (n_blocks / len(blocks)) * (args.images / m)
    t_naive = t_naive_measured * scale

    threads = torch.get_num_threads()
    out = {
        "device": torch.cuda.get_device_name() if on_gpu else f"cpu, {threads} torch threads",
        "images": args.images,
        "steps": args.steps,
        "blocks": n_blocks,
        "plain_s": t_plain,
        "extract_s": t_extract,
        "audit_s": t_audit,
        "audit_all_metrics_s": t_all,
        "extract_plus_ig_s": t_ig_only,
        "naive_s": t_naive,
        "naive_measured_s": t_naive_measured,
        "naive_blocks": blocks,
        "naive_images": m,
        "naive_scale": scale,
        "audit_over_plain": median_ratio(rounds["audit"]["times"], rounds["plain"]["times"]),
        "audit_all_metrics_over_plain": median_ratio(rounds["all"]["times"], rounds["plain"]["times"]),
        "naive_over_audit": t_naive / t_audit,
        "naive_over_extract_plus_ig": t_naive / t_ig_only,
    }
    _report(out)
    return out


def _report(out: dict) -> None:
    from .say import say

    t_extract, blocks, m, scale = out["extract_s"], out["naive_blocks"], out["naive_images"], out["naive_scale"]
    say(f"{MODEL} (frozen, random weights) + LAYA head over {out['blocks']} blocks; {out['images']} images 224×224; "
        f"{out['device']}")  # fmt: skip
    say(f"  plain inference (one timm forward)          {out['plain_s']:8.3f} s")
    say(
        f"  audit: laya,ig,gradxact, default, +feats     {out['audit_s']:8.3f} s   "
        f"(feature extraction {t_extract:.3f} s, head work {out['audit_s'] - t_extract:.3f} s)"
    )
    t_all = out["audit_all_metrics_s"]
    say(f"  audit: the same with --metrics all           {t_all:8.3f} s   (head work {t_all - t_extract:.3f} s)")
    say(f"  audit: ig only, incl. features               {out['extract_plus_ig_s']:8.3f} s")
    extrap = (
        ""
        if scale == 1
        else f"   (measured {out['naive_measured_s']:.1f} s on blocks {blocks} × {m} images, scaled ×{scale:g})"
    )
    say(f"  naive Captum LayerIG, {out['blocks']} blocks × {out['steps']} steps {out['naive_s']:8.1f} s{extrap}")
    met = "met" if out["audit_over_plain"] <= 1.1 else "MISSED"
    say(f"ratio audit / plain inference   = {out['audit_over_plain']:.2f}×   (target ≤ 1.1×) {met}")
    say(f"ratio --metrics all / plain     = {out['audit_all_metrics_over_plain']:.2f}×   (no target: on request)")
    say(f"ratio naive / audit             = {out['naive_over_audit']:.0f}×   (target ≥ 20×)")
    say(f"ratio naive / (features + ig)   = {out['naive_over_extract_plus_ig']:.0f}×")


if __name__ == "__main__":
    main()
