"""Faithfulness metrics (docs/metrics.md) against references, and the audit run and gating on synthetic heads."""

import json
import math
from functools import partial

import numpy as np
import pytest
import torch
from helpers import head_only_model, make_head_and_features
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from laya_cli.auditing import methods as attribution
from laya_cli.auditing.head_scope import run_audit
from laya_cli.auditing.metrics import (
    average_ranks,
    chance_level,
    check_removal,
    degenerate_effects,
    deletion_at_1,
    lolo_effects,
    nan_summaries,
    nan_summary,
    near_chance,
    normalised_deletion,
    row_means,
    spearman_rows,
    target_probability,
)
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.registry import METHODS, Method
from laya_cli.auditing.settings import AuditSettings, Removal
from laya_cli.features.extraction import LayerFeatures
from laya_cli.gates.thresholds import Threshold, check_thresholds, parse_thresholds
from laya_cli.runtime.errors import LayaError

DIMS = [10, 6, 8, 5]
C = 4


make = partial(make_head_and_features, batch=64, dims=DIMS, num_classes=C)  # (head, feats, ref)


def features(feats, seed=0):
    g = torch.Generator().manual_seed(seed)
    return LayerFeatures(feats, torch.randint(0, C, (len(feats[0]),), generator=g))


# --------------------------------------------------------------------------- Spearman


def scipy_rows(a, b):
    out = []
    for x, y in zip(np.asarray(a, dtype=float), np.asarray(b, dtype=float)):
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            out.append(np.nan)
        else:
            out.append(spearmanr(x, y).statistic)
    return np.array(out)


def test_spearman_equals_scipy_with_ties_and_constant_rows():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 4, (300, 6), generator=g).float()  # many ties
    b = torch.randn(300, 6, generator=g)
    b[:40] = b[:40].round()
    a[5] = 2.0  # constant row: undefined
    b[7] = -1.0
    ours = spearman_rows(a, b).numpy()
    ref = scipy_rows(a, b)
    assert np.isnan(ours[5]) and np.isnan(ours[7])
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-3, 3), min_size=n, max_size=n), min_size=1, max_size=8),
            st.lists(
                st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=n, max_size=n), min_size=8, max_size=8
            ),
        )
    )
)
def test_spearman_matches_scipy_property(data):
    ints, floats = data
    a = torch.tensor(ints, dtype=torch.float64)
    b = torch.tensor(floats[: len(ints)], dtype=torch.float64)
    np.testing.assert_allclose(spearman_rows(a, b).numpy(), scipy_rows(a, b), rtol=1e-9, atol=1e-9, equal_nan=True)


def test_average_ranks_match_scipy_rankdata():
    from scipy.stats import rankdata

    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0]])
    np.testing.assert_allclose(average_ranks(x)[0].numpy(), rankdata(x[0].numpy()))


# --------------------------------------------------------------------------- Deletion@1


def test_deletion_at_1_oracle_random_and_ties():
    delta = torch.tensor([[0.1, 0.5, 0.2], [0.3, 0.0, 0.3]])
    a = torch.tensor([[0.0, 1.0, 0.5], [2.0, 2.0, 1.0]])  # row 2: tie at the top -> mean of Δ over the tie
    d1, oracle, random = deletion_at_1(a, delta)
    torch.testing.assert_close(d1, torch.tensor([0.5, 0.15], dtype=torch.float64))
    torch.testing.assert_close(oracle, torch.tensor([0.5, 0.3], dtype=torch.float64))
    torch.testing.assert_close(random, torch.tensor([0.8 / 3, 0.2], dtype=torch.float64))


def test_normalised_deletion_on_means():
    assert normalised_deletion(0.5, 0.5, 0.1) == pytest.approx(1.0)
    assert normalised_deletion(0.1, 0.5, 0.1) == pytest.approx(0.0)
    assert normalised_deletion(0.3, 0.5, 0.1) == pytest.approx(0.5)
    assert math.isnan(normalised_deletion(0.2, 0.2, 0.2))


def test_nan_summary():
    mean, std, n, undefined = nan_summary(torch.tensor([1.0, float("nan"), 0.0, 0.5]))
    assert (mean, n, undefined) == (0.5, 3, 1)
    assert std == pytest.approx(np.std([1.0, 0.0, 0.5]))
    assert math.isnan(nan_summary(torch.tensor([float("nan")]))[0])


