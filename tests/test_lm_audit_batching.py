"""The per-token audit's batched work gives the per-pass / per-method loops' numbers bit for bit (issue 73,
docs/results/dispatch.md "Fourth round"): the LAYA LM head's L + 1 removal passes stacked (``removed_logits(…,
stack=True)``, what ``lolo_effects`` uses from ``STACK_MIN_ROWS`` rows on), ``by_position``'s means of every method
at once, IG's convergence delta from the batch's own p_ŷ(x) and p_ŷ(r̄) (``AttributionContext.endpoints``), and
whole audits (a language model's per-token audit, a classifier's head scope) with and without them."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from laya_cli.auditing import head_scope, metrics
from laya_cli.auditing import lm as lm_audit
from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.methods import AttributionContext
from laya_cli.auditing.metrics import STACK_MIN_ROWS, lolo_effects, target_probability
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.registry import METHODS
from laya_cli.auditing.settings import AuditSettings
from laya_cli.model import lm_heads
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.laya_model import load_model
from laya_cli.model.lm_heads import LayaLMHead, lm_from_checkpoint
from laya_cli.model.settings import HeadSettings
from laya_cli.training.lm import train_lm
from tests.helpers import make_lm_folder, sentences, small_lm_request

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _head(reads: str, layers: int = 4, width: int = 32, vocabulary: int = 97) -> LayaLMHead:
    torch.manual_seed(0)
    readout = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, vocabulary, bias=False))
    readout.vocabulary = vocabulary
    laya = LayaLMHead(layers, width, readout, HeadSettings(reads=reads)).eval()
    with torch.no_grad():  # away from the identity and a uniform α, so every pass differs
        for p in laya.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return laya


def _per_pass(laya: LayaLMHead, hs: torch.Tensor, fills, target) -> torch.Tensor:
    """Δ as the loop of L + 1 passes gives it (``removed_logits`` one pass at a time, before this round)."""
    base, *removed = (target_probability(lg, target) for lg in laya.removed_logits(hs, fills))
    return base.unsqueeze(1) - torch.stack(removed, dim=1)


@pytest.mark.parametrize("reads", ["states", "updates"])
@pytest.mark.parametrize("rows", [STACK_MIN_ROWS, 13, 31, 64, 100, 257])
def test_the_stacked_removal_passes_are_the_loops_bit_for_bit(reads, rows):
    laya = _head(reads)
    g = torch.Generator().manual_seed(rows)
    hs = torch.randn(rows, 4, 32, generator=g)
    fills = [torch.randn(32, generator=g) for _ in range(4)]
    target = torch.randint(0, 97, (rows,), generator=g)
    with torch.no_grad():
        one_by_one = list(laya.removed_logits(hs, fills))
        stacked = list(laya.removed_logits(hs, fills, stack=True))
    assert len(one_by_one) == 5 and len(stacked) == 1  # 5·rows·97 logits fit one chunk
    assert torch.equal(stacked[0], torch.cat(one_by_one))
    assert torch.equal(lolo_effects(laya, list(hs.unbind(1)), target, fills), _per_pass(laya, hs, fills, target))


def test_the_removal_passes_stack_only_as_many_as_fit_a_chunk(monkeypatch):
    """Memory: no more than ``LOGITS_PER_CHUNK`` logits at a time (at least one pass), the passes still in order."""
    laya, rows = _head("updates"), 20
    monkeypatch.setattr(lm_heads, "LOGITS_PER_CHUNK", 2 * rows * 97)
    hs = torch.randn(rows, 4, 32)
    fills = [torch.randn(32) for _ in range(4)]
    target = torch.randint(0, 97, (rows,))
    with torch.no_grad():
        stacked = list(laya.removed_logits(hs, fills, stack=True))
        one_by_one = list(laya.removed_logits(hs, fills))
    assert [len(t) for t in stacked] == [2 * rows, 2 * rows, rows]
    assert torch.equal(torch.cat(stacked), torch.cat(one_by_one))
    assert torch.equal(lolo_effects(laya, list(hs.unbind(1)), target, fills), _per_pass(laya, hs, fills, target))


def test_small_batches_keep_one_pass_per_removal(monkeypatch):
    """Below ``STACK_MIN_ROWS`` rows a CPU's matrix kernels may round otherwise: ``lolo_effects`` does not stack."""
    laya, seen = _head("states"), []
    original = LayaLMHead.removed_logits

    def spy(self, hs, fills, stack=False):
        seen.append(stack)
        return original(self, hs, fills, stack)

    monkeypatch.setattr(LayaLMHead, "removed_logits", spy)
    for rows in (STACK_MIN_ROWS - 1, STACK_MIN_ROWS):
        lolo_effects(laya, [torch.randn(rows, 32) for _ in range(4)], torch.zeros(rows, dtype=torch.long),
                     [torch.zeros(32)] * 4)  # fmt: skip
    assert seen == [False, True]


def _by_position_per_method(positions, faithfulness, d1, block):
    """``by_position`` as it was: a boolean mask per range, each method's numbers read one by one."""
    edges = torch.linspace(0, block - 1, lm_audit.POSITION_BUCKETS + 1).round().long().tolist()
    buckets = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    out = {"positions": [f"{a + 1}-{b}" for a, b in buckets], "n": [], "methods": {}}
    for a, b in buckets:
        out["n"].append(int(((positions >= a) & (positions < b)).sum()))
    for m in faithfulness:
        rows = [(positions >= a) & (positions < b) for a, b in buckets]
        out["methods"][m] = {
            "faithfulness": [float(faithfulness[m][r].nanmean()) if r.any() else None for r in rows],
            "defined": [int((~faithfulness[m][r].isnan()).sum()) for r in rows],
            "deletion@1": [float(d1[m][r].double().mean()) if r.any() else None for r in rows],
        }
    return out


