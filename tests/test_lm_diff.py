"""``laya diff`` of two language models (``--task lm``): per-token faithfulness and Deletion@1 of both checkpoints on
the same held-out positions, their change B − A with paired intervals — checked against two independent ``laya
audit`` runs, against a checkpoint diffed with itself, and the mismatches refused in one line."""

from __future__ import annotations

import json

import pytest

from laya_cli.training.lm import train_lm
from tests.helpers import assert_user_error, invoke, lm_request, make_causal_lm, make_lm_folder, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SAMPLES = "120"


def _train(lm_dir, out, **kw):
    base = dict(block_size=16, batch_size=8, epochs=1, lr=3e-3, eval_tokens=300)
    req = lm_request(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", out, **{**base, **kw})
    train_lm(req)
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two checkpoints of one tiny GPT-2 on one text: objective kl (A) and ce with another seed (B)."""
    root = tmp_path_factory.mktemp("lmdiff")
    lm_dir = make_lm_folder(root / "data", sentences(400), 330)
    a = _train(lm_dir, root / "a.pt", layer_dropout=0.3)  # (without it α collapses: every ρ undefined)
    b = _train(lm_dir, root / "b.pt", objective="ce", seed=7, layer_dropout=0.3)
    return lm_dir, a, b


def _diff(a, b, out, *extra):
    r = invoke("diff", a, b, "--samples", SAMPLES, "--scope", "both", "--json", out, "--quiet", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_a_checkpoint_diffed_with_itself_changes_nothing(pair, tmp_path):
    _, a, _ = pair
    doc = _diff(a, a, tmp_path / "d.json")
    assert doc["settings"]["task"] == "lm" and doc["settings"]["same_model"] and doc["n_samples"] == int(SAMPLES)
    assert doc["accuracy"]["change"] == 0 and doc["accuracy"]["a_only"] == doc["accuracy"]["b_only"] == 0
    for scope in ("head", "network"):
        methods = doc["scopes"][scope]["methods"]
        assert {"laya", "gradxact", "random"} <= set(methods)
        for metrics in methods.values():
            assert metrics["faithfulness"]["n_defined"] > 0
            for m in metrics.values():
                assert m["change"] == 0 and m["ci_low"] == 0 and m["ci_high"] == 0 and m["a"] == m["b"]
        for row in doc["scopes"][scope]["layers"]:
            assert row["alpha_change"] == 0 and row["delta_change"] == 0


def test_the_change_is_the_difference_of_two_independent_audits(pair, tmp_path):
    """Each figure under A (B) is `laya audit A` (B) on the same positions; the change is B − A, inside its interval."""
    _, a, b = pair
    doc = _diff(a, b, tmp_path / "d.json", "--compare", "gradxact,atp")
    assert doc["settings"]["same_model"] is True  # the same frozen model, two heads
    audits = {}
    for name, path in (("a", a), ("b", b)):
        out = tmp_path / f"{name}.json"
        r = invoke("audit", path, "--samples", SAMPLES, "--scope", "both", "--compare", "gradxact,atp",
                   "--json", out, "--quiet")  # fmt: skip
        assert r.exit_code == 0, r.output
        audits[name] = json.loads(out.read_text())
    changed = 0
    for scope in ("head", "network"):
        for method in ("laya", "gradxact", "atp"):
            own = {k: (v["methods"] if scope == "head" else v["network"]["methods"])[method] for k, v in audits.items()}
            for metric in ("faithfulness", "deletion@1"):
                got = doc["scopes"][scope]["methods"][method][metric]
                assert got["a"] == pytest.approx(own["a"][metric], abs=1e-6)
                assert got["b"] == pytest.approx(own["b"][metric], abs=1e-6)
                assert got["change"] == pytest.approx(own["b"][metric] - own["a"][metric], abs=1e-6)
                assert got["ci_low"] <= got["change"] <= got["ci_high"]
                changed += got["change"] != 0
    assert changed > 0  # two different heads: something moved
    head_acc = [audits[k]["accuracy"] for k in ("a", "b")]
    assert doc["accuracy"]["a"] == pytest.approx(head_acc[0]) and doc["accuracy"]["b"] == pytest.approx(head_acc[1])
    assert set(doc["by_position"]) == {"head", "network"}


def test_markdown_and_terminal_tables(pair, tmp_path):
    _, a, b = pair
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    r = invoke("diff", a, b, "--samples", "60", "--scope", "network", "--markdown", md, "--json", js)
    assert r.exit_code == 0, r.output
    assert "per-token faithfulness" in r.output and "by position" in r.output
    text = md.read_text()
    assert text.startswith("### laya diff (language models)") and "| network | laya |" in text
    doc = json.loads(js.read_text())
    assert set(doc["scopes"]) == {"network"} and 0 <= doc["accuracy"]["a"] <= 1


def test_a_language_model_beside_a_classifier_is_one_line(pair, digits_ckpt, tmp_path):
    _, a, _ = pair
    out = tmp_path / "d.json"
    assert_user_error(invoke("diff", a, digits_ckpt, "--json", out), "two language models or two classifiers")
    assert_user_error(invoke("diff", digits_ckpt, a, "--json", out), "is a language model's")
    assert not out.exists()


def test_mismatched_language_models_are_one_line_and_write_nothing(pair, tmp_path):
    lm_dir, a, _ = pair
    other = make_lm_folder(tmp_path / "other", sentences(400, seed=5), 330)
    out = tmp_path / "d.json"
    cases = [
        (_train(lm_dir, tmp_path / "block.pt", block_size=12), "blocks of"),
        (_train(other, tmp_path / "text.pt"), "give both the same held-out text"),
    ]
    # the same text read by a model whose tokenizer was learnt on other sentences: other tokens, other positions
    make_causal_lm(tmp_path / "tok", sentences(300, seed=9) + ["zebra quartz jukebox"] * 50)
    req = lm_request(f"hf:{tmp_path / 'tok'}", f"text:{lm_dir / 'corpus'}", tmp_path / "tok.pt", block_size=16,
                    batch_size=8, epochs=1, eval_tokens=300)  # fmt: skip
    train_lm(req)
    cases.append((tmp_path / "tok.pt", "different tokens"))
    for b, fragment in cases:
        assert_user_error(invoke("diff", a, b, "--samples", "30", "--json", out), fragment)
    for args, fragment in [
        (["--fail-if-changed", "any"], "--fail-if-changed"),
        (["--scope", "everywhere"], "unknown --scope 'everywhere'"),
        (["--ci", "0"], "--ci"),
        (["--ablation", "zero"], "--ablation zero"),
        (["--compare", "nonsense"], "nonsense"),
        (["--dataset", "digits"], "text:PATH"),
    ]:
        assert_user_error(invoke("diff", a, a, "--samples", "30", "--json", out, *args), fragment)
    assert not out.exists()
