"""What a network-scope audit costs, next to plain inference and to Captum's straightforward route, in one run.

    python -m benchmarks.network_audit [--images 64] [--steps 32] [--device auto]
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
            of the network, each (image, block)'s steps from --ig-tol, at most 32), gradxact
            (Captum LayerGradientXActivation on all 12 blocks in one pass), random, Spearman and
            Deletion@1.
  routes    network IG two ways on the same images: ours (prefix-cached, steps per (image,
            block) from --ig-tol, as in the audit) and Captum's straightforward route — one
            LayerIntegratedGradients per block over the full model (images → ViT → head), 32
            steps, every step a full pass — with the completeness of each (1 − mean |Σ attributions
            − Δ| / mean |Δ|, Δ the total effects). At the same fixed steps the two must agree to
            1e-5 (asserted here, on 2 images).

Plain inference and the patched LOLO always run on all ``--images``. On a CPU the network audit
is measured on ``--audit-images`` of them (8 by default) and scaled linearly to all (its work is
per image: IG's steps per image and block), and both IG routes on ``--route-images`` images (8 by
default) over all 12 blocks (their ratio does not depend on the number of images); the printout
says so. On CUDA everything runs on all the images. Timings: median of ``--repeats`` runs after one
warm-up (the network audit and the two routes: one run each, after a small warm-up).
"""

from __future__ import annotations

import argparse

import torch

from laya_cli.auditing.settings import AuditSettings

from .audit_speed import MODEL, build, plain_inference, timed


def network_setup(model, images, device: str):
    """(NetworkScope, float images, targets, tap means of 16 other images)."""
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.features.extraction import tap_means, to_float_images

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
    from laya_cli.auditing.job import run_scoped_audit
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.evaldata import EvalData

    labels = torch.zeros(len(images), dtype=torch.long)
    data = EvalData(LayerFeatures([], labels), images, torch.arange(len(images)), "random")
    settings = AuditSettings(steps=steps, batch_size=len(images), device=device)
    return run_scoped_audit(model, data, [*methods, "random"], settings, "network", reference=reference)


def completeness_of(scores, effects) -> float:
    """1 − mean |Σ attributions − Δ| / mean |Δ| over (image, layer): with ``reduce="sum"`` a layer's score is
    the sum of its attributions, so every route's completeness is measured alike (docs/metrics.md)."""
    from laya_cli.auditing.metrics import completeness

    return completeness((scores - effects).abs(), effects.abs())[0]


def ig_routes(model, scope, xs, targets, reference, steps: int, tol: float, device: str) -> dict:
    """Network IG two ways on the same images: ours (prefix-cached, steps chosen per (image, layer) from the
    convergence delta at ``tol``) and Captum's straightforward route (``steps`` for every one): their seconds,
    completeness and steps. With fixed steps the two must agree to 1e-5 (checked on two images)."""
    from laya_cli.auditing.network.patching import full_model_layer_ig

    hs = scope.activations(xs)
    feats = scope.pooled(hs)
    effects = scope.effects(xs, hs, feats, targets)
    ours_fn = lambda: scope.adaptive_integrated_gradients(xs, hs, feats, targets, effects, steps, tol)
    theirs_fn = lambda: full_model_layer_ig(model.backbone, model.head, xs, targets, reference, n_steps=steps)
    two = slice(0, 2)
    fixed = scope.integrated_gradients(xs[two], [h[two] for h in hs], [f[two] for f in feats], targets[two], steps)
    check = full_model_layer_ig(model.backbone, model.head, xs[two], targets[two], reference, n_steps=steps)
    diff = (fixed - check).abs().max().item()
    assert diff <= 1e-5, f"network IG differs from Captum's straightforward route by {diff:g}"
    results = {}
    t_ours = timed(lambda: results.__setitem__("ours", ours_fn()), device)
    t_theirs = timed(lambda: results.__setitem__("theirs", theirs_fn()), device)
    (ours, used), theirs = results["ours"], results["theirs"]
    return {
        "ours_ig_s": t_ours,
        "captum_ig_s": t_theirs,
        "max_abs_diff": diff,
        "ig_tol": tol,
        "ours_mean_steps": used.double().mean().item(),
        "ours_completeness": completeness_of(ours, effects),
        "captum_completeness": completeness_of(theirs, effects),
        "ours_vs_captum_max_abs": (ours - theirs).abs().max().item(),
    }


def convergence(images: int, steps: list[int], device: str = "cpu") -> list[dict]:
    """How fast IG converges on the benchmark's ViT-tiny, per number of Gauss–Legendre steps (what the first steps
    of ``auditing/ig_steps.py`` rest on): at network scope mean |δ| / mean |Δ| over (image, block) and the largest
    |δ|; at head scope IG's completeness over the same images (1 − mean |δ| / mean |p_ŷ(x) − p_ŷ(r̄)|)."""
    from laya_cli.auditing.methods import AttributionContext
    from laya_cli.auditing.metrics import completeness, target_probability
    from laya_cli.auditing.registry import METHODS

    _, model, imgs, _ = build(images, device)
    scope, x, target, _ = network_setup(model, imgs, device)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    effects = scope.effects(x, hs, feats, target).abs()
    reference = [r.to(device) for r in model.reference]
    with torch.no_grad():
        p_ref = target_probability(model.head([r.expand_as(f) for r, f in zip(reference, feats)]).logits, target)
        head_effect = (target_probability(model.head(feats).logits, target) - p_ref).abs()
    rows = []
    for n in steps:
        deltas = torch.stack(
            [scope._layer_ig(i, h, feats[:i], target, n, None, "sum")[1].abs() for i, h in enumerate(hs)], 1
        )
        _, head_delta = METHODS["ig"].convergence(model.head, feats, AttributionContext(target, reference, n_steps=n))
        rows.append(
            {
                "steps": n,
                "network_gap": (deltas.double().mean() / effects.double().mean()).item(),
                "network_max_abs": deltas.max().item(),
                "head_completeness": completeness(head_delta.abs(), head_effect)[0],
            }
        )
    return rows