@pytest.mark.parametrize("block,n", [(16, 200), (32, 64), (3, 7), (64, 2000), (128, 5000), (16, 9)])
def test_by_position_gives_the_per_method_numbers(block, n):
    g = torch.Generator().manual_seed(n)
    positions = torch.arange(block - 1).repeat(n // (block - 1) + 1)[:n]
    faithfulness, d1 = {}, {}
    for m in ("laya", "ig", "gradxact", "random"):
        rho = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
        faithfulness[m] = rho.masked_fill(torch.rand(n, generator=g) < 0.2, float("nan"))
        d1[m] = torch.randn(n, generator=g, dtype=torch.float64)
    got = lm_audit.by_position(positions, faithfulness, d1, block)
    assert json.dumps(got) == json.dumps(_by_position_per_method(positions, faithfulness, d1, block))
    if n < block - 1:  # a range without positions: None, as before
        assert None in got["methods"]["laya"]["faithfulness"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    lm_dir = make_lm_folder(root, sentences(150), 110)
    train_lm(small_lm_request(lm_dir, root / "m.pt", epochs=1))
    return lm_from_checkpoint(read_checkpoint(root / "m.pt"))


def test_a_whole_per_token_audit_is_the_same_with_the_passes_stacked_or_not(trained, monkeypatch):
    """Head and network scope, batches of 40 positions and a last one of 10 (below the guard: not stacked)."""
    settings = AuditSettings(batch_size=40, seed=3).validate()
    methods = ["laya", "ig", "gradxact", "random"]
    data = lm_audit.token_data(trained, None, 90, 4)

    def audit() -> str:
        result = lm_audit.token_audit_job(trained, methods, settings, "both", None, 90, None, data)
        return json.dumps(result.to_dict(), sort_keys=True, default=str)

    stacked = audit()
    monkeypatch.setattr(metrics, "STACK_MIN_ROWS", 10**9)  # every batch one pass per removal, as before
    monkeypatch.setattr(head_scope, "STACK_MIN_ROWS", 10**9)  # IG's convergence delta from its own passes
    assert audit() == stacked


def _endpoints(head, feats, target, ref):
    with torch.no_grad():
        base = target_probability(head(feats).logits, target)
        at_ref = target_probability(head([r.expand_as(f) for r, f in zip(ref, feats)]).logits, target)
    return base, at_ref


@pytest.mark.parametrize("reads", ["states", "updates"])
@pytest.mark.parametrize("rows", [STACK_MIN_ROWS, 42, 64])
def test_igs_convergence_delta_from_the_known_endpoints_is_its_own(reads, rows):
    """The batch forward's p_ŷ(x) and p_ŷ(r̄) (r̄ broadcast over the rows) are the two passes the convergence
    delta would run (r̄ tiled as Captum tiles it), bit for bit: the same scores and δ."""
    laya = _head(reads)
    g = torch.Generator().manual_seed(rows)
    feats = [torch.randn(rows, 32, generator=g) for _ in range(4)]
    ref = [torch.randn(32, generator=g) for _ in range(4)]
    target = torch.randint(0, 97, (rows,), generator=g)
    ctx = AttributionContext(target, ref, n_steps=8)
    own = METHODS["ig"].convergence(laya, feats, ctx)
    known = METHODS["ig"].convergence(
        laya, feats, AttributionContext(target, ref, 8, endpoints=_endpoints(laya, feats, target, ref))
    )
    assert torch.equal(own[0], known[0]) and torch.equal(own[1], known[1])


@pytest.mark.parametrize("kind", ["laya", "concat", "scalarmix", "last"])
def test_a_classifiers_head_audit_is_the_same_with_the_known_endpoints(digits_ckpts, monkeypatch, kind):
    """Batches of 16 and a last one of 5 (below the guard: IG's passes of its own), adaptive IG, every method and
    metric group."""
    model = load_model(digits_ckpts[kind])
    data = load_eval_data(model, samples=37)
    settings = AuditSettings(batch_size=16, metrics="all").validate()

    def audit() -> str:
        result = run_scoped_audit(model, data, parse_methods("all"), settings, "head")
        return json.dumps({k: v for k, v in result.to_dict().items() if k != "memory"}, sort_keys=True, default=str)

    known = audit()
    monkeypatch.setattr(head_scope, "STACK_MIN_ROWS", 10**9)
    assert audit() == known


def test_layas_scores_are_the_batch_forwards_alpha():
    """``laya`` reads α from the batch's forward (``AttributionContext.alpha``): no second head pass, the same α."""
    laya = _head("updates")
    feats = [torch.randn(20, 32) for _ in range(4)]
    target = torch.zeros(20, dtype=torch.long)
    with torch.no_grad():
        alpha = laya(feats).alpha
    calls = []
    handle = laya.register_forward_hook(lambda *_: calls.append(1))
    try:
        known = METHODS["laya"](laya, feats, AttributionContext(target, alpha=alpha))
        assert not calls
        own = METHODS["laya"](laya, feats, AttributionContext(target))
        assert len(calls) == 1
    finally:
        handle.remove()
    assert torch.equal(known, own)
