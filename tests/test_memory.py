"""--max-memory: the budget, the plan of batch sizes before a run, halve-and-retry on an out-of-memory error
(injected on the CPU), and the memory keys of the JSON. The CUDA branches run with torch.cuda's memory
functions replaced (no GPU here)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_close_tree, assert_user_error, invoke

from laya_cli.auditing import budget, job
from laya_cli.auditing.settings import AuditSettings
from laya_cli.data.settings import EvalDataSettings
from laya_cli.exporting.settings import ExportSettings
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.laya_model import load_model
from laya_cli.runtime import memory
from laya_cli.runtime.errors import LayaError
from laya_cli.runtime.memory import MemoryBudget, MemoryRequest, MiB


@pytest.mark.parametrize(
    "text,want",
    [
        ("2G", ("bytes", 2 * 1024**3)),
        ("2GB", ("bytes", 2 * 1024**3)),
        ("1.5GiB", ("bytes", 1.5 * 1024**3)),
        ("512M", ("bytes", 512 * MiB)),
        ("65536k", ("bytes", 64 * MiB)),
        ("3000000000", ("bytes", 3e9)),
        ("0.5", ("fraction", 0.5)),
        ("1", ("fraction", 1.0)),
    ],
)
def test_max_memory_sizes_and_fractions(text, want):
    assert memory.parse_max_memory(text) == want


@pytest.mark.parametrize("text", ["0", "-0.5", "2X", "G", "10", "lots"])
def test_bad_max_memory_is_a_one_line_error(text):
    with pytest.raises(LayaError, match="--max-memory"):
        memory.parse_max_memory(text)


def test_default_budget_is_half_the_free_memory_on_top_of_what_is_held(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000 * MiB)
    monkeypatch.setattr(memory, "in_use_bytes", lambda device="cpu": 300 * MiB)
    b = memory.memory_budget(None, "cpu")
    assert (b.total, b.work) == (800 * MiB, 500 * MiB)
    assert memory.memory_budget("0.25").total == 550 * MiB
    assert memory.memory_budget("1G").work == 1024 * MiB - 300 * MiB
    assert memory.memory_budget("100M").work == 0  # less than what is held: nothing left to plan with


def test_cuda_branches_read_torch_cuda_memory(monkeypatch):
    """No GPU here: torch.cuda's memory functions are replaced; the CUDA branches must call them."""
    calls = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (4096 * MiB, 8192 * MiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 1024 * MiB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 1536 * MiB)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    b = memory.memory_budget(None, "cuda")
    assert (b.total, b.in_use) == (1024 * MiB + 2048 * MiB, 1024 * MiB)
    assert "CUDA memory" in b.describe()
    assert memory.peak_memory_mb("cuda:0") == 1536
    assert memory.peak_measure("cuda") == "torch.cuda.max_memory_allocated"
    memory.reset_peak_memory("cuda")
    memory.free_cached("cuda")
    assert calls == ["reset", "empty"]
    assert memory.peak_measure("cpu") == "process peak RSS"


def test_retry_halving_retries_only_out_of_memory():
    sizes, seen = [8], []

    def run():
        seen.append(sizes[0])
        if sizes[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return sizes[0]

    def halve():
        sizes[0] //= 2
        return f"{sizes[0] * 2} -> {sizes[0]}"

    result, notes = memory.retry_halving(run, halve)
    assert (result, seen) == (2, [8, 4, 2])
    assert len(notes) == 2 and "8 -> 4" in notes[0] and "OutOfMemoryError" in notes[0]
    with pytest.raises(ValueError):
        memory.retry_halving(lambda: (_ for _ in ()).throw(ValueError("no")), halve)
    with pytest.raises(LayaError, match="even with batches of one"):
        memory.retry_halving(lambda: (_ for _ in ()).throw(torch.OutOfMemoryError("x")), lambda: None)


# --------------------------------------------------------------------------- the plan


def _budget(work_mb: float) -> MemoryBudget:
    return MemoryBudget(total=int((100 + work_mb) * MiB), in_use=100 * MiB)


def test_plan_lowers_the_ig_internal_batch_first_then_the_batch(digits_ckpt):
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=64)
    c = budget.row_costs(model, data.images, "cpu")
    assert (
        c.features == 4 * sum(f.shape[-1] for f in data.features.feats) and c.head > 0 and c.backbone > 0 and c.taps > 0
    )

    roomy = AuditSettings(steps=32, batch_size=64)
    plan = budget.plan_audit(model, data, ["laya", "ig"], roomy, "head", _budget(10_000))
    assert (plan.settings.batch_size, plan.settings.internal_batch_size, plan.notes) == (64, None, [])

    full = budget.audit_bytes(c, 64, 64 * 32, "head", False)
    tight = AuditSettings(steps=32, batch_size=64)
    plan = budget.plan_audit(model, data, ["laya", "ig"], tight, "head", _budget(full / MiB / 4))
    assert plan.settings.batch_size == 64 and plan.settings.internal_batch_size < 64 * 32
    assert tight.internal_batch_size is None  # the plan made new settings; the caller's are as they were
    assert plan.estimate <= plan.budget.work and "IG internal batch" in plan.notes[0]

    starved = AuditSettings(steps=32, batch_size=64)
    plan = budget.plan_audit(model, data, ["laya", "ig"], starved, "network", _budget(0.01))
    assert plan.settings.batch_size == 1 and plan.settings.internal_batch_size == 1

    mine = AuditSettings(steps=32, batch_size=64, internal_batch_size=4096)
    plan = budget.plan_audit(
        model, data, ["ig"], mine, "head", _budget(0.01), given={"batch_size", "internal_batch_size"}
    )
    assert (plan.settings.batch_size, plan.settings.internal_batch_size) == (64, 4096)
    assert plan.notes[0].startswith("warning: the estimated working memory")