def routes_only(images: int, steps: int, device: str, tol: float = AuditSettings.ig_tol) -> dict:
    """The two network-IG routes alone (``python -m benchmarks`` runs this): seconds, steps, completeness."""
    _, model, imgs, _ = build(images, device)
    scope, x, target, reference = network_setup(model, imgs, device)
    hs = scope.activations(x[:1])
    scope.integrated_gradients(x[:1], hs, scope.pooled(hs), target[:1], 2)  # warm-up
    out = ig_routes(model, scope, x, target, reference, steps, tol, device)
    return {**out, "route_images": images, "steps": steps, "captum_over_ours": out["captum_ig_s"] / out["ours_ig_s"]}


def main(argv=None) -> dict:
    from laya_cli.runtime import progress
    from laya_cli.runtime.device import resolve_device

    args = _parser().parse_args(argv)
    progress.set_enabled(False)
    device = resolve_device(args.device)
    on_gpu = device == "cuda"
    if args.convergence:
        return _report_convergence(convergence(args.images, [int(s) for s in args.convergence.split(",")], device))

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
    routes = ig_routes(model, scope, x[:m], target[:m], reference, args.steps, args.ig_tol, device)

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
        **routes,
        "lolo_in_plain_passes": t_lolo / t_plain,
        "audit_over_plain": t_audit / t_plain,
        "captum_over_ours": routes["captum_ig_s"] / routes["ours_ig_s"],
        "lolo_target": L / 2 + 2,
    }
    _report(out)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--ig-tol", type=float, default=AuditSettings.ig_tol, help="ours: laya audit's --ig-tol")
    parser.add_argument(
        "--convergence",
        metavar="STEPS,STEPS",
        help="only IG's convergence per number of steps (e.g. 4,8,16,32) on --images images, then exit",
    )
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


def _report_convergence(rows: list[dict]) -> list[dict]:
    from .say import say

    say(f"IG convergence on {MODEL} (random weights): Gauss–Legendre steps vs the gap to completeness")
    say("  steps   network: mean|δ| / mean|Δ|   largest |δ|   head: completeness")
    for r in rows:
        say(
            f"  {r['steps']:5d}   {r['network_gap']:24.2e}   {r['network_max_abs']:11.1e}   "
            f"{r['head_completeness']:.10f}"
        )
    return rows


def _report(out: dict) -> None:
    from .say import say

    n, k, m, L = out["images"], out["audit_images"], out["route_images"], out["layers"]
    say(f"{MODEL} (frozen, random weights) + LAYA head over {L} blocks; {n} images 224×224; {out['device']}")
    say(f"  plain inference (one timm forward)               {out['plain_s']:8.3f} s")
    say(f"  patched LOLO (network scope, prefix-cached)      {out['lolo_s']:8.3f} s")
    scaled = "" if k == n else f"   (measured {out['audit_measured_s']:.1f} s on {k} images, scaled ×{n / k:g})"
    say(f"  network audit: laya+ig+gradxact+random+LOLO      {out['audit_s']:8.3f} s{scaled}")
    sub = "" if m == n else f"   (on {m} of the {n} images, all {L} blocks)"
    say(
        f"  network IG, ours (prefix-cached, --ig-tol {out['ig_tol']:g})  {out['ours_ig_s']:8.3f} s   "
        f"mean {out['ours_mean_steps']:.1f} steps, completeness {out['ours_completeness']:.5f}{sub}"
    )
    say(
        f"  network IG, Captum LayerIG per block, full model {out['captum_ig_s']:8.3f} s   "
        f"{out['steps']} steps, completeness {out['captum_completeness']:.5f}"
    )
    say(
        f"  max |ours − Captum's| at {out['steps']} steps each (2 images)  "
        f"{out['max_abs_diff']:.2e}   (asserted ≤ 1e-5)"
    )
    say(f"  max |ours adaptive − Captum's| over {m}×{L} scores  {out['ours_vs_captum_max_abs']:.2e}")
    say(
        f"ratio patched LOLO / plain inference = {out['lolo_in_plain_passes']:.2f} plain passes   "
        f"(target ≤ L/2 + 2 = {L / 2 + 2:g})"
    )
    say(f"ratio network audit / plain inference = {out['audit_over_plain']:.1f}×")
    say(f"ratio Captum's route / ours (network IG) = {out['captum_over_ours']:.2f}×   (target ≥ 2×)")
    no_worse = out["ours_completeness"] >= out["captum_completeness"]
    say(
        f"completeness ours {out['ours_completeness']:.5f} vs Captum's {out['captum_completeness']:.5f}   "
        f"(target: no worse) {'met' if no_worse else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
