"""GPU throughput: frozen ViT-B/16 feature extraction in fp32 and bf16, and the audit against plain inference.

    python -m benchmarks.gpu [--images 1024] [--audit-images 256] [--steps 32] [--repeats 3] [--json FILE]
    python -m benchmarks.gpu ...   (from a checkout: the same, through a thin shim)

Needs a CUDA device. Without one it prints one line saying so and exits 0 (nothing failed: there is
nothing to measure), so it can sit in any script.

Model: timm ``vit_base_patch16_224`` with random weights (``pretrained=False``: no download; throughput
does not depend on the weights), frozen, tapped after its 12 blocks (CLS token), a LAYA head over them;
``--images`` seeded random 224×224 uint8 images in host memory (pinned copies, as laya's loaders give
them on CUDA).

  extraction  laya's own extraction (``features.extraction.extract``: batches of 256, pinned asynchronous
              copies, every tap pooled, features back on the host in float32) under ``--precision fp32``
              and ``--precision bf16`` (CUDA autocast): images per second.
  plain       one inference pass of the timm model (its own classifier) over ``--audit-images`` images,
              at the same precision as the audit's backbone pass.
  audit       what ``laya audit --compare ig,gradxact`` does for them: the backbone pass (features), then
              on the head laya, ig (32 steps), gradxact, random, the LOLO effects and the default metrics.

Timings: median of ``--repeats`` runs after one warm-up, with ``torch.cuda.synchronize`` around each.
Targets printed beside the figures: bf16 / fp32 extraction ≥ 1.5×; audit / plain ≤ 1.1× (issue 25's target
for the default audit); the whole run under 300 s.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from .audit_speed import frozen_timm, timed

MODEL = "vit_base_patch16_224"


def build(device: str, name: str = MODEL):
    """(plain timm model ``name``, LayaModel over the same frozen weights)."""
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel

    plain, backbone, spec = frozen_timm(name, device)
    dims = backbone.dims(backbone.probe_input(1))
    head = build_head("laya", dims, 10).eval().to(device)
    return plain, LayaModel(backbone, head, spec, "laya", [str(c) for c in range(10)], [torch.zeros(d) for d in dims])


def extraction_rate(model, images, precision: str, repeats: int, device: str = "cuda") -> float:
    """Images per second of laya's extraction at ``precision``."""
    from laya_cli.features.extraction import extract
    from laya_cli.runtime.device import precision as at

    labels = torch.zeros(len(images), dtype=torch.long)
    with at(precision):
        run = lambda: extract(model.backbone, images, labels, device=device, shard=False)
        return len(images) / timed(run, device, repeats, warmup=1)


def audit_and_plain(
    plain, model, images, precision: str, steps: int, repeats: int, device: str = "cuda"
) -> tuple[float, float]:
    """(seconds of the default audit, seconds of plain inference) on ``images`` at ``precision``."""
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.run import run_audit
    from laya_cli.features.extraction import LayerFeatures, to_float_images
    from laya_cli.runtime.config import AuditSettings
    from laya_cli.runtime.device import autocast, to_device
    from laya_cli.runtime.device import precision as at

    labels = torch.zeros(len(images), dtype=torch.long)
    settings = AuditSettings(steps=steps, batch_size=len(images), device=device)
    methods = parse_methods("ig,gradxact")

    def plain_pass():
        with torch.inference_mode(), autocast(device):
            return plain(model.backbone.adapter(to_float_images(to_device(images, device))))

    def audit():
        return run_audit(model, LayerFeatures(model.features(images), labels), methods, settings)

    with at(precision):
        return timed(audit, device, repeats, warmup=1), timed(plain_pass, device, repeats, warmup=1)


def run(
    images: int = 1024, audit_images: int = 256, steps: int = 32, repeats: int = 3, device="cuda", name=MODEL
) -> dict:
    """The figures of the module doc. ``device``/``name`` other than CUDA/ViT-B: only the tests' smoke run
    of the code path on a CPU (where bf16 autocast is off: both precisions then run fp32)."""
    from laya_cli.runtime import progress

    progress.set_enabled(False)
    start = time.perf_counter()
    plain, model = build(device, name)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (images, 3, 224, 224), dtype=torch.uint8, generator=g)
    on_gpu = device.startswith("cuda")
    x = x.pin_memory() if on_gpu else x
    where = torch.cuda.get_device_name() if on_gpu else device
    out = {"device": where, "model": name, "images": images, "audit_images": audit_images}
    for p in ("fp32", "bf16"):
        out[f"extract_{p}_img_s"] = extraction_rate(model, x, p, repeats, device)
        audit_s, plain_s = audit_and_plain(plain, model, x[:audit_images], p, steps, repeats, device)
        out[f"audit_{p}_s"], out[f"plain_{p}_s"], out[f"audit_over_plain_{p}"] = audit_s, plain_s, audit_s / plain_s
    out["bf16_over_fp32"] = out["extract_bf16_img_s"] / out["extract_fp32_img_s"]
    out["seconds"] = time.perf_counter() - start
    return out


def report(r: dict) -> list[str]:
    return [
        f"{r['model']} (frozen, random weights) + LAYA head over 12 blocks; {r['device']}",
        f"  extraction, fp32                    {r['extract_fp32_img_s']:9,.0f} images/s   ({r['images']} images)",
        f"  extraction, bf16 autocast           {r['extract_bf16_img_s']:9,.0f} images/s   "
        f"bf16 / fp32 = {r['bf16_over_fp32']:.2f}×   (target ≥ 1.5×)",
        f"  audit / plain inference, fp32       {r['audit_over_plain_fp32']:9.2f}×          "
        f"({r['audit_fp32_s']:.3f} s / {r['plain_fp32_s']:.3f} s, {r['audit_images']} images; target ≤ 1.1×)",
        f"  audit / plain inference, bf16       {r['audit_over_plain_bf16']:9.2f}×          "
        f"({r['audit_bf16_s']:.3f} s / {r['plain_bf16_s']:.3f} s, {r['audit_images']} images; target ≤ 1.1×)",
        f"  whole run                           {r['seconds']:9.0f} s          (target < 300 s)",
    ]


def main(argv=None) -> dict:
    from .say import say

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1024, help="images for the extraction rates")
    ap.add_argument("--audit-images", type=int, default=256, help="images for the audit / plain ratio")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        say("no CUDA device on this machine: python -m benchmarks.gpu measures GPU throughput, nothing measured")
        return {"cuda": False}
    r = run(args.images, min(args.audit_images, args.images), args.steps, args.repeats)
    for line in report(r):
        say(line)
    if args.json_out:
        from laya_cli.runtime.fileio import atomic_write_text

        atomic_write_text(args.json_out, json.dumps(r, indent=2) + "\n")
    return r


if __name__ == "__main__":
    main()
