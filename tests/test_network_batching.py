"""Issue 73, network scope: the batch's work in fewer operations gives the numbers of the loop it replaced, bit for
bit (every method's ρ, tie flags and Deletion@1 in one set of kernels instead of one per method)."""

from __future__ import annotations

import pytest

from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.metrics import deletion_at_1, spearman_rows, tie_undefined
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.network import batches
from laya_cli.auditing.settings import AuditSettings
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.laya_model import load_model


def _loop_score_methods(run, b, rows, degenerate) -> None:
    """The per-method loop ``batches._score_methods`` replaced (main before issue 73's third round), verbatim."""
    s, head, delta = run.plan.settings, run.net.head, b.delta
    for m in run.computed:
        a = batches._scores_on(run, m, b).cpu()
        rho = spearman_rows(a, delta, s.tie_tol)
        rows["rho"].append({m: rho})
        rows["tie"].append({m: tie_undefined(rho, spearman_rows(a, delta), delta, s.tie_tol)})
        rows["d1"].append({m: deletion_at_1(a, delta, s.tie_tol)[0]})
        if run.both and batches.METHODS[m].network:
            rows["cross"].append({m: spearman_rows(batches.METHODS[m](head, b.feats, b.ctx).cpu(), a)})


def _without_memory(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("memory", "seconds", "time")}


@pytest.mark.parametrize("tie_tol", [0.0, 1e-4])
def test_network_batch_equals_the_per_method_loop_bit_for_bit(digits_ckpt, monkeypatch, tie_tol):
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)  # a last partial batch too
    methods = parse_methods("all")
    settings = AuditSettings(steps=4, batch_size=16, tie_tol=tie_tol, metrics="all").validate()
    new = run_scoped_audit(model, data, methods, settings, "both").to_dict()
    with monkeypatch.context() as patched:
        patched.setattr(batches, "_score_methods", _loop_score_methods)
        old = run_scoped_audit(model, data, methods, settings, "both").to_dict()
    assert _without_memory(new) == _without_memory(old)
    assert new["network"]["methods"]  # the comparison is about something
