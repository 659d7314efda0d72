"""Model cards (issue 27): ``laya export --model-card`` writes a Hugging Face README.md whose front matter
``huggingface_hub.ModelCard`` parses back (offline) to the checkpoint's accuracy and the audit's metrics;
``AuditResult.to_model_card()`` gives the same card section from the Python API."""

from __future__ import annotations

import json
import math

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from helpers import invoke

from laya_cli.auditing.card import card_metrics, front_matter
from laya_cli.auditing.results import AuditResult, MethodScores

hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub (installed with transformers) reads cards")


def _results(card) -> dict[tuple[str, str | None], float]:
    """{(metric type, method): value} of a parsed card's model-index."""
    return {(r.metric_type, (r.metric_args or {}).get("method")): r.metric_value for r in card.data.eval_results}


@pytest.fixture(scope="module")
def audited(digits_ckpt, tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    audit_json = root / "audit.json"
    result = invoke("audit", digits_ckpt, "--samples", "120", "--compare", "ig,gradxact", "--json", audit_json, "-q")
    assert result.exit_code == 0, result.output
    return root, audit_json


def test_export_writes_a_card_the_hub_parses_back(digits_ckpt, audited):
    import torch

    root, audit_json = audited
    out = root / "export"
    result = invoke(
        "export", digits_ckpt, "--out", out, "--model-card", "--audit", audit_json, "--samples", "200", "-q"
    )
    assert result.exit_code == 0, result.output
    card = hub.ModelCard.load(out / "README.md")  # a local file: no network
    audit = json.loads(audit_json.read_text())
    test_accuracy = torch.load(digits_ckpt, weights_only=True)["metrics"]["test_accuracy"]

    values = _results(card)
    assert values[("accuracy", None)] == pytest.approx(test_accuracy, abs=1e-4)
    for method in ("laya", "ig", "gradxact", "random"):
        for metric in ("faithfulness", "deletion@1", "deletion@1_normalised"):
            assert values[(metric, method)] == pytest.approx(audit["methods"][method][metric], abs=1e-4)
    r = card.data.eval_results[0]
    assert (r.task_type, r.dataset_type, r.dataset_split) == ("image-classification", "digits", "test")
    assert card.data.library_name == "laya" and "layer-attribution" in card.data.tags

    text = card.text
    assert "| laya |" in text and "| ig |" in text  # the audit table
    assert "](plots/class_layer_all.png)" in text and (out / "plots" / "class_layer_all.png").is_file()
    assert "laya export" in text and "## How this card was produced" in text
    assert "README.md" in json.loads((out / "summary.json").read_text())["files"]
    run_toml = tomllib.loads(text.split("```toml\n")[1].split("```")[0])  # the recorded audit options, a --config
    assert run_toml["audit"]["samples"] == 120 and run_toml["audit"]["compare"] == "ig,gradxact"


def test_a_card_without_an_audit_has_the_accuracy_and_says_how_to_add_one(digits_ckpt, tmp_path):
    out = tmp_path / "export"
    result = invoke("export", digits_ckpt, "--out", out, "--model-card", "--no-plots", "--samples", "50", "-q")
    assert result.exit_code == 0, result.output
    card = hub.ModelCard.load(out / "README.md")
    assert [r.metric_type for r in card.data.eval_results] == ["accuracy"]
    assert "No layer-attribution audit attached" in card.text and "--plots" in card.text


def test_no_card_unless_asked(digits_ckpt, tmp_path):
    assert invoke("export", digits_ckpt, "--out", tmp_path / "e", "--no-plots", "--samples", "20", "-q").exit_code == 0
    assert not (tmp_path / "e" / "README.md").exists()


def _scores(faithfulness: float, deletion: float) -> MethodScores:
    return MethodScores(
        faithfulness=faithfulness,
        faithfulness_std=0.1,
        defined=9,
        undefined=1,
        deletion_at_1=deletion,
        oracle=0.5,
        random=0.2,
        normalised=(deletion - 0.2) / 0.3,
    )


def test_the_python_api_gives_the_same_card_section():
    result = AuditResult(
        settings={"dataset": "digits", "ablation": "mean", "layers": 3},
        n_samples=10,
        accuracy=0.9,
        layers=["a", "b", "c"],
        methods={"laya": _scores(0.8, 0.45), "ig": _scores(math.nan, 0.4)},
    )
    card = hub.ModelCard(result.to_model_card(name="my-model"))
    values = _results(card)
    assert card.data.model_name == "my-model"
    assert values[("accuracy", None)] == 0.9 and values[("faithfulness", "laya")] == 0.8
    assert ("faithfulness", "ig") not in values  # undefined: left out, never written as NaN
    assert values[("deletion@1", "ig")] == 0.4
    assert "| laya | 0.8000 |" in card.text and "| ig | — |" in card.text
    assert hub.ModelCard(result.to_model_card(accuracy=0.95)).data.eval_results[0].metric_value == 0.95


def test_front_matter_quotes_what_yaml_would_misread():
    metrics = card_metrics(None, 0.5)
    text = front_matter({"name": 'a: "b" # c', "dataset": "folder:/x/y"}, metrics)
    card = hub.ModelCard(text + "\nbody\n")
    assert card.data.model_name == 'a: "b" # c' and card.data.datasets == ["folder:/x/y"]