def test_network_ig_rows_never_go_below_one_step_of_the_batch():
    assert budget.ig_rows(16, 32, None, network=True) == 512
    assert budget.ig_rows(16, 32, 100, network=True) == 96
    assert budget.ig_rows(16, 32, 5, network=True) == 16
    assert budget.ig_rows(16, 32, 5, network=False) == 5


# --------------------------------------------------------------------------- an injected OOM


def _oom_once(monkeypatch, owner, name):
    """``owner.name`` raises torch.OutOfMemoryError on its first call, then behaves."""
    real, calls = getattr(owner, name), []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, flaky)
    return calls


@pytest.mark.parametrize("scope", ["head", "network"])
def test_an_out_of_memory_error_halves_and_retries_with_the_same_numbers(digits_ckpt, monkeypatch, scope):
    import captum.attr

    model = load_model(digits_ckpt)
    methods = ["laya", "ig", "gradxact", "random"]
    clean = job.audit_job(
        model, lambda: load_eval_data(model, samples=48), methods, AuditSettings(steps=8, batch_size=16), scope
    ).to_dict()
    owner = captum.attr.IntegratedGradients if scope == "head" else captum.attr.LayerIntegratedGradients
    calls = _oom_once(monkeypatch, owner, "attribute")
    settings = AuditSettings(steps=8, batch_size=16)
    result = job.audit_job(model, lambda: load_eval_data(model, samples=48), methods, settings, scope)
    assert len(calls) > 1
    assert settings.internal_batch_size is None and settings.batch_size == 16  # halved in new settings, not these
    assert any("out of memory (OutOfMemoryError): IG internal batch 128 -> 64 rows" in n for n in result.notes)
    retried = result.to_dict()
    key = "methods" if scope == "head" else "network"
    # The same numbers: IG's steps now run in two chunks of 4 (float rounding of their sum only).
    assert_close_tree(retried[key], clean[key], 1e-6)


def test_export_retries_with_half_the_head_batch(digits_ckpt, monkeypatch, tmp_path):
    from laya_cli.exporting import folder as export_run

    settings, data = ExportSettings(plots=False, device="cpu"), EvalDataSettings(samples=40)
    clean = export_run.run_export(digits_ckpt, tmp_path / "a", settings, data)
    calls = _oom_once(monkeypatch, export_run, "_predict")
    again = export_run.run_export(digits_ckpt, tmp_path / "b", settings, data, memory=MemoryRequest("4G"))
    assert len(calls) == 2 and any("1024 -> 512 samples per head pass" in n for n in again.notes)
    assert again.table.equals(clean.table)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["model"]["memory"]["memory_budget_mb"] == 4096 and summary["model"]["memory"]["peak_memory_mb"] > 0


# --------------------------------------------------------------------------- the commands


def test_audit_json_reports_budget_estimate_and_peak(digits_ckpt, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", str(digits_ckpt), "--samples", "40", "--steps", "4", "--json", str(out), "--max-memory", "1M")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["memory_budget_mb"] == 1.0 and doc["peak_memory_mb"] > 1 and doc["memory_estimate_mb"] > 0
    assert doc["peak_memory_measure"] == "process peak RSS"
    assert (doc["settings"]["batch_size"], doc["settings"]["internal_batch_size"]) == (1, 1)
    assert any(n.startswith("memory budget 1 MiB") for n in doc["notes"])
    mine = tmp_path / "b.json"
    r = invoke("audit", str(digits_ckpt), "--samples", "40", "--steps", "4", "--json", str(mine), "--batch-size", "8",
               "--max-memory", "1M")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(mine.read_text())
    assert doc["settings"]["batch_size"] == 8 and any(n.startswith("warning: the estimated") for n in doc["notes"])


@pytest.mark.parametrize("command", ["audit", "export", "depth"])
def test_bad_max_memory_exits_2_before_any_work(digits_ckpt, tmp_path, command):
    r = invoke(command, str(digits_ckpt), "--max-memory", "lots")
    assert_user_error(r, "--max-memory must be a size")


def test_depth_plans_its_batch_within_the_budget(digits_ckpt, tmp_path):
    out = tmp_path / "d.json"
    r = invoke("depth", str(digits_ckpt), "--samples", "40", "--time-repeats", "0", "--json", str(out),
               "--max-memory", "1M")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["batch_size"] == 1 and doc["settings"]["memory_budget_mb"] == 1.0
    assert doc["settings"]["peak_memory_mb"] > 1


def test_output_bytes_survive_an_fx_trace_under_the_hooks():
    """torchvision backbones trace an FX graph on their first call: if that happens while the row-cost hooks are on,
    the hooks see FX Proxies, which count nothing (they once recursed without end: convnext_tiny, maxvit_t)."""
    from torch import nn

    from laya_cli.auditing.budget import _OutputBytes

    class Scale(nn.Module):  # not a torch.nn module: the tracer runs through it, hooks and all
        def forward(self, x):
            return x * 2

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def forward(self, x):
            return self.scale(x) + 1

    net = Net()
    with _OutputBytes(net) as counted:
        torch.fx.symbolic_trace(net)
        net(torch.zeros(2, 3))
    assert counted.total == 2 * 3 * 4  # the real call's float32 output; the trace's Proxies counted nothing
