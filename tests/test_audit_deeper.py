"""The deeper audit metrics (docs/metrics.md): deletion curve and AOPC, sufficiency and the insertion
curve, IG completeness, the model-randomisation sanity check; each against a by-hand reference on a
tiny head (one sample, one layer set at a time), Captum's own convergence delta, and in run_audit."""

import json
import math
from functools import partial

import pytest
import torch
from captum.attr import IntegratedGradients
from helpers import head_only_model, make_attribution_inputs
from scipy.stats import spearmanr

from laya_cli.auditing.head_scope import run_audit
from laya_cli.auditing.methods import AttributionContext
from laya_cli.auditing.metrics import (
    ablated_probability,
    aopc,
    completeness,
    deletion_at_1,
    deletion_curve,
    insertion_curve,
    keep_only_probability,
    lolo_effects,
    rank_layers,
    target_probability,
)
from laya_cli.auditing.names import METRIC_GROUPS, parse_methods, parse_metric_groups
from laya_cli.auditing.registry import METHODS, Method
from laya_cli.auditing.settings import AuditSettings
from laya_cli.features.extraction import LayerFeatures
from laya_cli.gates.thresholds import Threshold, check_thresholds, parse_thresholds
from laya_cli.model.heads import cascade_stages, randomised_copy
from laya_cli.runtime.errors import LayaError


def Deeper(**kw) -> AuditSettings:
    """Settings that compute every deeper metric group, IG at exactly ``steps`` (the by-hand references')."""
    return AuditSettings(**{"metrics": METRIC_GROUPS, "ig_tol": 0.0, **kw})


DIMS = [7, 5, 6, 4]
L, C = len(DIMS), 4


make = partial(make_attribution_inputs, batch=9, dims=DIMS, num_classes=C)  # (head, feats, ref, target)


def data(feats):
    return LayerFeatures(feats, torch.arange(len(feats[0])) % C)


# --------------------------------------------------------------------------- by-hand references: one sample at a time


def p_one(head, feats, b, target, removed, ref, ablation):
    """p_ŷ of sample b with the layers in ``removed`` (a set) taken away, built by hand for that one sample."""
    rows = [f[b : b + 1].clone() for f in feats]
    with torch.no_grad():
        if ablation == "mask":
            mask = torch.tensor([[0.0 if i in removed else 1.0 for i in range(len(rows))]])
            logits = head(rows, alpha_mask=mask).logits
        else:
            for i in removed:
                rows[i] = torch.zeros_like(rows[i]) if ablation == "zero" else ref[i].view(1, -1).clone()
            logits = head(rows).logits
    return torch.softmax(logits, -1)[0, target[b]].item()


def ranking(scores_row):
    """Layer indices by score, highest first (the test scores have no ties)."""
    return sorted(range(len(scores_row)), key=lambda i: -float(scores_row[i]))


REMOVALS = ["mean", "zero", "mask"]


@pytest.mark.parametrize("ablation", REMOVALS)
def test_ablated_probability_removes_the_given_layers_per_row(ablation):
    head, feats, ref, target = make()
    g = torch.Generator().manual_seed(3)
    removed = torch.rand(len(target), L, generator=g) < 0.5
    ours = ablated_probability(head, feats, target, removed, ref, ablation)
    for b in range(len(target)):
        want = p_one(head, feats, b, target, {i for i in range(L) if removed[b, i]}, ref, ablation)
        assert ours[b].item() == pytest.approx(want, abs=1e-6)
    # K variants at once equal K separate calls
    stacked = torch.stack([removed, ~removed])
    both = ablated_probability(head, feats, target, stacked, ref, ablation)
    torch.testing.assert_close(both[0], ours)
    torch.testing.assert_close(both[1], ablated_probability(head, feats, target, ~removed, ref, ablation))


def test_rank_layers_highest_first_and_ties_broken_by_keys():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.3], [1.0, 1.0, 0.0, 1.0]])
    assert rank_layers(scores).tolist() == [[1, 2, 3, 0], [0, 1, 3, 2]]  # no keys: ties keep the layer order
    keys = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.7, 0.2, 0.5, 0.1]])
    assert rank_layers(scores, keys).tolist() == [[1, 2, 3, 0], [3, 1, 0, 2]]  # tied layers by ascending key


