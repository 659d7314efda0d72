"""The audit job ``laya audit`` and ``laya_cli.audit`` both run: the checks that need no data, then the data,
then the audit at the scope asked for. Each caller brings its own data (the command a test split by name, the
API a DataLoader), as a callable, so that a bad setting fails before any feature is extracted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..model.evaldata import EvalData
from ..runtime.config import AuditSettings
from .metrics import check_ablation
from .network import check_network_scope, run_scoped_audit
from .results import AuditResult


def audit_job(
    model,
    load_data: Callable[[], EvalData],
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str,
    use_cache: bool = True,
) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``load_data()`` with validated ``settings`` at ``scope`` (head, network
    or both); ``use_cache``: the network scope's tap means may come from the feature cache."""
    check_ablation(model.head, settings.ablation)  # before any feature extraction
    if scope != "head":
        check_network_scope(model, settings.ablation)  # taps that cannot be patched: before any work
    return run_scoped_audit(model, load_data(), methods, settings, scope, use_cache=use_cache)
