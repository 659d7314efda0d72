"""The Python API (docs/api.md): the contract, your loaders in, DataFrames out, one checkpoint with the CLI."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_user_error, invoke
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import laya_cli
from laya_cli import LayaError

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs" / "api.md"
PUBLIC = [
    "AuditResult",
    "DepthResult",
    "DiffResult",
    "Export",
    "LayaError",
    "LayaLM",
    "LayaModel",
    "LayaWarning",
    "Tapped",
    "TokenExitResult",
    "TokenExport",
    "attach",
    "audit",
    "depth",
    "diff",
    "export",
    "fit",
    "load",
]


class TinyNet(nn.Module):
    """A user's own network (no name laya could rebuild it by): three blocks on 1×8×8 images."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(
            nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.GELU()),
            nn.Sequential(nn.Linear(128, 128), nn.GELU()),
            nn.Sequential(nn.Linear(128, 64), nn.GELU()),
        )

    def forward(self, x):
        return self.blocks(x)


def digits_splits():
    from laya_cli.data.datasets import load_dataset
    from laya_cli.data.settings import DataSettings

    return load_dataset(DataSettings("digits"))


def digits_test_loader(batch_size: int = 256) -> DataLoader:
    """laya's own digits test split ([0, 1] images), in order: what `laya audit` audits."""
    return DataLoader(digits_splits().test, batch_size=batch_size)


def user_loaders(n: int | None = None, shuffle: bool = True) -> tuple[DataLoader, DataLoader]:
    d = digits_splits()
    train = d.train if n is None else d.train.subset(torch.arange(n))
    return DataLoader(train, batch_size=64, shuffle=shuffle), DataLoader(d.val, batch_size=128)


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    train, val = user_loaders()
    return laya_cli.fit(laya_cli.attach(TinyNet()), train, val, epochs=4, seed=0, progress=False)


def cli_json(*args, tmp_path: Path) -> dict:
    out = tmp_path / f"cli-{len(list(tmp_path.iterdir()))}.json"
    result = invoke("audit", *args, "--json", out, "-q")
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def same_numbers(api_summary: dict, cli: dict) -> None:
    for key in ("methods", "accuracy", "n_samples", "layers", "by_class"):
        assert api_summary.get(key) == cli.get(key), key


# --------------------------------------------------------------------------- the contract


def test_all_is_the_contract_and_importing_it_does_not_import_torch():
    code = "import sys, laya_cli; assert 'torch' not in sys.modules; print(','.join(laya_cli.__all__))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().split(",") == PUBLIC
    package = Path(laya_cli.__file__).parent
    for name in ("audit", "export", "depth", "diff", "fit", "attach", "load"):  # public functions, never modules
        assert not (package / f"{name}.py").exists() and not (package / name).is_dir(), name
    assert (package / "py.typed").is_file()
    from laya_cli import api

    assert laya_cli.audit is api.audit and laya_cli.fit is api.fit and laya_cli.load is api.load


def test_internal_names_are_not_on_the_package():
    """The deprecated root names are gone: the package holds the public API only."""
    for name in ("run_audit", "HEADS", "TrainingSettings", "build_backbone"):
        with pytest.raises(AttributeError):
            getattr(laya_cli, name)
    assert not any(name.startswith("_moved") for name in dir(laya_cli))


def test_the_docs_quote_every_public_docstring():
    import inspect

    from laya_cli.auditing.head_scope import AuditResult
    from laya_cli.model.laya_model import LayaModel

    text = DOCS.read_text(encoding="utf-8")
    for fn in (
        laya_cli.attach,
        laya_cli.fit,
        laya_cli.audit,
        laya_cli.export,
        laya_cli.load,
        LayaModel.save,
        AuditResult.to_pandas,
        AuditResult.per_sample,
        AuditResult.to_model_card,
        laya_cli.depth,
        laya_cli.DepthResult.to_pandas,
    ):
        assert inspect.getdoc(fn) in text, f"docs/api.md does not quote the docstring of {fn.__qualname__}"


# --------------------------------------------------------------------------- API == CLI


