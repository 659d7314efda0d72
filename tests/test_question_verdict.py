"""One question per checkpoint, a verdict in words, references apart from competitors and the flags of results that
say nothing (docs/metrics.md: "The question α was trained on", "The verdict", "Uninformative results")."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import invoke

from laya_cli.auditing.collapse import collapse_summary
from laya_cli.auditing.flags import (
    chance_flag,
    checkpoint_flags,
    small_effects_flag,
    uniform_alpha_flag,
)
from laya_cli.auditing.question import (
    ASSUMED,
    DERIVED,
    RECORDED,
    UNALIGNED,
    Question,
    audit_scope_and_removal,
    checkpoint_question,
    question_of_training,
)
from laya_cli.auditing.verdict import audit_verdict, scope_verdict
from laya_cli.report.intervals import vs_laya_rows

# --------------------------------------------------------------------------- the question


def test_the_question_comes_from_the_record_then_the_training_settings_then_is_assumed():
    network = {"align": 1.0, "align_target": "network", "align_removal": "bypass"}
    assert question_of_training(network) == Question("network", "bypass", RECORDED)
    assert question_of_training({"align": 0.3, "align_target": "both", "align_removal": "mean"}).scope == "both"
    assert question_of_training({"align": 1.0, "align_target": "network"}, "lm").removal == "bypass"
    assert question_of_training({"align": 0.0}).source == UNALIGNED
    assert checkpoint_question({"question": {"scope": "network", "removal": "bypass"}}).source == RECORDED
    assert checkpoint_question({"train_config": network}) == Question("network", "bypass", DERIVED)
    old = checkpoint_question({"train_config": {"epochs": 3}})
    assert old == Question("head", "mean", ASSUMED) and "assumed" in old.sentence()


def test_the_question_says_itself_in_one_sentence():
    said = Question("network", "bypass").sentence()
    assert "inside the network" in said and "skipped" in said and ". " not in said  # one sentence
    assert "only to predict" in Question("head", "mean", UNALIGNED).sentence()


@pytest.mark.parametrize(
    "scope,ablation,expected",
    [
        (None, None, ("network", "bypass")),  # the default: the question
        ("head", None, ("head", "mean")),  # the other scope, one option away
        ("both", None, ("both", "bypass")),
        (None, "mean", ("network", "mean")),
        (None, "mask", ("head", "mask")),  # a head-only removal asks the head
    ],
)
def test_laya_audit_runs_the_question_unless_told_otherwise(scope, ablation, expected):
    assert audit_scope_and_removal(Question("network", "bypass"), scope, ablation) == expected


# --------------------------------------------------------------------------- the verdict


def _row(faith, diff=None, low=None, high=None, **extra):
    row = {"faithfulness": faith, "available": True, **extra}
    if diff is not None:
        row["vs_laya"] = {"faithfulness": {"difference": diff, "ci_low": low, "ci_high": high}}
    return row


def test_the_verdict_names_the_winner_where_alpha_loses():
    methods = {
        "laya": _row(0.283, ci={"faithfulness": {"ci_low": 0.196, "ci_high": 0.364}}),
        "gradxact": _row(0.30, 0.017, -0.05, 0.08),
        "atp": _row(0.706, 0.423, 0.33, 0.51),
        "random": _row(0.01, -0.27, -0.3, -0.2),
    }
    v = scope_verdict(methods, "network", "bypass")
    assert v["winner"] == "atp" and v["best"] == "atp"
    assert "0.283 [0.196, 0.364]" in v["text"] and "prefer AtP" in v["text"] and "a forward and a backward" in v["text"]


def test_the_verdict_names_the_winner_where_alpha_wins_and_a_tie_as_a_tie():
    methods = {"laya": _row(0.65), "gradxact": _row(0.2, -0.45, -0.5, -0.4), "atp": _row(0.24, -0.41, -0.48, -0.35)}
    v = scope_verdict(methods, "network", "bypass")
    assert v["winner"] == "laya" and "use α here" in v["text"] and "prefer" not in v["text"]
    tied = scope_verdict({"laya": _row(0.968), "gradxact": _row(0.967, -0.001, -0.013, 0.011)}, "head", "mean")
    assert tied["winner"] == "tie" and "as faithful as the best method here, and free" in tied["text"]


def test_a_reference_is_a_check_of_the_audit_not_a_rival():
    """IG at head scope integrates from the removal's own value: it is left out of the competitors and of the paired
    differences, and its agreement with the effects is said as a check."""
    methods = {
        "laya": _row(0.968),
        "ig": _row(0.997, 0.029, 0.017, 0.042, reference=True),
        "gradxact": _row(0.967, -0.001, -0.013, 0.011),
    }
    v = scope_verdict(methods, "head", "mean")
    assert v["best"] == "gradxact" and v["winner"] == "tie" and v["references"] == {"ig": 0.997}
    assert "Reference: IG" in v["text"] and "check out" in v["text"]
    _, body = vs_laya_rows(methods)
    assert [r[0].text for r in body] == ["gradxact"]


def test_the_verdict_says_when_the_effects_cannot_be_ranked():
    v = scope_verdict({"laya": _row(0.1)}, "head", "mean", {"determined": False})
    assert v["winner"] is None and "too close to rank" in v["text"]


def test_no_verdict_for_a_model_at_chance():
    doc = {"settings": {}, "methods": {"laya": _row(0.1), "atp": _row(0.9, 0.8, 0.7, 0.9)}}
    assert "prefer AtP" in audit_verdict(doc)["text"]
    flagged = {**doc, "flags": ["flag: the model is within noise of chance (accuracy 0.078 …)"]}
    assert audit_verdict(flagged)["text"].startswith("No verdict: the model is within noise of chance")


def test_the_audit_verdict_puts_the_questions_scope_first():
    doc = {
        "question": {"scope": "network"},
        "settings": {"ablation": "mean"},
        "methods": {"laya": _row(0.9), "gradxact": _row(0.5, -0.4, -0.5, -0.3)},
        "network": {"reference": "bypass", "methods": {"laya": _row(0.3), "atp": _row(0.7, 0.4, 0.3, 0.5)}},
    }
    v = audit_verdict(doc)
    assert [s["scope"] for s in v["scopes"]] == ["network", "head"] and v["text"].startswith("At network scope")


# --------------------------------------------------------------------------- the flags


def test_a_uniform_alpha_is_flagged_and_a_spread_one_is_not():
    uniform = collapse_summary(torch.full((50, 6), 1 / 6) + 0.001 * torch.rand(50, 6))
    assert uniform_alpha_flag(uniform) is not None and "uniform within noise" in uniform_alpha_flag(uniform)
    peaked = collapse_summary(torch.softmax(3 * torch.randn(50, 6), -1))
    assert uniform_alpha_flag(peaked) is None
    old = {k: v for k, v in uniform.items() if k != "top_weight_ratio"}  # a summary from before the key
    assert uniform_alpha_flag(old) is not None


def test_a_model_at_chance_is_flagged_and_a_trained_one_is_not():
    assert "within noise of chance" in chance_flag(0.078, 359, 0.103)
    assert chance_flag(0.98, 359, 0.103) is None
    metrics = {"test_accuracy": 0.25, "n_test": 200, "test_chance": 0.25, "alpha_collapse": None}
    assert len(checkpoint_flags(metrics, 4)) == 1
    assert checkpoint_flags({**metrics, "test_accuracy": 0.9}, 4) == []


def test_effects_too_small_to_rank_are_flagged():
    assert "too small or too close" in small_effects_flag({"degenerate": 80}, 100)
    assert small_effects_flag({"degenerate": 10}, 100) is None
    assert small_effects_flag({"degenerate": 0}, 100, {"determined": False}, "network") is not None


# --------------------------------------------------------------------------- the commands


def test_laya_audit_says_the_question_and_the_verdict_before_its_tables(digits_ckpt, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", str(digits_ckpt), "--samples", "40", "--steps", "4", "--json", out)
    assert r.exit_code == 0, r.output
    text = r.output
    assert text.index("question: α was trained only to predict") < text.index("verdict: At head scope")
    assert text.index("verdict:") < text.index("faithfulness")
    doc = json.loads(out.read_text())
    assert doc["question"]["scope"] == "head" and doc["question"]["source"] == UNALIGNED
    assert doc["verdict_text"].startswith("At head scope") and isinstance(doc["flags"], list)
    assert doc["verdict_scopes"][0]["scope"] == "head" and "text" not in (doc.get("verdict") or {})  # the gates
    assert doc["methods"]["ig"]["reference"] is True and doc["methods"]["gradxact"]["reference"] is False


def test_laya_info_says_the_question(digits_ckpt):
    r = invoke("info", str(digits_ckpt))
    assert r.exit_code == 0 and "question: α was trained only to predict" in r.output
    doc = json.loads(invoke("info", str(digits_ckpt), "--json").output)
    assert doc["question"]["scope"] == "head" and doc["flags"] == []


# --------------------------------------------------------------------------- results pinned to their data


def test_a_relative_data_path_is_pinned_where_it_was_trained(tmp_path, monkeypatch):
    """Trained on ``folder:shapes`` in one folder, audited from another whose ``shapes`` holds other images: the
    audit reads the folder it was trained on (resolved), records its fingerprint, and stops in one line once that
    folder holds other data."""
    import shutil

    from helpers import assert_user_error, make_image_folder

    from laya_cli.model.checkpoint import read_checkpoint

    here, there = tmp_path / "here", tmp_path / "there"
    make_image_folder(here / "shapes", per_class=8)
    make_image_folder(there / "shapes", per_class=8, seed=1)
    monkeypatch.chdir(here)
    r = invoke("train", "--dataset", "folder:shapes", "--epochs", "1", "--align", "0", "-q", "--out", here / "m.pt")
    assert r.exit_code == 0, r.output
    recorded = read_checkpoint(here / "m.pt")["dataset"]
    assert recorded["resolved"] == f"folder:{(here / 'shapes').resolve()}" and recorded["fingerprint"]
    monkeypatch.chdir(there)
    out = there / "a.json"
    r = invoke("audit", here / "m.pt", "-q", "--compare", "", "--json", out)
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["settings"]["data_fingerprint"] == recorded["fingerprint"]
    shutil.rmtree(here / "shapes")
    make_image_folder(here / "shapes", per_class=8, seed=2)
    assert_user_error(invoke("audit", here / "m.pt", "-q"), "is not the data this checkpoint was evaluated on")


def test_a_baseline_from_other_data_is_refused_unless_allowed():
    from laya_cli.gates.regression import check_settings
    from laya_cli.runtime.errors import LayaError

    base, now = (
        {"settings": {"data_fingerprint": "sha256:aa@3x8x8"}},
        {"settings": {"data_fingerprint": "sha256:bb@3x8x8"}},
    )
    with pytest.raises(LayaError, match="data_fingerprint sha256:aa@3x8x8 -> sha256:bb@3x8x8"):
        check_settings(base, now, allow_change=False)
    assert check_settings(base, now, allow_change=True) == ["data_fingerprint sha256:aa@3x8x8 -> sha256:bb@3x8x8"]
    assert check_settings({"settings": {}}, now, allow_change=False) == []  # an older baseline records none


# --------------------------------------------------------------------------- the Python API asks the same question


def test_the_python_api_asks_the_checkpoints_question_unless_a_scope_is_given(digits_ckpt):
    """laya_cli.audit naming no scope or ablation asks what ``laya audit`` asks of the checkpoint (here a recorded
    network-scope question, mean removal); a scope or an ablation given wins, as on the command line."""
    import inspect

    import laya_cli
    from laya_cli.auditing.question import ask_models_question
    from laya_cli.features.extraction import to_float_images
    from laya_cli.model.evaldata import load_eval_data

    assert inspect.signature(laya_cli.audit).parameters["scope"].default is None  # left None: the question
    model = laya_cli.load(digits_ckpt)
    model.checkpoint = {**model.checkpoint, "question": {"scope": "network", "removal": "mean"}}
    data = load_eval_data(model, samples=24)
    loader = [(to_float_images(data.images[i : i + 12]), data.features.labels[i : i + 12]) for i in (0, 12)]
    kw = {"steps": 4, "device": "cpu", "progress": False}
    asked = laya_cli.audit(model, loader, "gradxact", **kw)
    assert asked.network is not None and asked.methods == {} and asked.settings["scope"] == "network"
    assert asked.summary["question"]["scope"] == "network"
    head = laya_cli.audit(model, loader, "gradxact", scope="head", **kw)  # the other scope, one keyword away
    assert head.network is None and "gradxact" in head.methods
    assert ask_models_question(model.checkpoint, {"scope": None, "ablation": "mask"})["scope"] == "head"
    assert ask_models_question({}, {"scope": None, "ablation": None}) == {"scope": "head", "ablation": "mean"}


def test_a_default_audit_of_both_scopes_runs_ig_at_the_head_scope_only_unless_named(digits_ckpt, tmp_path):
    """IG at network scope computes the total effects another way (a reference, most of that scope's cost): the
    default --scope both leaves it out and says so (``references``, a note); --compare naming it runs it there."""
    from laya_cli.auditing.settings import network_methods

    assert network_methods(["laya", "IG", "gradxact", "random"], named=False) == ["laya", "gradxact", "random"]
    assert network_methods(["laya", "ig", "random"], named=True) == ["laya", "ig", "random"]
    common = ("audit", str(digits_ckpt), "--scope", "both", "--samples", "40", "--steps", "4", "-q")
    r = invoke(*common, "--json", tmp_path / "default.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "default.json").read_text())
    assert doc["references"] == {"head": ["ig"], "network": []}
    assert "ig" in doc["methods"] and "ig" not in doc["network"]["methods"] and "gradxact" in doc["network"]["methods"]
    assert any(n.startswith("network scope: ig left out by default") for n in doc["notes"])
    r = invoke(*common, "--compare", "ig,gradxact,atp", "--json", tmp_path / "named.json")
    assert r.exit_code == 0, r.output
    named = json.loads((tmp_path / "named.json").read_text())
    assert named["references"] == {"head": ["ig"], "network": ["ig"]} and "ig" in named["network"]["methods"]
    assert named["methods"] == doc["methods"]  # the head scope: the same audit either way
    assert not any("left out by default" in n for n in named["notes"])


def test_an_unqualified_gate_at_both_scopes_checks_alpha_at_both():
    """The question of a checkpoint trained on both scopes is both: the README's ``faithfulness=0.7`` checks α at
    the head scope and at the network scope (a pass at one must not hide the other); an item naming a method keeps
    the head scope, ``network:`` names the other, and one scope alone checks that scope."""
    from laya_cli.gates.regression import _drop_check, parse_max_drop
    from laya_cli.gates.thresholds import parse_thresholds

    both = parse_thresholds("faithfulness=0.7,ig:faithfulness=0.8,network:deletion@1=0.1", scope="both")
    assert [str(t) for t in both] == [
        "laya:faithfulness=0.7",
        "network:laya:faithfulness=0.7",
        "ig:faithfulness=0.8",
        "network:laya:deletion@1=0.1",
    ]
    assert [t.scope for t in parse_thresholds("faithfulness=0.7", scope="head")] == ["head"]
    assert [t.scope for t in parse_thresholds("faithfulness=0.7", scope="network")] == ["network"]
    assert [t.scope for t in parse_thresholds("aopc=0.1", scope="both")] == ["head"]  # no network-scope aopc
    drops = parse_max_drop("faithfulness=0.02", scope="both")
    assert [(d.scope, d.implied) for d in drops] == [("head", False), ("network", True)]
    # a head-scope baseline has no network half to regress from: that half is skipped, not failed; named, it fails
    implied = _drop_check(drops[1], "network:laya", None)
    assert implied.passed and implied.skipped
    named = parse_max_drop("network:faithfulness=0.02", scope="both")[0]
    assert not _drop_check(named, "network:laya", None).passed
