"""A language model through the Python API, as a notebook would run it: ``fit(..., task="lm")`` trains the heads
``laya train --task lm`` trains, and ``audit``, ``depth``, ``export``, ``diff`` and ``load`` take the ``LayaLM``
it returns — the same jobs, the same numbers as the command line."""

from __future__ import annotations

import json

import pytest
from helpers import invoke, make_lm_folder, sentences

import laya_cli
from laya_cli import LayaError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SMALL = dict(block_size=16, batch_size=8, epochs=1, lr=3e-3, eval_tokens=300, lens="none", seed=3)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("api-lm"), sentences(300), 240)


@pytest.fixture(scope="module")
def fitted(lm_dir):
    model = laya_cli.fit(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", task="lm", progress=False, **SMALL)
    return model


def test_a_notebook_trains_audits_and_saves_a_language_model(fitted, lm_dir, tmp_path):
    assert isinstance(fitted, laya_cli.LayaLM) and fitted.layer_names == [f"h.{i}" for i in range(4)]
    result = laya_cli.audit(fitted, compare="gradxact", samples=120, progress=False)
    # no scope named: the language model's question (each layer bypassed inside the network), as laya audit asks it
    assert result.summary["question"]["scope"] == result.settings["scope"] == "network" and not result.methods
    frame = result.to_pandas()  # the network scope's rows: the scope it ran
    assert set(frame.index) >= {"laya", "gradxact", "random"} and result.n_samples == 120
    assert -1 <= result.summary["network"]["methods"]["laya"]["faithfulness"] <= 1
    assert frame.loc["laya", "faithfulness"] == result.summary["network"]["methods"]["laya"]["faithfulness"]
    exits = laya_cli.depth(fitted, samples=200, progress=False)
    assert exits.tokens == 200 and exits.settings["tokens"] == 200
    exported = laya_cli.export(fitted, samples=100, progress=False)
    assert exported.n == 100 and not exported.files  # nothing written without out
    path = fitted.save(tmp_path / "lm.pt")
    again = laya_cli.load(path)
    assert isinstance(again, laya_cli.LayaLM) and again.checkpoint["metrics"] == fitted.checkpoint["metrics"]


def test_the_api_and_the_command_line_train_the_same_heads(fitted, lm_dir, tmp_path):
    """The same settings give the same checkpoint: one job, one request, whichever wrapper built it."""
    out = tmp_path / "cli.pt"
    options = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
    named = ["--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}"]
    r = invoke("train", "--task", "lm", *named, *options, "--align", "0", "--exit-aware", "0", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    api = laya_cli.fit(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", task="lm", progress=False,
                       align=0.0, exit_aware=0.0, **SMALL)  # fmt: skip
    cli = laya_cli.load(out)
    assert json.dumps(api.checkpoint["metrics"], sort_keys=True) == json.dumps(
        cli.checkpoint["metrics"], sort_keys=True
    )
    for name, tensor in api.checkpoint["head"]["weights"].items():
        assert tensor.equal(cli.checkpoint["head"]["weights"][name]), name


def test_two_versions_of_a_language_model_are_diffed_per_token(fitted, lm_dir):
    other = laya_cli.fit(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", task="lm", progress=False,
                         **{**SMALL, "seed": 4})  # fmt: skip
    result = laya_cli.diff(fitted, other, samples=100, bootstrap=50, progress=False)
    assert isinstance(result, laya_cli.api.DiffResult) and result.kind == "tokens" and result.changed == []
    doc = result.to_dict()  # the one result type of a diff; its document that of laya diff --json
    assert doc["settings"]["task"] == "lm" and set(doc["scopes"]["head"]["methods"]) >= {"laya", "gradxact"}
    assert "tokens" in repr(result) or "laya diff" in repr(result)


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda d: laya_cli.fit(f"hf:{d / 'model'}", f"text:{d / 'corpus'}", task="lm", stop_on="combined"),
         "--stop-on only applies to classifiers"),
        (lambda d: laya_cli.fit(f"hf:{d / 'model'}", f"text:{d / 'corpus'}", task="lm", frozen=False),
         "frozen: a classifier's"),
        (lambda d: laya_cli.fit(None, None, objective="ce"), "--objective only applies to language models"),
        (lambda d: laya_cli.fit(None, None, reads="updates"), "--reads only applies to language models"),
        (lambda d: laya_cli.fit(d, d, task="lm"), "a language model is named as on the command line"),
    ],
)  # fmt: skip
def test_a_setting_of_the_other_task_is_one_line(lm_dir, call, fragment):
    with pytest.raises(LayaError, match=fragment):
        call(lm_dir)