@pytest.mark.parametrize("ablation", REMOVALS)
def test_deletion_and_insertion_curves_by_hand(ablation):
    head, feats, ref, target = make()
    a = METHODS["laya"](head, feats, None)
    order = rank_layers(a)
    dc = deletion_curve(head, feats, target, order, ref, ablation)
    ic = insertion_curve(head, feats, target, order, ref, ablation)
    assert dc.shape == ic.shape == (len(target), L)
    for b in range(len(target)):
        rank = ranking(a[b])
        full = p_one(head, feats, b, target, set(), ref, ablation)
        for k in range(1, L + 1):
            top = set(rank[:k])
            assert dc[b, k - 1].item() == pytest.approx(
                full - p_one(head, feats, b, target, top, ref, ablation), abs=1e-6
            )
            assert ic[b, k - 1].item() == pytest.approx(
                p_one(head, feats, b, target, set(range(L)) - top, ref, ablation), abs=1e-6
            )
    # D_1 is Deletion@1 (no ties here); I_L is p_ŷ(x)
    d1 = deletion_at_1(a, lolo_effects(head, feats, target, ref, ablation))[0]
    torch.testing.assert_close(dc[:, 0].double(), d1, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ic[:, -1], target_probability(head(feats).logits, target).detach(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("ablation", REMOVALS)
def test_keep_only_probability_by_hand(ablation):
    head, feats, ref, target = make()
    keep = keep_only_probability(head, feats, target, ref, ablation)
    for b in range(len(target)):
        for i in range(L):
            want = p_one(head, feats, b, target, set(range(L)) - {i}, ref, ablation)
            assert keep[b, i].item() == pytest.approx(want, abs=1e-6)


def test_aopc_is_samek_mean_with_d0_zero():
    curve = torch.tensor([[0.4, 0.5, 0.1], [0.0, -0.2, 0.3]])
    for row, value in zip(curve, aopc(curve)):
        drops = [0.0, *row.tolist()]  # D_0 = p(x) − p(x) = 0
        assert value.item() == pytest.approx(sum(drops) / len(drops))
    assert aopc(curve).dtype == torch.float64


def test_completeness_summary_and_captums_own_delta():
    head, feats, ref, target = make(batch=11)
    ctx = AttributionContext(target, ref, n_steps=4)
    scores, delta = METHODS["ig"].convergence(head, feats, ctx)
    torch.testing.assert_close(scores, METHODS["ig"](head, feats, ctx))  # same scores as the plain method
    # Captum's own delta for the same call, and the definition by hand: Σ raw attributions − (p(x) − p(r̄))
    forward = lambda *r: torch.softmax(head(list(r)).logits, -1)
    inputs = tuple(f.clone().requires_grad_(True) for f in feats)
    attrs, captum_delta = IntegratedGradients(forward).attribute(
        inputs, baselines=tuple(r.view(1, -1) for r in ref), target=target, n_steps=4, return_convergence_delta=True
    )
    torch.testing.assert_close(delta, captum_delta, atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        p = lambda fs: torch.softmax(head(fs).logits, -1).gather(1, target[:, None]).squeeze(1)
        effect = p(feats) - p([r.expand_as(f) for r, f in zip(ref, feats)])
    by_hand = sum(a.sum(-1) for a in attrs).detach() - effect
    torch.testing.assert_close(delta, by_hand, atol=1e-6, rtol=1e-5)
    score, err, eff = completeness(delta.abs(), effect.abs())
    assert err == pytest.approx(delta.abs().double().mean().item())
    assert eff == pytest.approx(effect.abs().double().mean().item())
    assert score == pytest.approx(1 - err / eff)
    assert math.isnan(completeness(torch.tensor([0.1]), torch.tensor([0.0]))[0])  # no effect: undefined


# --------------------------------------------------------------------------- model randomisation


@pytest.mark.parametrize(
    "kind, stages",
    [
        ("laya", ["classifier", "scorer", "adapters"]),
        ("last", ["classifier"]),
        ("concat", ["classifier", "adapters"]),
        ("scalarmix", ["classifier", "gamma", "mix_logits", "adapters"]),
    ],
)
def test_randomised_copy_cascades_and_never_touches_the_head(kind, stages):
    head, *_ = make(kind)
    assert cascade_stages(head) == stages  # ψ = identity has no parameters: skipped
    before = {k: v.clone() for k, v in head.state_dict().items()}
    rng = torch.get_rng_state()
    copies = [randomised_copy(head, k + 1, seed=5) for k in range(len(stages))]
    assert torch.equal(torch.get_rng_state(), rng)  # the global random state is left alone
    assert all(torch.equal(v, before[k]) for k, v in head.state_dict().items())
    for k, copy in enumerate(copies):
        for name, value in copy.state_dict().items():
            group = name.split(".")[0]
            changed = not torch.equal(value, before[name])
            assert changed == (group in stages[: k + 1]), (k, name)
            if k and group in stages[:k]:  # a group re-initialised the same way at every later stage
                assert torch.equal(value, copies[k - 1].state_dict()[name])
    again = randomised_copy(head, len(stages), seed=5).state_dict()
    other = randomised_copy(head, len(stages), seed=6).state_dict()
    assert all(torch.equal(again[k], v) for k, v in copies[-1].state_dict().items())
    assert not all(torch.equal(other[k], v) for k, v in again.items())


def test_psi_mlp_is_a_stage():
    from laya_cli.model.heads import build_head
    from laya_cli.model.settings import HeadSettings

    head = build_head("laya", DIMS, C, HeadSettings(d_star=8, score_hidden=16, psi="mlp"))
    assert cascade_stages(head) == ["classifier", "scorer", "psi", "adapters"]


# --------------------------------------------------------------------------- run_audit


def test_run_audit_new_metrics_equal_by_hand_references():
    head, feats, ref, target = make(batch=20)
    model = head_only_model(head, ref, C)
    state = {k: v.clone() for k, v in head.state_dict().items()}
    result = run_audit(model, data(feats), parse_methods("ig"), Deeper(batch_size=8, steps=6, seed=2))
    assert all(torch.equal(v, state[k]) for k, v in head.state_dict().items())  # the model is never modified
    stages = cascade_stages(head)
    assert result.randomisation_stages == stages
    keep = keep_only_probability(head, feats, target, ref)
    for m in ("laya", "ig"):
        s = result.methods[m]
        ctx = AttributionContext(target, ref, n_steps=6)
        a = METHODS[m](head, feats, ctx)
        dc = deletion_curve(head, feats, target, rank_layers(a), ref)
        ic = insertion_curve(head, feats, target, rank_layers(a), ref)
        assert s.aopc == pytest.approx(aopc(dc).mean().item(), abs=1e-6)
        assert s.deletion_curve == pytest.approx(dc.double().mean(0).tolist(), abs=1e-6)
        assert s.insertion_curve == pytest.approx(ic.double().mean(0).tolist(), abs=1e-6)
        top = a.argmax(-1)
        assert s.sufficiency == pytest.approx(keep[torch.arange(20), top].double().mean().item(), abs=1e-6)
        assert s.sufficiency_oracle == pytest.approx(keep.max(-1).values.double().mean().item(), abs=1e-6)
        assert s.sufficiency_random == pytest.approx(keep.double().mean().item(), abs=1e-6)
        # randomisation: the scores of the fully re-initialised copy (same seed), Spearman per sample
        for k, stage in enumerate(stages):
            other = METHODS[m](randomised_copy(head, k + 1, seed=2), feats, ctx)
            rho = [spearmanr(x.numpy(), y.numpy()).statistic for x, y in zip(a, other)]
            assert s.randomisation_cascade[k]["stage"] == stage
            assert s.randomisation_cascade[k]["spearman"] == pytest.approx(sum(rho) / len(rho), abs=1e-9)
        assert s.randomisation == pytest.approx(1 - s.randomisation_cascade[-1]["spearman"])
    # the curves end where they must: all layers removed / all kept is the same for every method
    dl, il = (
        (result.methods[m].deletion_curve[-1] for m in ("laya", "ig")),
        [result.methods[m].insertion_curve[-1] for m in ("laya", "ig")],
    )
    assert len(set(round(v, 9) for v in dl)) == 1
    assert il[0] == pytest.approx(target_probability(head(feats).logits, target).double().mean().item(), abs=1e-6)
    # completeness only for IG, equal to the summary of Captum's deltas
    _, delta = METHODS["ig"].convergence(head, feats, AttributionContext(target, ref, n_steps=6))
    with torch.no_grad():
        effect = target_probability(head(feats).logits, target) - target_probability(
            head([r.expand_as(f) for r, f in zip(ref, feats)]).logits, target
        )
    assert result.methods["ig"].completeness == pytest.approx(completeness(delta.abs(), effect.abs())[0], abs=1e-6)
    assert math.isnan(result.methods["laya"].completeness) and result.methods["laya"].completeness_flagged is None


def test_random_is_flagged_by_the_sanity_check_and_a_model_free_method_is_noted(monkeypatch):
    head, feats, ref, _ = make(batch=30)
    norms = lambda h, f, ctx: torch.stack([x.norm(dim=-1) for x in f], 1)  # ignores the model entirely
    monkeypatch.setitem(METHODS, "norms", Method("norms", norms))
    result = run_audit(head_only_model(head, ref, C), data(feats), ["laya", "norms", "random"], Deeper(steps=4))
    for m in ("norms", "random"):  # the same scores whatever the head: ρ = 1 at every stage
        s = result.methods[m]
        assert s.randomisation_spearman == pytest.approx(1.0) and s.randomisation == pytest.approx(0.0)
        assert s.randomisation_flagged is True
        assert all(c["spearman"] == pytest.approx(1.0) for c in s.randomisation_cascade)
    notes = " ".join(result.notes)
    assert "norms: model-randomisation check" in notes and "random: model-randomisation" not in notes
    # laya's α does not depend on the classifier at all: ρ = 1 at the first stage, then it changes
    cascade = result.methods["laya"].randomisation_cascade
    assert cascade[0]["stage"] == "classifier" and cascade[0]["spearman"] == pytest.approx(1.0)
    assert cascade[-1]["spearman"] < 1


def test_few_ig_steps_are_flagged_with_advice():
    head, feats, ref, _ = make(batch=30)
    for p in head.parameters():  # a sharper head: one IG step cannot integrate it
        p.data.mul_(4)
    result = run_audit(head_only_model(head, ref, C), data(feats), parse_methods("ig"), Deeper(steps=1))
    s = result.methods["ig"]
    assert s.completeness_flagged is True and s.completeness < 0.95
    assert any("ig: completeness" in n and "raise --steps (now 1)" in n for n in result.notes)
    assert check_thresholds(result, parse_thresholds("ig:completeness=0.95"))


def test_new_metrics_stream_in_batches_with_the_same_result():
    head, feats, ref, _ = make(batch=24)
    methods = parse_methods("ig,contrib,global")  # global: the weights pass; ig: completeness
    one = run_audit(head_only_model(head, ref, C), data(feats), methods, Deeper(batch_size=24, steps=4))
    many = run_audit(head_only_model(head, ref, C), data(feats), methods, Deeper(batch_size=10, steps=4))
    for m in methods:
        if m == "random":  # the same generator consumed in other shapes
            continue
        a, b = one.methods[m], many.methods[m]
        for key in ("aopc", "sufficiency", "sufficiency_normalised", "randomisation_spearman"):
            assert getattr(a, key) == pytest.approx(getattr(b, key), abs=1e-6), (m, key)
        assert a.deletion_curve == pytest.approx(b.deletion_curve, abs=1e-6)
        assert (a.completeness == pytest.approx(b.completeness, abs=1e-6)) or math.isnan(a.completeness)


def test_json_keys_unavailable_methods_and_by_class():
    head, feats, ref, _ = make("last", batch=24)
    result = run_audit(head_only_model(head, ref, C), data(feats), parse_methods("all"), Deeper(steps=4, by_class=True))
    doc = json.loads(result.to_json())
    assert doc["randomisation_stages"] == ["classifier"]
    for m in ("laya", "contrib", "global"):  # undefined for a last head: null values, every sample undefined
        e = doc["methods"][m]
        assert e["available"] is False and e["aopc"] is None and e["sufficiency@1"] is None
        assert e["aopc_undefined"] == e["sufficiency@1_undefined"] == e["randomisation_undefined"] == 24
        assert e["deletion_curve"] == [None] * L and e["randomisation_flagged"] is None
    ig = doc["methods"]["ig"]
    assert len(ig["deletion_curve"]) == len(ig["insertion_curve"]) == L
    assert ig["completeness_flagged"] in (True, False) and ig["randomisation_cascade"][0]["stage"] == "classifier"
    assert doc["methods"]["gradxact"]["completeness"] is None
    assert sum(c["n"] for c in doc["by_class"].values()) == 24
    assert "aopc" in next(iter(doc["by_class"].values()))["methods"]["ig"]


# --------------------------------------------------------------------------- gating and columns


def test_thresholds_on_the_new_metrics():
    ts = parse_thresholds(
        "aopc=0.1,sufficiency@1=0.2,ig:completeness=0.95,randomisation=0.5,sufficiency@1_normalised=0"
    )
    assert ts[2] == Threshold("completeness", 0.95, "ig") and len(ts) == 5
    with pytest.raises(LayaError, match="did you mean aopc"):
        parse_thresholds("aopcc=0.1")
    head, feats, ref, _ = make(batch=20)
    result = run_audit(head_only_model(head, ref, C), data(feats), parse_methods("ig"), Deeper(steps=16))
    assert check_thresholds(result, parse_thresholds("all:completeness=-5")) == []  # only IG has it: others skipped
    misses = check_thresholds(result, parse_thresholds("laya:completeness=0"))
    assert misses == ["laya: completeness applies to ig only (required by --fail-under laya:completeness=0)"]
    misses = check_thresholds(result, parse_thresholds("all:randomisation=3,all:aopc=1"))
    assert [m.split(":")[0] for m in misses] == ["laya", "ig", "laya", "ig"]  # random is never gated
    result.methods["ig"].completeness = float("nan")  # undefined must not pass a gate
    assert "undefined" in check_thresholds(result, parse_thresholds("ig:completeness=0"))[0]


def test_parse_metric_groups():
    assert parse_metric_groups("") == []
    assert parse_metric_groups("randomisation, aopc") == ["aopc", "randomisation"]
    assert parse_metric_groups("all") == ["aopc", "sufficiency", "completeness", "randomisation"]
    with pytest.raises(LayaError, match="did you mean sufficiency"):
        parse_metric_groups("sufficiancy")


def test_metric_columns_only_when_asked():
    from laya_cli.report.audit import audit_deeper_table, audit_markdown, audit_rich_table

    head, feats, ref, _ = make(batch=20)
    model = head_only_model(head, ref, C)
    with_ci = run_audit(model, data(feats), parse_methods("ig"), Deeper(steps=4, bootstrap=50))
    assert audit_markdown(with_ci).splitlines()[2].startswith("| method | faithfulness | 95% CI | ± std |")
    result = run_audit(model, data(feats), parse_methods("ig"), Deeper(steps=4, ci=0))  # --ci 0: no CI columns
    plain = audit_markdown(result).splitlines()[2]
    assert plain == ("| method | faithfulness | ± std | undef. | deletion@1 | oracle | random | normalised |")
    full = audit_markdown(result, metrics=parse_metric_groups("all")).splitlines()[2]
    assert full.endswith("| normalised | aopc | suff@1 | suff. norm. | completeness | randomisation |")
    assert len(audit_rich_table(result).columns) == 8  # the terminal's default table never changes
    assert audit_deeper_table(result, []) is None
    deeper = audit_deeper_table(result, ["aopc", "sufficiency"])
    assert [c.header for c in deeper.columns] == ["method", "aopc", "suff@1", "suff. norm."]
    assert "| `random` |" in audit_markdown(result, metrics=["randomisation"])
    assert [
        line for line in audit_markdown(result, metrics=["randomisation"]).splitlines() if line.startswith("| `random`")
    ][0].endswith("| 0.000 ! |")  # random's flag is shown


def test_randomisation_runs_on_the_first_samples_in_whole_batches():
    head, feats, ref, target = make(batch=30)
    result = run_audit(
        head_only_model(head, ref, C),
        data(feats),
        ["laya", "random"],
        Deeper(batch_size=8, randomisation_samples=10, seed=1),
    )
    assert result.randomisation_samples == 16  # 10 rounded up to 2 batches of 8
    a = METHODS["laya"](head, feats, None)[:16]
    other = METHODS["laya"](randomised_copy(head, 3, seed=1), [f[:16] for f in feats], None)
    want = sum(spearmanr(x.numpy(), y.numpy()).statistic for x, y in zip(a, other)) / 16
    assert result.methods["laya"].randomisation_spearman == pytest.approx(want, abs=1e-9)
    assert result.methods["laya"].randomisation_undefined == 0
    assert result.methods["random"].randomisation_spearman == pytest.approx(1.0)  # same draws, batch by batch
    off = run_audit(head_only_model(head, ref, C), data(feats), ["laya"], Deeper(randomisation_samples=0))
    assert off.randomisation_stages == [] and off.randomisation_samples == 0
    assert math.isnan(off.methods["laya"].randomisation) and off.methods["laya"].randomisation_cascade == []
    assert "model-randomisation check skipped" in " ".join(off.notes)
    assert off.methods["laya"].aopc == pytest.approx(result.methods["laya"].aopc)  # nothing else changes
    with pytest.raises(LayaError, match="--randomisation-samples must be at least 0"):
        Deeper(randomisation_samples=-1).validate()