# --------------------------------------------------------------------------- LOLO


def p_target(head, feats, target, **kw):
    with torch.no_grad():
        return target_probability(head(feats, **kw).logits, target)


@pytest.mark.parametrize("ablation", ["mean", "zero", "mask"])
def test_lolo_effects_by_hand(ablation):
    head, feats, ref = make(batch=9)
    target = torch.arange(9) % C
    delta = lolo_effects(head, feats, target, ref, ablation)
    base = p_target(head, feats, target)
    for i in range(len(DIMS)):
        if ablation == "mask":
            mask = torch.ones(9, len(DIMS))
            mask[:, i] = 0
            removed = p_target(head, feats, target, alpha_mask=mask)
        else:
            fill = torch.zeros_like(feats[i]) if ablation == "zero" else ref[i].expand_as(feats[i])
            removed = p_target(head, [*feats[:i], fill, *feats[i + 1 :]], target)
        torch.testing.assert_close(delta[:, i], base - removed)


def test_mask_ablation_needs_layer_weights():
    head, feats, ref = make("concat", batch=3)
    with pytest.raises(LayaError, match="--ablation mask needs a head with layer weights"):
        check_removal(head, Removal.parse("mask").head)  # checked once, before any work
    with pytest.raises(LayaError, match="did you mean"):
        Removal.parse("maen")


def test_lolo_oracle_as_attribution_scores_faithfulness_1_and_deletion_oracle(monkeypatch):
    head, feats, ref = make(batch=150)
    oracle = lambda h, f, ctx: lolo_effects(h, f, ctx.target, ctx.baseline, "mean")
    monkeypatch.setitem(METHODS, "oracle", Method("oracle", oracle))
    result = run_audit(
        head_only_model(head, ref, C), features(feats), ["oracle", "random"], AuditSettings(batch_size=64)
    )
    s = result.methods["oracle"]
    assert s.faithfulness == pytest.approx(1.0) and s.faithfulness_std == pytest.approx(0.0)
    assert s.deletion_at_1 == pytest.approx(s.oracle)
    assert s.normalised == pytest.approx(1.0)
    # the per-row metrics agree
    target = head(feats).logits.argmax(-1)
    delta = lolo_effects(head, feats, target, ref)
    rho = spearman_rows(delta, delta)
    assert torch.allclose(rho[~rho.isnan()], torch.ones(1, dtype=torch.float64))
    d1, top, _ = deletion_at_1(delta, delta)
    torch.testing.assert_close(d1, top)


def test_random_averages_zero_faithfulness():
    g = torch.Generator().manual_seed(1)
    delta = torch.randn(4000, 6, generator=g)
    a = attribution.random_scores(4000, 6, torch.Generator().manual_seed(0))
    assert abs(spearman_rows(a, delta).mean().item()) < 0.03
    d1, _, random = deletion_at_1(a, delta)
    assert abs(d1.mean().item() - random.mean().item()) < 0.05


# --------------------------------------------------------------------------- run_audit on synthetic heads


def test_run_audit_streams_in_batches_with_the_same_result():
    head, feats, ref = make(batch=50)
    methods = parse_methods("all")
    one = run_audit(head_only_model(head, ref, C), features(feats), methods, AuditSettings(batch_size=50, steps=8))
    many = run_audit(head_only_model(head, ref, C), features(feats), methods, AuditSettings(batch_size=16, steps=8))
    for m in methods:
        if m == "random":  # same generator, consumed in different shapes
            continue
        assert one.methods[m].faithfulness == pytest.approx(many.methods[m].faithfulness, abs=1e-9), m
        assert one.methods[m].deletion_at_1 == pytest.approx(many.methods[m].deletion_at_1, abs=1e-6), m
    assert one.accuracy == many.accuracy and one.n_samples == 50


def test_run_audit_by_class_and_json_shape():
    head, feats, ref = make(batch=80)
    result = run_audit(
        head_only_model(head, ref, C),
        features(feats),
        parse_methods("ig,contrib"),
        AuditSettings(steps=4, by_class=True),
    )
    doc = json.loads(result.to_json())
    assert set(doc) >= {"settings", "accuracy", "methods", "by_class", "notes"}
    assert list(doc["methods"]) == ["laya", "ig", "contrib", "random"]
    for m in doc["methods"].values():
        assert set(m) >= {
            "faithfulness",
            "faithfulness_std",
            "undefined",
            "deletion@1",
            "deletion@1_normalised",
            "deletion@1_oracle",
            "deletion@1_random",
        }
    assert sum(c["n"] for c in doc["by_class"].values()) == 80
    assert doc["settings"]["ablation"] == "mean" and doc["settings"]["steps"] == 4


