"""What a network-scope audit costs, next to plain inference and to Captum's straightforward route, in one run.

    python -m laya_cli.speed.network_audit [--images 64] [--steps 32] [--device auto]
                                           [--audit-images K] [--route-images M] [--repeats 3]
    python -m benchmarks.network_audit ...   (from a checkout: the same, through a thin shim)

Model: a frozen timm:vit_tiny_patch16_224 (random weights, pretrained=False: no download), a LAYA
head over its 12 blocks (CLS token), built directly (costs do not depend on the weights); 64
random 224×224 images; the network reference = the mean block activations of 16 other images.

  plain     one inference pass of the timm model (its own classifier) over the images.
  lolo      the patched leave-one-layer-out effects alone: one pass to the last tap, then for
            each block i only blocks i+1..12 (``continue_from``) and the head. Reported in plain
            passes (target ≤ L/2 + 2 = 8).
  audit     what ``laya audit --scope network --compare ig,gradxact`` does for the images: the
            patched LOLO, laya (α), ig (Captum LayerIntegratedGradients per block on the suffix
            of the network, 32 steps), gradxact (Captum LayerGradientXActivation on all 12
            blocks in one pass), random, Spearman and Deletion@1.
  routes    network IG two ways on the same images, same numbers: ours (prefix-cached, as in
            the audit) and Captum's straightforward route — one LayerIntegratedGradients per
            block over the full model (images → ViT → head), every step a full pass. Their
            results must agree to 1e-5 (asserted here).

Plain inference and the patched LOLO always run on all ``--images``. On a CPU the network audit
is measured on ``--audit-images`` of them (8 by default) and scaled linearly to all (its work is
per image: 32 IG steps per image and block), and both IG routes on ``--route-images`` images (8 by
default) over all 12 blocks (their ratio does not depend on the number of images); the printout
says so. On CUDA everything runs on all the images. Timings: median of ``--repeats`` runs after one
warm-up (the network audit and the two routes: one run each, after a small warm-up).
"""

from __future__ import annotations

import argparse

import torch

from .audit_speed import MODEL, build, plain_inference, timed


def network_setup(model, images, device: str):
    """(NetworkScope, float images, targets, tap means of 16 other images)."""
    from ..auditing.network import NetworkScope
    from ..features.extraction import tap_means, to_float_images

    g = torch.Generator().manual_seed(1)
    others = torch.randint(0, 256, (16, *images.shape[1:]), dtype=torch.uint8, generator=g)
    reference = tap_means(model.backbone, others, device=device)
    scope = NetworkScope(model.backbone, model.head, reference)
    x = to_float_images(images.to(device))
    with torch.no_grad():
        target = scope.probs(model.backbone(x)).argmax(-1)
    return scope, x, target, reference


def lolo(scope, x, target):
    hs = scope.activations(x)
    return scope.effects(x, hs, scope.pooled(hs), target)


def network_audit(model, images, reference, steps: int, device: str, methods=("laya", "ig", "gradxact")):
    """What ``laya audit --scope network`` does for these images (one batch)."""
    from ..auditing.network import run_scoped_audit
    from ..features.extraction import LayerFeatures
    from ..model.evaldata import EvalData
    from ..runtime.config import AuditSettings

    labels = torch.zeros(len(images), dtype=torch.long)
    data = EvalData(LayerFeatures([], labels), images, torch.arange(len(images)), "random")
    settings = AuditSettings(steps=steps, batch_size=len(images), device=device)
    return run_scoped_audit(model, data, [*methods, "random"], settings, "network", reference=reference)


def ig_routes(model, scope, xs, targets, reference, steps: int, device: str) -> tuple[float, float, float]:
    """Network IG two ways on the same images: (seconds ours, seconds Captum's straightforward route, the
    largest difference of their scores), which must agree to 1e-5."""
    from ..auditing.network import full_model_layer_ig

    hs = scope.activations(xs)
    feats = scope.pooled(hs)
    ours_fn = lambda: scope.integrated_gradients(xs, hs, feats, targets, steps)
    theirs_fn = lambda: full_model_layer_ig(model.backbone, model.head, xs, targets, reference, n_steps=steps)
    scope.integrated_gradients(xs[:1], [h[:1] for h in hs], [f[:1] for f in feats], targets[:1], 2)  # warm-up
    results = {}
    t_ours = timed(lambda: results.__setitem__("ours", ours_fn()), device)
    t_theirs = timed(lambda: results.__setitem__("theirs", theirs_fn()), device)
    diff = (results["ours"] - results["theirs"]).abs().max().item()
    assert diff <= 1e-5, f"network IG differs from Captum's straightforward route by {diff:g}"
    return t_ours, t_theirs, diff


