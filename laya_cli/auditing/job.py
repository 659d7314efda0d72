"""The audit job ``laya audit`` and ``laya_cli.audit`` both run: the checks that need no data, then the data,
then the batch sizes the memory budget allows (``budget``), then the audit at the scope asked for, halving
the batches and retrying when the device runs out of memory. Each caller brings its own data (the command a
test split by name, the API a DataLoader), as a callable, so that a bad setting fails before any feature is
extracted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from torch import Tensor

from ..data.settings import EvalDataSettings
from ..model.checkpoint import untrained_backbone
from ..model.evaldata import EvalData, load_eval_data
from ..model.laya_model import model_from_checkpoint
from ..runtime.device import check_precision, resolved_precision
from ..runtime.device import precision as device_precision
from ..runtime.distributed import is_main
from ..runtime.environment import RunSettings
from ..runtime.errors import LayaError
from ..runtime.memory import (
    MemoryRequest,
    memory_budget,
    peak_measure,
    peak_memory_mb,
    reset_peak_memory,
    retry_halving,
)
from ..runtime.progress import log
from .budget import Halver, plan_audit
from .estimate import audit_eta
from .flags import chance_rate
from .head_scope import record_collapse, run_audit
from .metrics import accuracy, check_removal
from .network.batches import NetworkRun, network_scope, probe_batch, run_network
from .network.checks import check_network_scope
from .plan import AuditPlan, audit_methods
from .registry import having
from .results import AuditResult
from .settings import AuditSettings
from .verdict import mark_references


def data_fingerprint(ckpt: dict, data: EvalDataSettings) -> str | None:
    """The audited data's fingerprint (data/pinning.py): the checkpoint's, checked against the data it read, where
    the audit read the recorded data; None for other data (``--dataset``, ``--data-dir``) or an older checkpoint."""
    return ckpt.get("dataset", {}).get("fingerprint") if data.dataset is None and data.data_dir is None else None


def audit_classifier_checkpoint(
    path,
    ckpt: dict,
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str,
    data: EvalDataSettings,
    check_planned: Callable = lambda samples, model: None,
    run: RunSettings | None = None,
    network_methods: Sequence[str] | None = None,
) -> AuditResult:
    """``laya audit``'s job on a classifier's checkpoint (``ckpt``, read from ``path``; the task chose it:
    ``exporting.tasks``), audited on its test split (or ``data``'s). ``check_planned(samples, model)``: what the
    caller checks against the model before any work (the gates' baseline); ``run``: the memory the batches are
    planned within, the precision and the feature cache (None: the batches as given, the defaults);
    ``network_methods``: those the network scope computes (``settings.network_methods``; None: ``methods``)."""
    laya_model = model_from_checkpoint(ckpt)
    check_planned(data.samples, laya_model)
    load_data = partial(
        load_eval_data, laya_model, data.dataset, data.data_dir, data.samples, settings.seed, settings.device,
        run is None or run.cache, stream=True, encoding=data.encoding,
    )  # fmt: skip
    how = {} if run is None else {"use_cache": run.cache, "memory": run.memory, "precision": run.precision}
    result = audit_job(laya_model, load_data, methods, settings, scope, **how, network_methods=network_methods)
    result.settings.update({"model": str(path), "samples": data.samples, "data_dir": data.data_dir})
    result.settings["data_fingerprint"] = data_fingerprint(ckpt, data)
    if (untrained := untrained_backbone(ckpt)) is not None:
        result.notes.append(f"warning: {untrained}")
    return result


def audit_job(
    model,
    load_data: Callable[[], EvalData],
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str,
    use_cache: bool = True,
    memory: MemoryRequest | None = None,
    precision: str = "auto",
    network_methods: Sequence[str] | None = None,
) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``load_data()`` with validated ``settings`` at ``scope`` (head, network
    or both); ``use_cache``: the network scope's tap means may come from the feature cache. ``memory``: plan
    ``settings``' batch sizes within its budget first, and record the budget and the peak in the result
    (None: the settings as given, no memory keys). ``precision``: of the backbone passes (``--precision``: auto,
    bf16 on CUDA, fp32), recorded resolved in the result's settings. ``network_methods``: those the network scope
    computes (None: ``methods``)."""
    with device_precision(check_precision(precision, settings.device)):
        result = _audit(model, load_data, methods, settings, scope, use_cache, memory, network_methods)
        result.settings["precision"] = resolved_precision(settings.device)
    return result


def check_audit(model, methods: Sequence[str], settings: AuditSettings, scope: str) -> None:
    """What fails before any feature extraction: the removal checked once against the scope and the head; at network
    scope, taps that cannot be patched or that the gradient methods cannot reach; --by-class where no head scope
    runs (its table would silently be missing)."""
    if settings.by_class and scope == "network":
        raise LayaError("--by-class covers the head scope only: add --scope head or --scope both")
    removal = settings.removal.at(scope)
    check_removal(model.head, removal.head)
    if scope != "head":
        check_network_scope(model, removal.network, methods)


def _audit(
    model, load_data, methods, settings: AuditSettings, scope: str, use_cache: bool, memory, network_methods=None
) -> AuditResult:
    check_audit(model, methods, settings, scope)
    data = load_data()
    plan = None
    if memory is not None:
        reset_peak_memory(settings.device)
        plan = plan_audit(
            model, data, methods, settings, scope, memory_budget(memory.max_memory, settings.device), memory.given
        )
        settings = plan.settings
    halve = Halver(settings, settings.steps if having("ig_rows", methods) else 0)
    result, retries = retry_halving(
        lambda: run_scoped_audit(
            model, data, methods, halve.settings, scope, use_cache=use_cache, network_methods=network_methods
        ),
        halve,
        settings.device,
    )
    if plan is not None:
        result.notes += plan.notes
        result.memory = plan.to_dict(peak_memory_mb(settings.device), peak_measure(settings.device))
    result.notes += retries
    return result


def run_scoped_audit(
    model,
    eval_data,
    methods: Sequence[str],
    settings: AuditSettings | None = None,
    scope: str = "both",
    reference: Sequence[Tensor] | None = None,
    use_cache: bool = True,
    prefix: bool | None = None,
    network_methods: Sequence[str] | None = None,
) -> AuditResult:
    """``laya audit --scope head|network|both``: the head scope's ``run_audit``, the network-scope audit
    (``network.batches``), or both and their comparison. ``eval_data`` must hold the images (EvalData) at network
    scope.

    ``methods``: as ``run_audit`` takes them (in any case). ``reference``: the unpooled activation a
    patched layer takes (default: ``network_reference``). Streams in batches of ``settings.batch_size``;
    under torchrun the batches are sharded as in ``run_audit`` and the per-sample numbers gathered.
    Returns an ``AuditResult`` whose ``network`` holds the network scope (for ``network`` alone its
    head-scope ``methods`` are empty).

    ``network_methods``: the methods the network scope computes (None: ``methods``; ``settings.network_methods``:
    a default audit's leave IG out there), the head scope computing ``methods``.

    ``settings`` and ``scope`` are trusted as validated (``laya audit`` and ``laya_cli.audit`` validate them, and
    ``check_audit`` checks the removal and that the taps can be patched, before any work).
    """
    settings = settings or AuditSettings()
    if scope == "head":
        return mark_references(run_audit(model, eval_data, methods, settings))
    images = getattr(eval_data, "images", None)
    if images is None:
        raise LayaError("a network-scope audit runs the backbone: it needs the images (EvalData), not features")
    network = methods if network_methods is None else network_methods
    plan = AuditPlan.prepare(model, network, settings, len(images), len(model.backbone.layer_names))
    net = network_scope(model, settings, reference, use_cache, prefix)
    run = NetworkRun.prepare(plan, net, eval_data, both=scope == "both")
    probe = partial(probe_batch, run)
    if is_main() and (line := audit_eta(model.backbone, images, plan.active, net.prefix, settings, probe)):
        log(line)  # before the work: what it will cost and how to make it cheaper
    head_result = run_audit(model, eval_data, methods, settings) if scope == "both" else None
    layer_names = list(getattr(model, "layer_names", None) or model.backbone.layer_names)
    network, common = run_network(run, images, layer_names)
    result = head_result or _network_only(plan, eval_data, common, layer_names, model)
    result.settings["scope"] = scope
    result.network = network
    mark_references(result)
    result.notes += left_out_note(methods, network.methods)
    return result


def left_out_note(methods: Sequence[str], computed) -> list[str]:
    """The note of the named methods a default audit's network scope left out (``settings.network_methods``)."""
    left = [m for m in audit_methods(methods) if m not in computed]
    if not left:
        return []
    names = ", ".join(left)
    return [
        f"network scope: {names} left out by default (a reference there: the total effects computed another way, "
        f"most of the network scope's cost); --compare naming it runs it"
    ]


def _network_only(plan: AuditPlan, eval_data, common: dict[str, Tensor], layer_names: list[str], model) -> AuditResult:
    """The result of ``--scope network``: no head-scope method; the accuracy, and α's collapse, over the samples."""
    result = AuditResult(
        settings=plan.settings_dict(eval_data),
        n_samples=len(common["label"]),
        accuracy=accuracy(common["pred"], common["label"]),
        layers=layer_names,
        methods={},
        notes=plan.notes(),
        groups=(),  # the network scope computes no deeper metric
    )
    record_collapse(result, common.get("alpha"), model)
    result.chance = chance_rate(common["label"].tolist(), len(getattr(model, "classes", None) or []))  # its flag
    return result