def test_undefined_methods_are_reported_not_raised():
    head, feats, ref = make("last", batch=30)
    result = run_audit(head_only_model(head, ref, C), features(feats), parse_methods("all"), AuditSettings(steps=4))
    for m in ("laya", "contrib", "global"):
        assert not result.methods[m].available and "last head" in result.methods[m].note
        assert math.isnan(result.methods[m].faithfulness) and result.methods[m].undefined == 30
    # ig applies, but every sample is degenerate (Δ_i = 0 for all layers but the last): undefined, said so
    ig = result.methods["ig"]
    assert ig.available and math.isnan(ig.faithfulness) and ig.undefined == ig.degenerate == 30
    assert not math.isnan(ig.deletion_at_1)
    assert any("Δ_i = 0" in n for n in result.notes)
    doc = json.loads(result.to_json())  # NaN becomes null, still strict JSON
    assert doc["methods"]["laya"]["faithfulness"] is None


def test_few_layers_warn_and_one_layer_is_undefined():
    head, feats, ref = make(batch=20, dims=[6, 5])
    two = run_audit(head_only_model(head, ref, C), features(feats), ["laya", "random"])
    assert any("only 2 layers" in n for n in two.notes)
    head, feats, ref = make(batch=20, dims=[6])
    one = run_audit(head_only_model(head, ref, C), features(feats), parse_methods("ig"), AuditSettings(steps=4))
    assert any("only 1 layer" in n for n in one.notes)
    assert one.methods["ig"].undefined == 20 and math.isnan(one.methods["ig"].faithfulness)
    assert one.methods["ig"].deletion_at_1 == pytest.approx(one.methods["ig"].oracle)
    assert math.isnan(one.methods["ig"].normalised)


def test_audit_settings_are_validated():
    with pytest.raises(LayaError, match="did you mean mean"):
        AuditSettings(ablation="meen").validate()
    with pytest.raises(LayaError, match="--steps must be at least 1"):
        AuditSettings(steps=0).validate()
    with pytest.raises(LayaError, match="--internal-batch-size"):
        AuditSettings(internal_batch_size=0).validate()


# --------------------------------------------------------------------------- methods and thresholds


def test_parse_methods():
    assert parse_methods("ig,gradxact") == ["laya", "ig", "gradxact", "random"]
    assert parse_methods("all") == ["laya", "ig", "gradxact", "atp", "saliency", "contrib", "global", "random"]
    assert parse_methods("") == ["laya", "random"]
    assert parse_methods("laya,ig,ig") == ["laya", "ig", "random"]
    with pytest.raises(LayaError, match="unknown method 'gradx': did you mean gradxact"):
        parse_methods("ig,gradx")


def test_parse_thresholds():
    ts = parse_thresholds("faithfulness=0.7, ig:faithfulness=0.8,laya:deletion@1=0.2,ALL:aopc=0.1")
    assert ts == [
        Threshold("faithfulness", 0.7, "laya"),  # unqualified: the model's own attribution
        Threshold("faithfulness", 0.8, "ig"),
        Threshold("deletion@1", 0.2, "laya"),
        Threshold("aopc", 0.1),  # all: every audited method but random
    ]
    assert [str(t) for t in ts] == [
        "laya:faithfulness=0.7",
        "ig:faithfulness=0.8",
        "laya:deletion@1=0.2",
        "all:aopc=0.1",
    ]
    assert parse_thresholds(["accuracy=0.9", "deletion@1_normalised=0.5"])[0] == Threshold("accuracy", 0.9)
    for bad, msg in [
        ("faithfulness", "expected METRIC=VALUE"),
        ("faithfulness=high", "not a number"),
        ("faithfulnes=0.7", "did you mean faithfulness"),
        ("ig:acc=1", "did you mean"),
        ("igg:faithfulness=0.7", "did you mean ig"),
        ("a:b:c=1", "expected"),
        ("ig:accuracy=0.9", "belongs to the model"),
        ("faithfulness=nan", "finite"),
    ]:
        with pytest.raises(LayaError, match=msg):
            parse_thresholds(bad)
    with pytest.raises(LayaError, match="not audited; add --compare saliency"):
        parse_thresholds("saliency:faithfulness=0.5", ["laya", "ig", "random"])