def main(argv=None) -> dict:
    from ..runtime import progress
    from ..runtime.device import resolve_device

    args = _parser().parse_args(argv)
    progress.set_enabled(False)
    device = resolve_device(args.device)
    on_gpu = device == "cuda"

    plain, model, images, _ = build(args.images, device)
    scope, x, target, reference = network_setup(model, images, device)
    L = scope.num_layers
    assert scope.prefix, "ViT blocks are a chain: the prefix-cached route must be in use"
    t_plain = timed(lambda: plain_inference(plain, model, images, device), device, args.repeats, warmup=1)
    t_lolo = timed(lambda: lolo(scope, x, target), device, args.repeats, warmup=1)
    k = min(args.audit_images or (args.images if on_gpu else 8), args.images)
    network_audit(model, images[:1], reference, 2, device)  # warm-up
    t_audit_measured = timed(lambda: network_audit(model, images[:k], reference, args.steps, device), device)
    t_audit = t_audit_measured * args.images / k
    m = min(args.route_images or (args.images if on_gpu else 8), args.images)
    t_ours, t_theirs, diff = ig_routes(model, scope, x[:m], target[:m], reference, args.steps, device)

    threads = torch.get_num_threads()
    out = {
        "device": torch.cuda.get_device_name() if on_gpu else f"cpu, {threads} torch threads",
        "images": args.images,
        "steps": args.steps,
        "layers": L,
        "plain_s": t_plain,
        "lolo_s": t_lolo,
        "audit_s": t_audit,
        "audit_measured_s": t_audit_measured,
        "audit_images": k,
        "route_images": m,
        "ours_ig_s": t_ours,
        "captum_ig_s": t_theirs,
        "max_abs_diff": diff,
        "lolo_in_plain_passes": t_lolo / t_plain,
        "audit_over_plain": t_audit / t_plain,
        "captum_over_ours": t_theirs / t_ours,
        "lolo_target": L / 2 + 2,
    }
    _report(out)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--audit-images",
        type=int,
        default=None,
        help="images the network audit is timed on, scaled linearly to --images (default: all on cuda, 8 on cpu)",
    )
    parser.add_argument(
        "--route-images", type=int, default=None, help="images for the two IG routes (default: all on cuda, 8 on cpu)"
    )
    return parser


def _report(out: dict) -> None:
    from .say import say

    n, k, m, L = out["images"], out["audit_images"], out["route_images"], out["layers"]
    say(f"{MODEL} (frozen, random weights) + LAYA head over {L} blocks; {n} images 224×224; {out['device']}")
    say(f"  plain inference (one timm forward)               {out['plain_s']:8.3f} s")
    say(f"  patched LOLO (network scope, prefix-cached)      {out['lolo_s']:8.3f} s")
    scaled = "" if k == n else f"   (measured {out['audit_measured_s']:.1f} s on {k} images, scaled ×{n / k:g})"
    say(f"  network audit: laya+ig+gradxact+random+LOLO      {out['audit_s']:8.3f} s{scaled}")
    sub = "" if m == n else f"   (on {m} of the {n} images, all {L} blocks)"
    say(f"  network IG, ours (prefix-cached)                 {out['ours_ig_s']:8.3f} s{sub}")
    say(f"  network IG, Captum LayerIG per block, full model {out['captum_ig_s']:8.3f} s{sub}")
    say(f"  max |ours − Captum's| over {m}×{L} scores         {out['max_abs_diff']:.2e}   (asserted ≤ 1e-5)")
    say(
        f"ratio patched LOLO / plain inference = {out['lolo_in_plain_passes']:.2f} plain passes   "
        f"(target ≤ L/2 + 2 = {L / 2 + 2:g})"
    )
    say(f"ratio network audit / plain inference = {out['audit_over_plain']:.1f}×")
    say(f"ratio Captum's route / ours (network IG) = {out['captum_over_ours']:.2f}×   (target ≥ 1.5×)")


if __name__ == "__main__":
    main()
