"""The front door (issue 63): what a newcomer meets does what a timm or transformers user means — fine-tuning
starts from the weights named, a frozen random backbone is warned about, a gate without a method checks the
model's own attribution, ``--help`` is grouped, a file that is not a checkpoint says what it looks like."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_user_error, invoke, run_laya

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _word_embeddings(state: dict) -> torch.Tensor:
    return next(v for k, v in state.items() if k.endswith("word_embeddings.weight"))


def test_finetune_starts_from_the_folders_weights(text_ckpt, tmp_path):
    """--finetune on an hf: folder trains from the folder's weights (not random ones), and says so first."""
    from transformers import AutoModel

    root = text_ckpt.ckpt.parent
    folder = root / "bert"
    common = ["train", "--backbone", f"hf:{folder}", "--dataset", f"csv:{root / 'data'}", "--finetune",
              "--max-length", "16", "--epochs", "1"]  # fmt: skip
    r = run_laya(*common, "--lr", "1e-12", "--out", tmp_path / "ft.pt")
    assert r.returncode == 0, r.stderr
    assert f"starts from hf pretrained {folder.resolve()}; fine-tuned end to end" in r.stderr.splitlines()[0]
    given = _word_embeddings(AutoModel.from_pretrained(folder).state_dict())
    tuned = torch.load(tmp_path / "ft.pt", weights_only=True)["backbone"]["weights"]
    assert (_word_embeddings(tuned) - given).abs().max() < 1e-6  # the folder's weights, moved by lr 1e-12 only
    r = run_laya(*common, "--no-pretrained", "--out", tmp_path / "random.pt")
    assert r.returncode == 0 and "starts from random initialisation (--no-pretrained)" in r.stderr, r.stderr
    random = torch.load(tmp_path / "random.pt", weights_only=True)["backbone"]["weights"]
    assert (_word_embeddings(random) - given).abs().max() > 0.01  # asked for: another start


def test_a_frozen_random_backbone_is_warned_at_train_info_and_audit(tmp_path):
    out = tmp_path / "frozen.pt"
    r = run_laya("train", "--frozen", "--epochs", "1", "--out", out, "-q")
    assert r.returncode == 0 and "warning: mlp is frozen at its random initialisation" in r.stderr, r.stderr
    assert "--finetune" in r.stderr.splitlines()[0]  # what gives a useful model instead
    r = run_laya("info", out)
    assert "warning: mlp is frozen at its random initialisation" in r.stderr
    doc = json.loads(run_laya("info", out, "--json").stdout)
    assert doc["warnings"] and "random initialisation" in doc["warnings"][0]
    r = run_laya("audit", out, "--samples", "40", "--compare", "")
    assert r.returncode == 0 and "frozen at its random initialisation" in r.stderr, r.stderr


def test_a_trained_backbone_is_not_warned_about(digits_ckpt):
    assert json.loads(run_laya("info", digits_ckpt, "--json").stdout)["warnings"] == []


def test_offline_advice_leads_to_a_useful_model():
    """Pretrained weights that cannot be had: the way out is a file of weights or training from scratch, never a
    frozen random backbone."""
    from laya_cli.backbones.weights import pretrained_unavailable

    message = str(pretrained_unavailable("timm:resnet18", "the weights are not cached"))
    assert "--weights FILE" in message and "--no-pretrained --finetune" in message
    assert "randomly initialised backbone" not in message


@pytest.mark.parametrize(
    "gate, recorded, checks",
    [
        ("faithfulness=-1", "laya:faithfulness=-1", 1),  # unqualified: the model's own attribution only
        ("gradxact:faithfulness=-1", "gradxact:faithfulness=-1", 1),  # a reference method when named
        ("all:faithfulness=-1", "all:faithfulness=-1", 2),  # every audited method but random: laya, gradxact
        ("accuracy=0", "accuracy=0", 1),  # the model's metric
    ],
)
def test_a_gate_without_a_method_checks_the_models_own_attribution(digits_ckpt, tmp_path, gate, recorded, checks):
    out = tmp_path / "a.json"
    r = invoke("audit", digits_ckpt, "--samples", "60", "--compare", "gradxact", "--fail-under", gate, "--json", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["fail_under"]["thresholds"] == [recorded] and doc["verdict"]["checks"] == checks


def test_a_failed_gate_names_what_it_checked(digits_ckpt):
    r = invoke("audit", digits_ckpt, "--samples", "60", "--compare", "gradxact", "--fail-under", "faithfulness=2", "-q")
    assert r.exit_code == 1
    verdict = r.stdout.strip().splitlines()[-1]
    assert "1 of 1 gate checks failed: laya: faithfulness" in verdict and "gradxact" not in verdict


def test_help_lists_the_options_in_panels_main_first():
    text = invoke("train", "--help", terminal_width=100).stdout
    panels = ["Main:", "Data:", "Backbone:", "Head:", "Training:", "α shaping:", "Language models (--task lm):"]
    where = [text.index(f"\n{p}\n") for p in panels]
    assert where == sorted(where), where
    main = text[where[0] : where[1]]
    for flag in ("--backbone", "--dataset", "--task", "--head", "--epochs", "--out"):
        assert flag in main
    assert "hf:" in text and "text:PATH" in text and ".pt2" in text  # the help names every kind it takes
    audit = invoke("audit", "--help", terminal_width=100).stdout
    assert audit.index("--samples") < audit.index("--ablation") < audit.index("--fail-under")
    summaries = invoke("--help", terminal_width=100).stdout
    assert "…" not in summaries and "..." not in summaries.split("Commands:")[1]


@pytest.mark.parametrize(
    "content, kind",
    [
        (b"text,label\nhello,a\n", "CSV text"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 16, "a PNG image"),
        (b'{"a": 1}', "JSON text"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_says_what_it_looks_like(tmp_path, content, kind):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    assert_user_error(invoke("audit", path), f"is not a laya checkpoint: it looks like {kind}")