def test_check_thresholds_names_each_miss():
    head, feats, ref = make(batch=40)
    result = run_audit(head_only_model(head, ref, C), features(feats), parse_methods("ig"), AuditSettings(steps=4))
    f = {m: s.faithfulness for m, s in result.methods.items()}
    assert check_thresholds(result, parse_thresholds("faithfulness=-1,accuracy=0")) == []
    misses = check_thresholds(result, parse_thresholds(f"all:faithfulness={max(f['laya'], f['ig']) + 0.01}"))
    assert len(misses) == 2 and misses[0].startswith("laya: faithfulness") and misses[1].startswith("ig:")
    own = check_thresholds(result, parse_thresholds(f"faithfulness={max(f['laya'], f['ig']) + 0.01}"))
    assert len(own) == 1 and own[0].startswith("laya: faithfulness")  # a reference method only when named
    misses = check_thresholds(result, parse_thresholds("random:deletion@1=2,accuracy=1.01"))
    assert [m.split()[0] for m in misses] == ["random:", "accuracy"]


# --------------------------------------------------------------------------- degenerate samples, chance level


def test_degenerate_effects_match_a_by_hand_count():
    g = torch.Generator().manual_seed(3)
    delta = torch.randint(0, 3, (400, 5), generator=g).float() / 10  # many exact ties
    delta[:50, :4] = 0.0  # a last head: only the last layer matters
    delta[50:60] = 0.25  # every layer the same
    got = degenerate_effects(delta)
    for row, flag in zip(delta.tolist(), got.tolist()):
        most_common = max(row.count(v) for v in row)
        assert flag == (most_common >= len(row) - 1), row
    assert got[:60].all() and not got.all()
    assert not degenerate_effects(torch.tensor([[0.0, 0.0], [0.0, 1.0]])).any()  # L < 3: never (warned instead)


def test_chance_level_and_noise_band_by_hand():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    assert chance_level(labels, 3) == 0.5  # the majority class beats 1/3
    assert chance_level(torch.tensor([0, 1, 2, 3]), 10) == pytest.approx(0.25)
    se = math.sqrt(1 / 3 * 2 / 3 / 60)
    assert near_chance(0.333, 1 / 3, 60) and near_chance(1 / 3 + 1.9 * se, 1 / 3, 60)
    assert not near_chance(1 / 3 + 2.1 * se, 1 / 3, 60)
    assert not near_chance(0.97, 0.1, 360)


def test_chance_level_accuracy_is_warned_about():
    head, feats, ref = make(batch=120)  # an untrained head on random labels: chance level
    result = run_audit(head_only_model(head, ref, C), features(feats), ["laya", "random"])
    assert any(n.startswith("warning: accuracy") and "within noise of chance" in n for n in result.notes)
    trained = features(feats)
    trained.labels = head(feats).logits.argmax(-1)  # labels the head predicts: accuracy 1
    result = run_audit(head_only_model(head, ref, C), trained, ["laya", "random"])
    assert result.accuracy == 1.0 and not any("chance" in n for n in result.notes)


def test_a_network_scope_audit_alone_knows_chance_and_flags_a_model_at_it(digits_ckpt):
    """``--scope network`` has no head-scope samples to read the labels from: it keeps the rate its own labels give
    (the head scope's on the same samples), so a model at chance is flagged there too."""
    from laya_cli.auditing.job import run_scoped_audit
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model

    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=40)
    settings = AuditSettings(batch_size=40, ci=0.0)
    head = run_scoped_audit(model, data, ["random"], settings, "head")
    network = run_scoped_audit(model, data, ["random"], settings, "network")
    assert network._chance() == head._chance() is not None
    assert not any("chance" in f for f in network.to_dict()["flags"])  # trained: well above it
    network.accuracy = network._chance()  # a model no better than guessing
    assert any(f.startswith("flag: the model is within noise of chance") for f in network.to_dict()["flags"])