def test_audit_on_a_loader_over_the_test_split_equals_laya_audit_json(digits_ckpt, tmp_path):
    cli = cli_json(digits_ckpt, "--compare", "all", "--by-class", tmp_path=tmp_path)
    result = laya_cli.audit(
        laya_cli.load(digits_ckpt), digits_test_loader(), compare="all", by_class=True, progress=False
    )
    same_numbers(result.summary, cli)
    assert cli["n_samples"] == len(digits_splits().test) and set(cli["methods"]) == {
        "laya",
        "ig",
        "gradxact",
        "atp",
        "saliency",
        "contrib",
        "global",
        "random",
    }
    # The tables are the same numbers, reshaped.
    table = result.to_pandas()
    assert list(table.index) == list(cli["methods"])
    assert table.loc["ig", "faithfulness"] == cli["methods"]["ig"]["faithfulness"]
    by_class = result.to_pandas(by_class=True)
    assert by_class.loc[("3", "laya"), "deletion@1"] == cli["by_class"]["3"]["methods"]["laya"]["deletion@1"]


def test_depth_on_a_loader_over_the_test_split_equals_laya_depth_json(digits_ckpt, digits_ckpts, tmp_path):
    out = tmp_path / "depth.json"
    r = invoke("depth", digits_ckpt, "--time-repeats", 0, "--json", out, "-q")
    assert r.exit_code == 0, r.output
    cli = json.loads(out.read_text())
    result = laya_cli.depth(laya_cli.load(digits_ckpt), digits_test_loader(), time_repeats=0, progress=False)
    assert isinstance(result, laya_cli.DepthResult)
    doc = result.to_dict()
    for key in ("n_samples", "layers", "full", "oracle", "early_exit"):
        assert doc[key] == cli[key], key
    table = result.to_pandas()
    assert list(table.index) == [1, 2, 3] and list(table["layer"]) == cli["layers"]
    assert list(table["accuracy"]) == [row["accuracy"] for row in cli["truncation"]]
    assert list(table["flops"]) == [row["flops"] for row in cli["truncation"]]
    assert table.loc[3, "delta"] == 0
    with pytest.raises(laya_cli.LayaError, match="no layer weighting"):
        laya_cli.depth(laya_cli.load(digits_ckpts["concat"]), digits_test_loader(), progress=False)
    with pytest.raises(laya_cli.LayaError, match=r"\(0, 1\]"):
        laya_cli.depth(laya_cli.load(digits_ckpt), digits_test_loader(), thresholds=(0.5, 1.5), progress=False)


def test_a_cut_checkpoint_of_your_own_class_loads_into_a_whole_module(tiny_model, tmp_path):
    """``laya depth --truncate``'s writer on a ``user:`` backbone: ``load(path, backbone=TinyNet())`` cuts
    the whole module given after the last kept tap, loads the kept weights and predicts as the masked model."""
    from laya_cli.depthing.analysis import truncate_model
    from laya_cli.depthing.settings import DepthSettings
    from laya_cli.depthing.truncation import masked_output
    from laya_cli.model.evaldata import loader_eval_data as eval_data

    full = laya_cli.load(tiny_model.save(tmp_path / "tiny.pt"), backbone=TinyNet())
    data = eval_data(full, digits_test_loader(), "cpu", keep_images=True)
    truncate_model(full, data, DepthSettings(truncate=2, time_repeats=0), tmp_path / "tiny2.pt")
    cut = laya_cli.load(tmp_path / "tiny2.pt", backbone=TinyNet())
    assert isinstance(cut.backbone.model.blocks[2], nn.Identity) and cut.layer_names == ["blocks.0", "blocks.1"]
    with torch.no_grad():
        want = masked_output(full.head, data.features.feats, full.reference, 2).logits
        torch.testing.assert_close(cut(data.images.float()).logits, want, rtol=1e-4, atol=1e-5)


