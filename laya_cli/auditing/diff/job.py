"""What ``laya diff A.pt B.pt`` runs: both checkpoints checked to be comparable (the same taps and classes), both
audited on the same samples, their per-sample numbers compared (``compare``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...data.settings import EvalDataSettings, check_encoding
from ...model.evaldata import load_eval_data
from ...model.laya_model import model_from_checkpoint
from ...runtime.errors import LayaError
from ..metrics import check_removal
from ..network.checks import check_network_scope
from ..settings import Removal
from .compare import DiffResult, compare_profiles
from .profiles import model_profiles, network_deltas
from .settings import DiffSettings


def check_comparable(a, b, path_a: str, path_b: str) -> None:
    """A LayaError unless both models tap the same layers and predict the same classes."""
    la, lb = list(a.layer_names), list(b.layer_names)
    if la != lb:
        raise LayaError(
            f"laya diff compares two versions of a model with the same taps, but {path_a} taps "
            f"{len(la)} layers ({', '.join(la)}) and {path_b} taps {len(lb)} ({', '.join(lb)})"
        )
    if list(a.classes) != list(b.classes):
        raise LayaError(f"{path_a} and {path_b} predict different classes: nothing to compare class by class")


def check_gate(changed_if: str | None, classes: list[str]) -> str | None:
    """``--fail-if-changed``: ``any`` or the name of a class (any case), checked before the work."""
    if changed_if is None:
        return None
    if changed_if.lower() == "any":
        return "any"
    for c in classes:
        if c.lower() == changed_if.lower():
            return c
    raise LayaError(f"--fail-if-changed {changed_if}: no such class (any, or one of {', '.join(classes)})")


def diff_classifier_checkpoints(
    paths: tuple[str, str],
    ckpts: tuple[dict, dict],
    settings: DiffSettings,
    data: EvalDataSettings,
    on_classes: Callable[[list[str]], None] = lambda classes: None,
    use_cache: bool = True,
) -> DiffResult:
    """``laya diff``'s job on two classifiers' checkpoints (``ckpts``, read from ``paths``; their task chose it:
    ``exporting.tasks``), compared class by class (``diff_models``); ``on_classes(classes)``: what the caller
    checks against their classes before any work (``--fail-if-changed``)."""
    path_a, path_b = paths
    a, b = (model_from_checkpoint(c) for c in ckpts)
    check_comparable(a, b, str(path_a), str(path_b))
    on_classes(list(a.classes))
    where = (data.dataset, data.data_dir, data.samples, settings.seed)
    return diff_models(a, b, str(path_a), str(path_b), *where, settings, use_cache, data.encoding)


def diff_models(
    a,
    b,
    path_a: str,
    path_b: str,
    dataset: str | None = None,
    data_dir: str | None = None,
    samples: int | None = None,
    seed: int = 0,
    settings: DiffSettings | None = None,
    use_cache: bool = True,
    encoding: str | None = None,
) -> DiffResult:
    """Two comparable classifiers (``a`` and ``b``, loaded from ``path_a`` and ``path_b``) on the same samples,
    compared; ``settings.scope``: where a layer is removed for Δ (``head``: at the head's inputs, direct effects;
    ``network``: patched inside the backbone, total effects)."""
    settings = settings or DiffSettings()
    scope, device = settings.scope, settings.device
    if scope not in ("head", "network"):
        raise LayaError(f"--scope {scope}: laya diff takes head or network")
    removal = Removal.parse(settings.ablation)
    check_diff(a, b, removal, scope)
    check_encoding(encoding)  # before any work
    data_a = load_eval_data(a, dataset, data_dir, samples, seed, device, use_cache=use_cache, encoding=encoding)
    data_b = load_eval_data(b, dataset, data_dir, samples, seed, device, use_cache=use_cache, encoding=encoding)
    if not np.array_equal(np.asarray(data_a.index), np.asarray(data_b.index)):
        raise LayaError(f"{path_a} and {path_b} were evaluated on different samples: give both the same --dataset")
    result = compare_models(a, b, data_a, data_b, settings, removal, device, scope, use_cache)
    result.settings.update(model_a=str(path_a), model_b=str(path_b), samples=samples, sample_seed=seed)
    return result


def check_diff(a, b, removal: Removal, scope: str) -> None:
    """Before any work: the removal checked once against the scope and both heads; at network scope, taps that
    cannot be patched."""
    removal.at(scope, "--scope network")
    for model in (a, b):
        check_removal(model.head, removal.head)
        if scope == "network":
            check_network_scope(model, removal.network)


def compare_models(
    a, b, data_a, data_b, settings: DiffSettings, removal: Removal, device: str, scope: str = "head", use_cache=True
) -> DiffResult:
    """Two loaded, comparable models on their evaluation data (the same samples in the same order), compared:
    what ``laya diff`` and ``laya_cli.diff`` both run. ``removal``: checked (``check_diff``)."""
    pa = model_profiles(a, data_a.features, removal.head, device=device)
    pb = model_profiles(b, data_b.features, removal.head, device=device)
    if scope == "network":
        pa.delta = network_deltas(a, data_a.images, removal.network, device=device, use_cache=use_cache)
        pb.delta = network_deltas(b, data_b.images, removal.network, device=device, use_cache=use_cache)
    result = compare_profiles(pa, pb, list(a.classes), list(a.layer_names), settings)
    result.settings.update(
        model_a="A", model_b="B", dataset=getattr(data_a, "dataset", None), ablation=removal.name,
        head_a=a.head_kind, head_b=b.head_kind, scope=scope,
    )  # fmt: skip
    return result
