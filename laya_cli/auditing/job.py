"""The audit job ``laya audit`` and ``laya_cli.audit`` both run: the checks that need no data, then the data,
then the batch sizes the memory budget allows (``budget``), then the audit at the scope asked for, halving
the batches and retrying when the device runs out of memory. Each caller brings its own data (the command a
test split by name, the API a DataLoader), as a callable, so that a bad setting fails before any feature is
extracted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..model.evaldata import EvalData
from ..runtime.config import HEAD_ABLATIONS, AuditSettings
from ..runtime.device import check_precision, resolved_precision
from ..runtime.device import precision as device_precision
from ..runtime.errors import LayaError
from ..runtime.memory import (
    MemoryRequest,
    memory_budget,
    peak_measure,
    peak_memory_mb,
    reset_peak_memory,
    retry_halving,
)
from .budget import IG_METHODS, halver, plan_audit
from .metrics import check_ablation, head_ablation
from .network import check_network_scope, run_scoped_audit
from .results import AuditResult


def audit_job(
    model,
    load_data: Callable[[], EvalData],
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str,
    use_cache: bool = True,
    memory: MemoryRequest | None = None,
    precision: str = "auto",
) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``load_data()`` with validated ``settings`` at ``scope`` (head, network
    or both); ``use_cache``: the network scope's tap means may come from the feature cache. ``memory``: plan
    ``settings``' batch sizes within its budget first, and record the budget and the peak in the result
    (None: the settings as given, no memory keys). ``precision``: of the backbone passes (``--precision``: auto,
    bf16 on CUDA, fp32), recorded resolved in the result's settings."""
    with device_precision(check_precision(precision, settings.device)):
        result = _audit(model, load_data, methods, settings, scope, use_cache, memory)
        result.settings["precision"] = resolved_precision(settings.device)
    return result


def _audit(model, load_data, methods, settings: AuditSettings, scope: str, use_cache: bool, memory) -> AuditResult:
    if scope == "head" and settings.ablation not in HEAD_ABLATIONS:
        raise LayaError(
            f"--ablation {settings.ablation} removes a block inside the network: use it with --scope network or both"
        )
    check_ablation(model.head, head_ablation(settings.ablation))  # before any feature extraction
    if scope != "head":
        check_network_scope(model, settings.ablation, methods)  # taps that cannot be patched: before any work
    data = load_data()
    plan = None
    if memory is not None:
        reset_peak_memory(settings.device)
        plan = plan_audit(
            model, data, methods, settings, scope, memory_budget(memory.max_memory, settings.device), memory.given
        )
    steps = settings.steps if any(m in IG_METHODS for m in methods) else 0
    result, retries = retry_halving(
        lambda: run_scoped_audit(model, data, methods, settings, scope, use_cache=use_cache),
        halver(settings, steps, memory.given if memory else ()),
        settings.device,
    )
    if plan is not None:
        result.notes += plan.notes
        result.memory = plan.to_dict(peak_memory_mb(settings.device), peak_measure(settings.device))
    result.notes += retries
    return result