def test_per_sample_rows_agree_with_the_summary_and_with_the_definitions(digits_ckpt):
    from scipy.stats import spearmanr

    model = laya_cli.load(digits_ckpt)
    result = laya_cli.audit(model, digits_test_loader(batch_size=100), compare=("ig", "global"), progress=False)
    df = result.per_sample()
    layers = result.layers
    n = len(digits_splits().test)
    assert len(df) == n and list(df["index"]) == list(range(n))
    assert [c for c in df.columns if c.startswith("delta[")] == [f"delta[{n}]" for n in layers]
    for m in ("laya", "ig", "global", "random"):
        s = result.summary["methods"][m]
        rho = df[f"faithfulness[{m}]"]
        assert math.isclose(rho.mean(skipna=True), s["faithfulness"], rel_tol=1e-9, abs_tol=1e-12)
        assert rho.isna().sum() == s["undefined"]
        assert math.isclose(df[f"deletion@1[{m}]"].mean(), s["deletion@1"], rel_tol=1e-9, abs_tol=1e-12)
        scores = df[[f"{m}[{n}]" for n in layers]].to_numpy()
        delta = df[[f"delta[{n}]" for n in layers]].to_numpy()
        top = scores.argmax(1)  # Deletion@1 by hand: Δ of each row's top-ranked layer
        assert np.allclose(df[f"deletion@1[{m}]"], delta[np.arange(len(df)), top])
        for i in range(5):  # ρ by hand (scipy) on a few rows
            if not np.isnan(rho[i]):
                assert math.isclose(rho[i], spearmanr(scores[i], delta[i]).statistic, abs_tol=1e-9)
    # Rows are the loader's samples: Δ by hand for the first images (remove layer i := r̄_i).
    images, labels = next(iter(digits_test_loader(batch_size=3)))
    assert list(df["label"][:3]) == labels.tolist()
    with torch.no_grad():
        feats = model.features(images)
        probs = torch.softmax(model.head(feats).logits, -1)
        target = probs.argmax(-1)
        assert list(df["predicted"][:3]) == target.tolist() == list(df["target"][:3])
        for i, name in enumerate(layers):
            removed = [model.reference[j].expand_as(f) if j == i else f for j, f in enumerate(feats)]
            p = torch.softmax(model.head(removed).logits, -1).gather(1, target[:, None])[:, 0]
            by_hand = probs.gather(1, target[:, None])[:, 0] - p
            assert np.allclose(df[f"delta[{name}]"][:3], by_hand.numpy(), atol=1e-6)


def test_export_gives_dataframes_and_writes_files_only_with_out(digits_ckpt, tmp_path):
    import pandas as pd

    model = laya_cli.load(digits_ckpt)
    exp = laya_cli.export(model, digits_test_loader(), progress=False)
    assert exp.out is None and exp.files == [] and not any(tmp_path.iterdir())
    alpha = [f"alpha[{n}]" for n in model.layer_names]
    assert len(exp.table) == len(digits_splits().test) and set(alpha) <= set(exp.table.columns)
    assert np.allclose(exp.table[alpha].sum(axis=1), 1.0)
    assert set(exp.profiles["subset"]) == {"all", "correct", "incorrect"} and len(exp.shift) == 10
    # The same table `laya export` writes for the same checkpoint and samples.
    result = invoke("export", digits_ckpt, "--out", tmp_path / "cli", "--no-plots", "-q")
    assert result.exit_code == 0, result.output
    cli = pd.read_csv(tmp_path / "cli" / "samples.csv")
    assert list(cli.columns) == list(exp.table.columns)
    assert np.allclose(cli[alpha].to_numpy(), exp.table[alpha].to_numpy(), rtol=0, atol=1e-12)
    written = laya_cli.export(model, digits_test_loader(), out=tmp_path / "api", plots=False, progress=False)
    assert written.out == tmp_path / "api" and "samples.csv" in written.files
    assert (tmp_path / "api" / "report.html").is_file()
    with pytest.raises(LayaError, match="is not empty"):
        laya_cli.export(model, digits_test_loader(), out=tmp_path / "cli", progress=False)


# --------------------------------------------------------------------------- fit, save, load


def test_fit_your_own_module_frozen_save_load_and_what_the_cli_says(tiny_model, digits_ckpt, tmp_path):
    from laya_cli.model.checkpoint import read_checkpoint

    model = tiny_model
    assert model.spec.name.startswith("user:") and model.spec.name.endswith(".TinyNet")
    assert model.layer_names == ["blocks.0", "blocks.1", "blocks.2"] and model.head_kind == "laya"
    assert model.checkpoint["metrics"]["epochs_run"] == 4 and model.checkpoint["dataset"]["name"] == "user"
    path = model.save(tmp_path / "tiny.pt")
    ours, theirs = read_checkpoint(path), read_checkpoint(digits_ckpt)
    # the format of `laya train` (tap_reference: only end-to-end training stores it, docs/checkpoint.md)
    assert set(ours) - {"tap_reference"} == set(theirs) - {"tap_reference"} and "tap_reference" not in ours
    for section in ("backbone", "head", "metrics", "train_config"):
        assert set(theirs[section]) <= set(ours[section]), section
    # less the data pinning (data/pinning.py): it names where a named dataset was read; loaders have no name to re-read
    pinning = {"resolved", "data_dir_resolved", "fingerprint"}
    assert set(theirs["dataset"]) - pinning <= set(ours["dataset"])
    # The zoo's record of the backbone: tap formats resolved (not a pre-format checkpoint), where the
    # weights came from, their SHA-256 — and a user module loaded with other weights is refused.
    assert ours["backbone"]["spec"]["formats"] == ours["backbone"]["formats"] == ["NC", "NC", "NC"]
    assert ours["backbone"]["source"] == "your nn.Module (laya_cli.attach)" and len(ours["backbone"]["sha256"]) == 64
    from laya_cli.model.checkpoint import save_checkpoint

    edited = {k: v for k, v in ours.items() if k not in ("format", "format_version", "versions")}
    edited["backbone"] = {**ours["backbone"], "sha256": "0" * 64}
    save_checkpoint(edited, tmp_path / "edited.pt")
    with pytest.raises(LayaError, match="differ from those the checkpoint was trained with"):
        laya_cli.load(tmp_path / "edited.pt", backbone=TinyNet())
    info = invoke("info", path)
    assert info.exit_code == 0 and "TinyNet" in info.output and "not measured" in info.output
    # Only its own code can build a user's class: the CLI says how to load it, in one line.
    assert_user_error(invoke("audit", path, "--dataset", "digits"), "TinyNet", "laya_cli.load", "backbone=")
    with pytest.raises(LayaError, match="backbone=TinyNet"):
        laya_cli.load(path)
    again = laya_cli.load(path, backbone=TinyNet())
    a = laya_cli.audit(model, digits_test_loader(), progress=False).summary
    assert laya_cli.audit(again, digits_test_loader(), progress=False).summary == a
    assert a["accuracy"] > 0.5  # frozen random conv features, 4 epochs: well above chance (0.1)