def test_the_gate_says_faithfulness_is_degenerate_on_a_last_head():
    head, feats, ref = make("last", batch=30)
    result = run_audit(
        head_only_model(head, ref, C), features(feats), parse_methods("ig,gradxact"), AuditSettings(steps=4)
    )
    assert any("degenerate on all 30 of 30 samples" in n for n in result.notes)
    misses = check_thresholds(result, parse_thresholds("all:faithfulness=0.7"))
    assert len(misses) == 2 and all("degenerate on all 30 samples" in m for m in misses)
    assert check_thresholds(result, parse_thresholds("ig:deletion@1=-1")) == []  # Deletion@1 stays defined
    assert json.loads(result.to_json())["methods"]["ig"]["degenerate"] == 30


def test_methods_and_heads_are_case_insensitive():
    assert parse_methods("IG,GradXAct,LAYA") == ["laya", "ig", "gradxact", "random"]
    assert parse_methods("ALL") == ["laya", "ig", "gradxact", "atp", "saliency", "contrib", "global", "random"]
    assert parse_thresholds("IG:faithfulness=0.5") == [Threshold("faithfulness", 0.5, "ig")]
    assert AuditSettings(ablation="Mean", target="LABEL", reduce="Abs").validate().ablation == "mean"
    with pytest.raises(LayaError, match="unknown method 'IGG': did you mean ig"):
        parse_methods("IGG")


def test_a_scope_whose_effects_are_near_equal_has_an_undetermined_ranking_and_faithfulness_is_not_scored():
    """Issue 64: on a frozen pretrained CNN every stage's patch cost 0.39–0.44 of p, and the network-scope ranking
    ranked those near-equal effects (α's −0.32 printed like any other figure)."""
    import torch

    from laya_cli.auditing.metrics import near_equal_effects, ranking_block, undetermined_note
    from laya_cli.report.audit import UNDETERMINED, scored_rows

    flat = torch.tensor([[0.39, 0.44, 0.41, 0.42], [0.40, 0.43, 0.42, 0.44], [0.9, 0.1, 0.0, 0.2]])
    near = near_equal_effects(flat)
    assert near.tolist() == [True, True, False]  # within 20 % of the largest |Δ| / a clear ranking
    block = ranking_block(near)
    assert block == {"determined": False, "near_equal": 2, "samples": 3, "margin": 0.2}
    assert "ranking is undetermined" in undetermined_note(block, "network")
    assert (
        ranking_block(near_equal_effects(flat[2:]))["determined"]
        and undetermined_note(ranking_block(near[2:]), "head") is None
    )
    assert not near_equal_effects(torch.tensor([[0.5, 0.5]])).any()  # L < 3: never flagged
    rows = {"laya": {"faithfulness": -0.32, "faithfulness_std": 0.4, "deletion@1": 0.41, "ci": {"faithfulness": {}}}}
    shown = scored_rows(rows, block)["laya"]
    assert shown["faithfulness"] == UNDETERMINED and shown["faithfulness_std"] is None and shown["ci"] == {}
    assert shown["deletion@1"] == 0.41 and scored_rows(rows, {"determined": True}) is rows


def _same(a, b) -> bool:
    return all(x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("threads", [1, 2])
def test_stacked_summaries_are_the_one_by_one_numbers_bit_for_bit(threads):
    """The end-of-audit means and stds made for every method at once (``nan_summaries``, ``row_means``) are
    ``nan_summary`` and ``mean().item()`` row by row exactly: shared undefined samples, ragged ones (a row by row
    fallback), none defined, sizes around the vector widths; fails if ATen's reductions change their order."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(3)
        for n in [*range(0, 70), 127, 128, 129, 1000, 4097]:
            for m in (1, 2, 4):
                shift = torch.randn(m, 1, generator=g).double()
                table = torch.randn(m, n, generator=g, dtype=torch.float64) * 3 + shift
                table[:, torch.rand(n, generator=g) < 0.25] = float("nan")
                if n % 5 == 0 and m > 1 and n:
                    table[1, 0] = float("nan")  # defined on other samples than row 0
                if n == 7:
                    table[:] = float("nan")
                got, want = nan_summaries(table), [nan_summary(row) for row in table]
                assert all(_same(a, b) for a, b in zip(got, want)), (n, m)
                means = row_means(table.nan_to_num())
                assert _same(means, [row.nan_to_num().mean().item() if n else math.nan for row in table]), (n, m)
    finally:
        torch.set_num_threads(saved)
