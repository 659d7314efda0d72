"""The zoo sweep: the conformance check of ``benchmarks/zoo/conformance.py`` over whole ecosystems, not a curated list.

    python -m benchmarks.zoo --sweep [--source timm,torchvision] [--only NAME,NAME] [--markdown FILE] [--threads N]

- **timm**: one model per architecture family (``timm.list_modules()``): the one with the fewest
  parameters among the family's smallest-sounding names (``test_*``, ``atto``, ``nano``, ``tiny``…),
  counted on the meta device (nothing allocated).
- **torchvision**: every classification model (``torchvision.models.list_models(module=torchvision.models)``).

Random weights (nothing is downloaded), the default taps, two images at 64×64 — or 112×112, or the
model's own input size, where it cannot take the smaller. Each model passes when its taps are its declared
stages (timm: the stages ``feature_info`` declares, r_i equal to timm's own ``forward_intermediates``
pooled; torchvision: ≥ 3 taps in depth order) and its r_i are B×d (d = ``num_chs`` for timm). Prints
the counts per source and a table (model, family, taps, widths, formats, how read, input, seconds);
``--markdown`` writes it for docs/backbones.md.

``--only`` takes family names (``coat``, ``twins``) and backbone names (``timm:coat_lite_tiny``,
``torchvision:alexnet``). Another ecosystem is one more entry in ``SOURCES``.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .conformance import TORCHVISION_ZOO, ZooModel, ZooResult, build, check_structure

SMALL_SIDES = (64, 112)  # input sides tried first (112: patch 14 and 16 both divide it); then the model's own
SMALL_SIDE = SMALL_SIDES[0]


@dataclass(frozen=True)
class SweepSource:
    """One ecosystem the sweep covers. Another (Hugging Face families built from small configs, say) is one more
    entry in ``SOURCES``: its models, what passing means, and — for models that take no images — ``run``, how
    one model is checked."""

    label: str  # what the counts line counts: "timm families"
    entries: Callable[[Sequence[str]], list[ZooModel]]  # the models to run; given names: only those
    passing: str = "tap their declared stages"  # what the counts line says of the models that pass
    skipped: dict[str, str] = field(default_factory=dict)  # left out on purpose: name -> why
    native_side: Callable[[ZooModel], int] = lambda entry: 224  # the model's own input side
    run: Callable[[ZooModel], ZooResult] | None = None  # None: ``sweep_one`` (images, the structure check)


# --------------------------------------------------------------------------- timm: one model per family

# Size words in timm model names, smallest first (``test_*`` are timm's own tiny test configurations).
SIZE_WORDS = ("test", "atto", "femto", "pico", "nano", "zepto", "xxxs", "xxs", "xs", "tiny", "mini", "micro", "small")


def _size_rank(name: str) -> tuple[int, int]:
    for rank, word in enumerate(SIZE_WORDS):
        if re.search(rf"(^|_){word}", name):
            return rank, len(name)
    return len(SIZE_WORDS), len(name)


def smallest_timm_model(family: str, shortlist: int = 6) -> str:
    """The model of a timm family with the fewest parameters among its ``shortlist`` smallest-sounding names."""
    import timm

    best: tuple[int, str] | None = None
    for name in sorted(timm.list_models(module=family), key=_size_rank)[:shortlist]:
        try:
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = timm.create_model(name, pretrained=False, num_classes=0)
        except Exception:  # a name that does not build here: the next one
            continue
        params = sum(p.numel() for p in model.parameters())
        if best is None or params < best[0]:
            best = (params, name)
    if best is None:
        raise RuntimeError(f"no model of timm family {family} builds")
    return best[1]


def _timm_family_of(model_name: str) -> str:
    import timm

    return next((m for m in timm.list_modules() if model_name in timm.list_models(module=m)), "?")


def timm_entries(only: Sequence[str] = ()) -> list[ZooModel]:
    import timm

    families = [f for f in timm.list_modules() if f not in TIMM_SKIPPED]
    named = [n.removeprefix("timm:") for n in only if n.startswith("timm:")]
    if only:
        families = [f for f in families if f in only]
    out = [ZooModel(f"timm:{smallest_timm_model(f)}", f, SMALL_SIDE) for f in families]
    return out + [ZooModel(f"timm:{n}", _timm_family_of(n), SMALL_SIDE) for n in named]


def timm_native_side(entry: ZooModel) -> int:
    import timm

    cfg = timm.get_pretrained_cfg(entry.name.removeprefix("timm:"))
    return int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224


TIMM_SKIPPED: dict[str, str] = {}  # every timm family is an image model laya taps


# --------------------------------------------------------------------------- torchvision: every classifier


def torchvision_entries(only: Sequence[str] = ()) -> list[ZooModel]:
    import torchvision

    known = {e.name: e.widths for e in TORCHVISION_ZOO}  # the curated zoo knows these models' stage widths
    out = []
    for name in torchvision.models.list_models(module=torchvision.models):
        builder = torchvision.models.get_model_builder(name)
        family = builder.__module__.rsplit(".", 1)[-1]
        full = f"torchvision:{name}"
        if not only or name in only or full in only or family in only:
            out.append(ZooModel(full, family, SMALL_SIDE, known.get(full, ())))
    return out


def torchvision_native_side(entry: ZooModel) -> int:
    import torchvision

    try:
        weights = torchvision.models.get_model_weights(entry.name.removeprefix("torchvision:")).DEFAULT
        return int(weights.transforms().crop_size[0])
    except Exception:
        return 224


# --------------------------------------------------------------------------- Hugging Face: small configs


def hf_entries(only: Sequence[str]) -> list[ZooModel]:
    from .hf import HF_ZOO

    return [ZooModel(f"hf:{e.name}", e.kind, 32) for e in HF_ZOO if not only or f"hf:{e.name}" in only]


def hf_run(entry: ZooModel) -> ZooResult:
    """``hf.check``: built from its small config, saved with save_pretrained, tapped as ``hf:DIR``."""
    import tempfile

    from .hf import HF_ZOO, check

    family = next(e for e in HF_ZOO if f"hf:{e.name}" == entry.name)
    with tempfile.TemporaryDirectory() as tmp:
        r = check(family, Path(tmp))
    return ZooResult(entry, r.taps, r.widths, r.formats, r.ok, r.seconds, r.error, "replay" if r.prefix_cached else "")


SOURCES: dict[str, SweepSource] = {
    "timm": SweepSource("timm families", timm_entries, skipped=TIMM_SKIPPED, native_side=timm_native_side),
    "torchvision": SweepSource(
        "torchvision models",
        torchvision_entries,
        passing="tap their family's stages (≥ 3, in depth order)",
        native_side=torchvision_native_side,
    ),
    "hf": SweepSource(
        "HF families",
        hf_entries,
        passing="tap every layer (pool of their kind, prefix cached)",
        run=hf_run,
    ),
}


# --------------------------------------------------------------------------- running


def sweep_one(entry: ZooModel, native_side: int) -> ZooResult:
    """Check the model at the smallest side it takes (it builds and runs there); the seconds count every try."""
    start = time.perf_counter()
    result = ZooResult(entry)
    for side in dict.fromkeys((*SMALL_SIDES, native_side)):
        result = ZooResult(replace(entry, size=side))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                backbone = build(result.model)
                with torch.no_grad():
                    backbone(torch.rand(1, 3, side, side))
        except Exception as e:  # the model cannot run at this side: the next one
            result.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_structure(result.model, backbone, result)
            result.passed = True
        except Exception as e:  # a benchmark reports failures, it does not stop
            result.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        break
    result.seconds = time.perf_counter() - start
    return result


def run_sweep(sources: Sequence[str], only: Sequence[str] = (), say=print) -> dict[str, list[ZooResult]]:
    out: dict[str, list[ZooResult]] = {}
    for key in sources:
        source = SOURCES[key]
        start = time.perf_counter()
        entries = source.entries(only)
        say(f"{source.label}: {len(entries)} to run (chosen in {time.perf_counter() - start:.0f} s)")
        out[key] = []
        for entry in entries:
            r = source.run(entry) if source.run else sweep_one(entry, source.native_side(entry))
            status = "pass" if r.passed else f"FAIL {r.error[:110]}"
            where = f"{entry.family:26s} {entry.name:44s}"
            say(f"  {where} {len(r.taps):3d} taps {r.model.size:4d}px {r.seconds:6.1f}s  {status}")
            out[key].append(r)
    return out


def counts(results: dict[str, list[ZooResult]]) -> list[str]:
    lines = []
    for key, rs in results.items():
        source = SOURCES[key]
        line = f"{source.label}: {sum(r.passed for r in rs)}/{len(rs)} {source.passing}"
        if source.skipped:
            line += f" ({len(source.skipped)} left out: " + "; ".join(f"{k}: {v}" for k, v in source.skipped.items())
            line += ")"
        lines.append(line)
    return lines


def _taps_text(taps: list[str]) -> str:
    return f"{len(taps)}: {taps[0]} … {taps[-1]}" if len(taps) > 1 else ", ".join(taps) or "—"


def _widths_text(widths: list[int]) -> str:
    if len(widths) > 4 and len(set(widths)) == 1:
        return f"{widths[0]} ×{len(widths)}"
    return "/".join(map(str, widths))


READ_BY = {"hooks": "hooks", "fx": "torchvision fx", "intermediates": "forward_intermediates"}


def sweep_markdown(results: dict[str, list[ZooResult]], seconds: float) -> str:
    head = (
        "| model | family | taps | widths | formats | read by | input | seconds |\n|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for rs in results.values():
        for r in rs:
            taps = _taps_text(r.taps) if r.passed else f"**fails**: {r.error[:140]}"
            rows.append(
                f"| `{r.model.name}` | {r.model.family} | {taps} | {_widths_text(r.widths)} | "
                f"{', '.join(dict.fromkeys(r.formats))} | {READ_BY.get(r.engine, r.engine)} | {r.model.size} | "
                f"{r.seconds:.1f} |"
            )
    tail = "\n".join(f"- {line}" for line in counts(results)) + f"\n\nThe whole sweep: {seconds / 60:.1f} min.\n"
    return head + "\n".join(rows) + "\n\n" + tail