def test_fit_is_seeded_and_the_disk_cache_serves_a_shuffling_loader(tmp_path, monkeypatch):
    from laya_cli.features import loaders

    calls = []
    real = loaders.extract_batches
    monkeypatch.setattr(loaders, "extract_batches", lambda *a, **k: calls.append(k) or real(*a, **k))
    train, val = user_loaders(n=300)
    runs = []
    for cache in (False, True, True):
        torch.manual_seed(0)
        net = TinyNet()
        runs.append(laya_cli.fit(laya_cli.attach(net), train, val, epochs=2, seed=3, cache=cache, progress=False))
    # off: train and val extracted; on: both again (no entry yet) and stored; on: both read back.
    assert len(calls) == 4
    heads = [r.head.state_dict() for r in runs]  # the same model all three times
    assert all(torch.equal(heads[0][k], h[k]) for h in heads[1:] for k in heads[0])
    # Random transforms: a different sample every pass, so nothing is cached (and training still works).
    noisy = DataLoader(TensorDataset(torch.rand(64, 1, 8, 8), torch.arange(64) % 10), batch_size=32)

    class Jitter:
        def __iter__(self):
            for x, y in noisy:
                yield x + 0.01 * torch.rand_like(x), y

    calls.clear()
    laya_cli.fit(laya_cli.attach(TinyNet()), Jitter(), epochs=1, cache=True, progress=False)
    laya_cli.fit(laya_cli.attach(TinyNet()), Jitter(), epochs=1, cache=True, progress=False)
    assert len(calls) == 2


def test_a_torchvision_model_is_named_so_the_cli_rebuilds_it(tmp_path):
    import timm
    import torchvision

    tv = torchvision.models.mobilenet_v3_small(num_classes=10)  # its own classifier: not laya's business
    tapped = laya_cli.attach(tv)
    assert tapped.name == "torchvision:mobilenet_v3_small"
    assert laya_cli.attach(timm.create_model("test_resnet", num_classes=0)).name == "timm:test_resnet"
    assert laya_cli.attach(timm.create_model("test_resnet", in_chans=1)).name.startswith("user:")
    d = digits_splits()
    small = DataLoader(TensorDataset(d.train.images[:200].expand(-1, 3, -1, -1), d.train.labels[:200]), batch_size=100)
    model = laya_cli.fit(tapped, small, epochs=1, progress=False)
    again = laya_cli.load(model.save(tmp_path / "tv.pt"))  # rebuilt by name; the 10-class fc is left out
    x = d.test.images[:16]
    assert all(torch.equal(a, b) for a, b in zip(model.features(x.expand(-1, 3, -1, -1)), again.features(x)))


# --------------------------------------------------------------------------- bad input


def test_mistakes_are_one_line_laya_errors_with_the_cli_messages(tiny_model):
    model = tiny_model
    images, labels = torch.rand(8, 1, 8, 8), torch.arange(8)

    def one_line(call, *fragments):
        with pytest.raises(LayaError) as e:
            call()
        msg = str(e.value)
        assert "\n" not in msg and all(f in msg for f in fragments), msg
        return msg

    one_line(lambda: laya_cli.attach("resnet50"), "nn.Module")
    one_line(lambda: laya_cli.attach(TinyNet(), layers="nothing.*"), "matched no module")
    one_line(lambda: laya_cli.attach(TinyNet(), pool="max"), "--pool")
    one_line(lambda: laya_cli.attach(TinyNet(), mean=[0.5]), "mean and std")
    one_line(lambda: laya_cli.fit(TinyNet(), [{"image": images}], progress=False), "(images, labels)")
    one_line(lambda: laya_cli.fit(TinyNet(), [(images[:, 0], labels)], progress=False), "B×C×H×W")
    one_line(lambda: laya_cli.fit(TinyNet(), [(images, labels.float())], progress=False), "integer class label")
    one_line(lambda: laya_cli.fit(TinyNet(), [], progress=False), "no batches")
    one_line(lambda: laya_cli.fit(TinyNet(), [(images, labels)], head="lasst", progress=False), "unknown head", "last")
    one_line(lambda: laya_cli.fit(TinyNet(), [(images, labels)], epochs=0, progress=False), "--epochs")
    one_line(lambda: laya_cli.fit(TinyNet(), [(images, labels)], cache="ram", progress=False), "cache")
    # cache means what --cache means: the on-disk feature cache on or off; the old words name the switch
    one_line(lambda: laya_cli.fit(TinyNet(), [(images, labels)], cache="disk", progress=False), "cache=True", "--cache")
    one_line(lambda: laya_cli.audit(model, [(images, labels + 10)], progress=False), "10 classes")
    one_line(lambda: laya_cli.export(model, [(images, labels)], format="xlsx", out="x", progress=False), "format")
    msg = one_line(lambda: laya_cli.audit(model, [(images, labels)], compare="ig,bogus", progress=False), "bogus")
    cli = invoke("audit", "/nonexistent.pt", "--compare", "ig,bogus")
    assert_user_error(cli, msg)  # the command line says the same words


def test_the_jobs_check_their_settings_before_reading_the_loader(tiny_model):
    """audit and depth run the command line's jobs (auditing.job, depthing.job): a setting the model cannot
    do fails before a single batch is read."""

    class Unread:
        def __iter__(self):
            raise AssertionError("the loader was read before the settings were checked")

    with pytest.raises(LayaError, match="--ablation mask only changes the head"):
        laya_cli.audit(tiny_model, Unread(), scope="network", ablation="mask", progress=False)
    with pytest.raises(LayaError, match="--refit retrains heads"):  # trained from a DataLoader: no data to refit on
        laya_cli.depth(tiny_model, Unread(), refit=True, progress=False)


def test_attaching_twice_leaves_the_users_own_forward_working():
    net, x = TinyNet(), torch.rand(2, 1, 8, 8)
    first, second = laya_cli.attach(net), laya_cli.attach(net)
    expected = net(x)  # the user's own call: the taps' hooks stay out of its way
    assert torch.equal(net(x), expected)
    assert all(torch.equal(a, b) for a, b in zip(first(x), second(x)))
    assert [f.shape[1] for f in second(x)] == [128, 128, 64]


# --------------------------------------------------------------------------- the docs example


def docs_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    body = text.split("<!-- example: start")[1].split("<!-- example: end -->")[0]
    return "\n".join(re.findall(r"```python\n(.*?)```", body, re.S))


def test_the_docs_example_runs_and_its_checkpoint_audits_with_the_cli_to_the_same_numbers(tmp_path):
    (tmp_path / "example.py").write_text(docs_example(), encoding="utf-8")
    env = {**os.environ, "LAYA_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # a small single-process job
    proc = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Tapped(timm:test_efficientnet" in proc.stdout and "test accuracy" in proc.stdout
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", proc.stdout).group(1))
    assert accuracy > 0.8, proc.stdout
    ckpt = tmp_path / "digits-efficientnet.pt"
    # `laya audit` on laya's digits test split == laya_cli.audit on a loader over the same split.
    cli = cli_json(ckpt, "--dataset", "digits", "--compare", "ig,gradxact,contrib", tmp_path=tmp_path)
    api = laya_cli.audit(laya_cli.load(ckpt), digits_test_loader(), compare="ig,gradxact,contrib", progress=False)
    same_numbers(api.summary, cli)
    # Trained from a DataLoader, so there is no dataset to default to: one line saying --dataset.
    assert_user_error(invoke("audit", ckpt), "your own DataLoader", "--dataset")


def test_the_reference_section_is_what_the_code_says():
    """docs/api.md's Reference is written from the docstrings and signatures (tools/api_reference.py)."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "tools" / "api_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, "docs/api.md is out of date: run python tools/api_reference.py"
