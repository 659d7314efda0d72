"""`laya export`: tables, profiles, JS ranking, plots and report.html; library, CliRunner, subprocess."""

from __future__ import annotations

import base64
import copy
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import assert_user_error, invoke, run_laya
from PIL import Image
from scipy.spatial.distance import jensenshannon

from laya_cli.data.settings import EvalDataSettings
from laya_cli.exporting.folder import assemble, build_table, run_export, write_export
from laya_cli.exporting.profiles import js_divergence
from laya_cli.exporting.settings import ExportSettings
from laya_cli.runtime.errors import LayaError

LAYERS = ["blocks.0", "blocks.1", "blocks.2"]
CLASSES = [str(i) for i in range(10)]
BASE_COLUMNS = ["index", "label", "label_name", "predicted", "predicted_name", "correct", "p_pred"]


def on_cpu(**settings) -> ExportSettings:
    """``laya export``'s settings as run_export takes them (resolved: on the CPU)."""
    return ExportSettings(device="cpu", **settings)


def no_leftovers(folder: Path) -> bool:
    """No hidden temp folders of an export left next to the output."""
    return not [p for p in folder.iterdir() if ".laya-" in p.name]


def swap_head(src: Path, dst: Path, kind: str) -> Path:
    """A copy of a checkpoint with a freshly initialised head of another kind (no training needed)."""
    from laya_cli.model.checkpoint import read_checkpoint, save_checkpoint
    from laya_cli.model.heads import build_head
    from laya_cli.model.settings import HeadSettings

    ckpt = read_checkpoint(src)
    torch.manual_seed(0)
    head = build_head(kind, ckpt["dims"], len(ckpt["classes"]), HeadSettings(**ckpt["head"]["config"]))
    ckpt["head"] = {"kind": kind, "config": ckpt["head"]["config"], "weights": head.state_dict()}
    save_checkpoint(ckpt, dst)
    return dst


@pytest.fixture(scope="module")
def exported(digits_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "run"
    exp = run_export(digits_ckpt, out, use_cache=False)  # the declared settings on the CPU, every sample
    return exp, out


@pytest.fixture(scope="module")
def samples_csv(exported) -> pd.DataFrame:
    return pd.read_csv(exported[1] / "samples.csv")


@pytest.fixture(scope="module")
def synthetic():
    """A table with many errors in every class, so every JS value is defined and distinct."""
    rng = np.random.default_rng(1)
    n, L, C = 600, 4, 5
    layers, classes = [f"stage{i}" for i in range(L)], ["cat", "dog", "bird", "ship", "truck"]
    labels = torch.tensor(rng.integers(0, C, n))
    logits = torch.randn(n, C, generator=torch.Generator().manual_seed(1)) + 1.2 * torch.nn.functional.one_hot(
        labels, C
    )
    correct = logits.argmax(-1) == labels
    conc = np.where(correct.numpy()[:, None], [4.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 4.0])
    conc = conc * (1 + labels.numpy()[:, None] * 0.5)  # different shift per class
    alpha = torch.tensor(np.stack([rng.dirichlet(c) for c in conc]), dtype=torch.float32)
    table = build_table(torch.arange(n), labels, logits, alpha, None, layers, classes)
    return assemble(table, layers, classes, None, {"head": "laya"})


# --------------------------------------------------------------------------- files and tables


def test_files_exist_and_parse(exported, samples_csv):
    exp, out = exported
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert on_disk == sorted(exp.files)
    for name in [
        "samples.csv",
        "profiles.csv",
        "global_profile.csv",
        "attention_shift.csv",
        "summary.json",
        "report.html",
    ]:
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "laya-export" and summary["n_samples"] == 359
    assert summary["model"]["layers"] == LAYERS and summary["model"]["classes"] == CLASSES
    assert sorted(summary["files"]) == on_disk
    assert no_leftovers(out.parent)


def test_samples_table_columns_and_values(exported, samples_csv):
    t = samples_csv
    assert list(t.columns) == BASE_COLUMNS + [f"alpha[{n}]" for n in LAYERS] + [f"contrib[{n}]" for n in LAYERS]
    assert len(t) == 359 and t["index"].tolist() == list(range(359))
    assert t["correct"].dtype == bool
    assert (t["correct"] == (t["label"] == t["predicted"])).all()
    assert (t["label_name"].astype(str) == t["label"].map(lambda i: CLASSES[i])).all()
    assert ((t["p_pred"] > 0.1 - 1e-9) & (t["p_pred"] <= 1)).all()
    alpha = t[[f"alpha[{n}]" for n in LAYERS]].to_numpy()
    np.testing.assert_allclose(alpha.sum(1), 1.0, atol=1e-5)
    assert t["correct"].mean() > 0.9


def test_contrib_matches_the_margin(exported, samples_csv):
    """Σ_i contrib_i = logit_ŷ − logit_ŷ₂ − (b_ŷ − b_ŷ₂): recompute from the model itself."""
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model

    exp, _ = exported
    model = load_model(exp.info["checkpoint"])
    feats = load_eval_data(model, use_cache=False).features.feats
    head64 = copy.deepcopy(model.head).double()
    with torch.no_grad():
        logits = head64([f.double() for f in feats]).logits
    top2 = logits.topk(2, dim=-1).indices
    b = head64.classifier.bias.detach()
    rows = torch.arange(len(logits))
    margin = logits[rows, top2[:, 0]] - logits[rows, top2[:, 1]] - (b[top2[:, 0]] - b[top2[:, 1]])
    total = samples_csv[[f"contrib[{n}]" for n in LAYERS]].to_numpy().sum(1)
    np.testing.assert_allclose(total, margin.numpy(), rtol=1e-9, atol=1e-9)


def _pandas_profiles(t: pd.DataFrame, quantity: str) -> pd.DataFrame:
    """Independent reference: melt + groupby in pandas."""
    cols = [c for c in t.columns if c.startswith(f"{quantity}[")]
    frames = []
    for subset, sel in (("all", t), ("correct", t[t["correct"]]), ("incorrect", t[~t["correct"]])):
        long = sel.melt(id_vars=["label"], value_vars=cols, var_name="col", value_name="v")
        long["layer"] = long["col"].str.slice(len(quantity) + 1, -1)
        g = long.groupby(["label", "layer"])["v"].agg(["mean", "std", "count"]).reset_index()
        g["subset"] = subset
        frames.append(g)
    return pd.concat(frames).rename(columns={"label": "class", "count": "n"})


@pytest.mark.parametrize("quantity", ["alpha", "contrib"])
def test_profiles_equal_an_independent_pandas_groupby(exported, samples_csv, quantity):
    _, out = exported
    prof = pd.read_csv(out / "profiles.csv")
    assert list(prof.columns) == [
        "quantity",
        "subset",
        "class",
        "class_name",
        "layer",
        "layer_index",
        "mean",
        "std",
        "n",
    ]
    prof = prof[prof["quantity"] == quantity]
    assert len(prof) == 3 * 10 * 3  # every subset × class × layer, even when empty
    ref = _pandas_profiles(samples_csv, quantity)
    merged = prof.merge(ref, on=["subset", "class", "layer"], how="left", suffixes=("", "_ref"))
    present = merged["n_ref"].notna()
    assert (merged.loc[~present, "n"] == 0).all() and merged.loc[~present, "mean"].isna().all()
    m = merged[present]
    assert (m["n"] == m["n_ref"]).all()
    np.testing.assert_allclose(m["mean"], m["mean_ref"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m["std"], m["std_ref"], rtol=1e-9, atol=1e-12, equal_nan=True)
    assert (prof[prof["subset"] == "all"]["n"] > 0).all()  # every class is in the test split


def test_global_profile_equals_pandas(exported, samples_csv):
    _, out = exported
    g = pd.read_csv(out / "global_profile.csv")
    a = g[(g["quantity"] == "alpha") & (g["subset"] == "all")].sort_values("layer_index")
    cols = [f"alpha[{n}]" for n in LAYERS]
    np.testing.assert_allclose(a["mean"], samples_csv[cols].mean().to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(a["std"], samples_csv[cols].std().to_numpy(), rtol=1e-9)
    assert (a["n"] == 359).all()


# --------------------------------------------------------------------------- Jensen–Shannon


def test_js_divergence_is_scipys_distance_squared():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        p[rng.integers(0, 6)] = 0.0  # zeros are allowed
        assert js_divergence(p, q) == pytest.approx(jensenshannon(p, q, base=2) ** 2, abs=1e-12)
    assert js_divergence([1, 0], [0, 1]) == pytest.approx(1.0)  # disjoint: the bound
    assert js_divergence([0.3, 0.7], [0.3, 0.7]) == pytest.approx(0.0, abs=1e-15)
    assert math.isnan(js_divergence([np.nan, 1.0], [0.5, 0.5]))


def _scipy_ranking(t: pd.DataFrame, layers) -> list[tuple[int, float]]:
    cols = [f"alpha[{n}]" for n in layers]
    out = []
    for c in sorted(t["label"].unique()):
        ok, bad = t[(t["label"] == c) & t["correct"]], t[(t["label"] == c) & ~t["correct"]]
        js = jensenshannon(ok[cols].mean(), bad[cols].mean(), base=2) ** 2 if len(ok) and len(bad) else np.nan
        out.append((int(c), float(js)))
    return sorted(out, key=lambda r: (math.isnan(r[1]), -r[1] if not math.isnan(r[1]) else 0, r[0]))


def test_js_ranking_matches_scipy_on_the_export(exported, samples_csv):
    _, out = exported
    shift = pd.read_csv(out / "attention_shift.csv")
    ref = _scipy_ranking(samples_csv, LAYERS)
    assert shift["class"].tolist() == [c for c, _ in ref]
    # ranked 1, 2, … from the practical size on (issue 64), — (empty) below it and where undefined
    from laya_cli.exporting.profiles import SHIFT_RANKED_FROM

    ranked = (shift["js_divergence"] >= SHIFT_RANKED_FROM).to_numpy()
    assert shift["rank"][ranked].tolist() == list(range(1, ranked.sum() + 1)) and shift["rank"][~ranked].isna().all()
    np.testing.assert_allclose(shift["js_divergence"], [v for _, v in ref], rtol=1e-7, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(shift["js_distance"] ** 2, shift["js_divergence"], rtol=1e-9, equal_nan=True)
    undefined = shift["js_divergence"].isna()
    assert undefined.any()  # a 98%-accurate model has classes without errors: n/a, ranked last
    assert (shift.loc[undefined, "n_incorrect"] == 0).all()
    assert not undefined.iloc[: (~undefined).sum()].any()


def test_js_ranking_matches_scipy_on_many_errors(synthetic):
    ref = _scipy_ranking(synthetic.table, synthetic.layers)
    assert synthetic.shift["class"].tolist() == [c for c, _ in ref]
    np.testing.assert_allclose(synthetic.shift["js_divergence"], [v for _, v in ref], rtol=1e-7)
    assert synthetic.shift["js_divergence"].notna().all()
    assert synthetic.shift["js_divergence"].is_monotonic_decreasing
    assert set(synthetic.shift["most_shifted_layer"]) <= set(synthetic.layers)


# --------------------------------------------------------------------------- pictures and report


def test_pngs_decode_to_nonzero_images(exported):
    exp, out = exported
    pngs = sorted((out / "plots").glob("*.png"))
    names = {p.name for p in pngs}
    assert {
        "global_attention.png",
        "class_layer_all.png",
        "class_layer_correct.png",
        "class_layer_incorrect.png",
        "class_layer_shift.png",
        "attention_shift.png",
        "samples_strip.png",
    } == names
    for p in pngs:
        with Image.open(p) as im:
            im.load()
            arr = np.asarray(im.convert("L"))
        assert arr.shape[0] > 200 and arr.shape[1] > 300, (p.name, arr.shape)
        assert arr.std() > 5, p.name  # not blank
        assert arr.shape[1] < 5000 and arr.shape[0] < 5000


def test_html_embeds_every_plot_and_is_self_contained(exported):
    from laya_cli.report.html import js_text

    exp, out = exported
    html = (out / "report.html").read_text(encoding="utf-8")
    pngs = sorted((out / "plots").glob("*.png"))
    for p in pngs:
        assert base64.b64encode(p.read_bytes()).decode("ascii") in html, p.name
    assert html.count('<img src="data:image/png;base64,') == len(pngs)
    assert "http://" not in html and "https://" not in html and "<link" not in html
    assert "<script src" not in html and "import(" not in html and "fetch(" not in html  # inline scripts only
    assert html.count("<script") == 2  # the explorer: its data (JSON) and its code; tested in a browser
    for word in ("mlp", "laya", "blocks.2", "Jensen", "accuracy"):
        assert word in html
    shift = exp.shift
    for r in shift.itertuples():  # the JS table is in the page
        if r.js_divergence == r.js_divergence:  # 4 decimals; 2 significant digits below 0.001, never 0.0000
            assert js_text(r.js_divergence) in html


def test_plots_read_for_12_layers_and_rgb_images(tmp_path):
    """Sizes scale for 10 classes × 12 layers; 3-channel uint8 thumbnails work."""
    rng = np.random.default_rng(0)
    L, C, n = 12, 10, 300
    layers, classes = [f"blocks.{i}" for i in range(L)], [f"class {i}" for i in range(C)]
    labels = torch.tensor(rng.integers(0, C, n))
    logits = torch.randn(n, C, generator=torch.Generator().manual_seed(0)) + 2 * torch.nn.functional.one_hot(labels, C)
    alpha = torch.tensor(rng.dirichlet(np.ones(L), n), dtype=torch.float32)
    images = torch.randint(0, 255, (n, 3, 32, 32), dtype=torch.uint8)
    exp = assemble(
        build_table(torch.arange(n), labels, logits, alpha, alpha, layers, classes),
        layers,
        classes,
        images,
        {"head": "laya", "backbone": "vit_base"},
    )
    write_export(exp, tmp_path / "out", strip=5)
    for name in ("class_layer_all.png", "samples_strip.png", "global_attention.png"):
        with Image.open(tmp_path / "out" / "plots" / name) as im:
            w, h = im.size
        assert 600 < w < 4000 and 300 < h < 2500, (name, w, h)


# --------------------------------------------------------------------------- formats and heads


def test_parquet_and_npz_hold_the_same_table(digits_ckpt, tmp_path, samples_csv):
    pytest.importorskip("pyarrow")
    run_export(digits_ckpt, tmp_path / "pq", on_cpu(format="parquet", plots=False), use_cache=False)
    run_export(digits_ckpt, tmp_path / "npz", on_cpu(format="npz", plots=False), use_cache=False)
    pq = pd.read_parquet(tmp_path / "pq" / "samples.parquet")
    assert list(pq.columns) == list(samples_csv.columns)
    pd.testing.assert_frame_equal(
        pq.astype({"label_name": str, "predicted_name": str}),
        samples_csv.astype({"label_name": str, "predicted_name": str}),
        check_exact=False,
        rtol=1e-12,
    )
    assert (tmp_path / "pq" / "report.html").is_file() and not (tmp_path / "pq" / "plots").exists()
    with np.load(tmp_path / "npz" / "samples.npz", allow_pickle=False) as z:
        assert z["alpha"].shape == (359, 3) and z["contrib"].shape == (359, 3)
        assert z["layers"].tolist() == LAYERS and z["classes"].tolist() == CLASSES
        np.testing.assert_allclose(z["alpha"], samples_csv[[f"alpha[{n}]" for n in LAYERS]].to_numpy(), rtol=1e-12)
        assert (z["correct"] == samples_csv["correct"].to_numpy()).all()
        assert z["label_name"].tolist() == samples_csv["label_name"].astype(str).tolist()


def test_head_without_alpha_exports_predictions_with_a_note(digits_ckpt, tmp_path):
    ckpt = swap_head(digits_ckpt, tmp_path / "last.pt", "last")
    result = invoke("export", ckpt, "--out", tmp_path / "out", "--samples", 50, "--strip", 3, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "note:" in result.output and "no layer attention" in " ".join(result.output.split())
    t = pd.read_csv(tmp_path / "out" / "samples.csv")
    assert list(t.columns) == BASE_COLUMNS and len(t) == 50
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == ["plots/samples_strip.png", "report.html", "samples.csv", "summary.json"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["has_alpha"] is False


def test_scalarmix_has_global_alpha_and_no_contrib(digits_ckpt, tmp_path):
    ckpt = swap_head(digits_ckpt, tmp_path / "sm.pt", "scalarmix")
    result = invoke("export", ckpt, "--out", tmp_path / "out", "--no-plots", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "contrib" in result.output and "global" in result.output
    t = pd.read_csv(tmp_path / "out" / "samples.csv")
    assert [c for c in t.columns if c.startswith("contrib")] == []
    alpha = t[[f"alpha[{n}]" for n in LAYERS]].to_numpy()
    np.testing.assert_allclose(alpha, np.broadcast_to(alpha[0], alpha.shape), atol=1e-6)
    shift = pd.read_csv(tmp_path / "out" / "attention_shift.csv")
    assert (shift["js_divergence"].dropna() < 1e-9).all()


def test_samples_and_seed_pick_a_reproducible_subset(digits_ckpt, tmp_path):
    from laya_cli.model.evaldata import select_samples

    a = run_export(
        digits_ckpt, tmp_path / "a", on_cpu(seed=3, plots=False), EvalDataSettings(samples=40), use_cache=False
    )
    assert a.table["index"].tolist() == select_samples(359, 40, 3).tolist()
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["model"]["samples"] == 40


# --------------------------------------------------------------------------- bad input, atomicity


def test_bad_input_is_one_line_exit_2_and_writes_nothing(digits_ckpt, tmp_path):
    out = tmp_path / "out"
    assert_user_error(
        invoke("export", digits_ckpt, "--out", out, "--format", "parqet"),
        "unknown --format 'parqet'",
        "did you mean parquet",
    )
    assert_user_error(invoke("export", tmp_path / "missing.pt", "--out", out), "checkpoint not found")
    assert_user_error(invoke("export", digits_ckpt, "--out", out, "--strip", -1), "--strip")
    assert_user_error(invoke("export", digits_ckpt, "--out", out, "--samples", 0), "--samples")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert_user_error(invoke("export", digits_ckpt, "--out", blocker), "not a folder")
    assert_user_error(invoke("export", digits_ckpt, "--out", blocker / "sub"), "cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_out_may_not_be_the_current_folder(digits_ckpt, tmp_path, monkeypatch):
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    assert_user_error(invoke("export", digits_ckpt, "--out", "."), "current folder")
    assert_user_error(invoke("export", digits_ckpt, "--out", ".."), "current folder")
    assert list(here.iterdir()) == []


def test_unwritable_out_dir(digits_ckpt, tmp_path):
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root ignores mode bits: use a read-only mount
        if not Path("/sys").is_dir():
            pytest.skip("running as root without /sys")
        assert_user_error(invoke("export", digits_ckpt, "--out", "/sys/laya-export-test"), "not writable")
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert_user_error(invoke("export", digits_ckpt, "--out", locked / "out"), "not writable")
    finally:
        locked.chmod(0o700)


def test_non_empty_out_needs_overwrite_and_only_replaces_exports(digits_ckpt, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    assert_user_error(invoke("export", digits_ckpt, "--out", foreign), "not empty", "--overwrite")
    assert_user_error(invoke("export", digits_ckpt, "--out", foreign, "--overwrite"), "not a laya export")
    assert (foreign / "thesis.tex").read_text() == "precious"

    out = tmp_path / "exp"
    out.mkdir()  # an existing empty folder is fine
    assert invoke("export", digits_ckpt, "--out", out, "--no-plots", "-q", "--samples", 30).exit_code == 0
    (out / "stale.txt").write_text("from an old run")
    assert_user_error(invoke("export", digits_ckpt, "--out", out, "--no-plots"), "not empty")
    r = invoke("export", digits_ckpt, "--out", out, "--no-plots", "-q", "--samples", 20, "--overwrite")
    assert r.exit_code == 0, r.output
    assert not (out / "stale.txt").exists() and len(pd.read_csv(out / "samples.csv")) == 20
    assert no_leftovers(tmp_path)


def test_failure_while_writing_leaves_nothing(digits_ckpt, tmp_path, monkeypatch):
    import laya_cli.report.figures

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(laya_cli.report.figures, "render_plots", boom)
    with pytest.raises(RuntimeError):
        run_export(digits_ckpt, tmp_path / "nested" / "out", data=EvalDataSettings(samples=10), use_cache=False)
    assert list(tmp_path.iterdir()) == []  # no out, no parents, no temp folder
    # an existing export survives a failed --overwrite untouched
    run_export(digits_ckpt, tmp_path / "out", on_cpu(plots=False), EvalDataSettings(samples=10), use_cache=False)
    before = (tmp_path / "out" / "samples.csv").read_bytes()
    with pytest.raises(RuntimeError):
        run_export(digits_ckpt, tmp_path / "out", data=EvalDataSettings(samples=25), overwrite=True, use_cache=False)
    assert (tmp_path / "out" / "samples.csv").read_bytes() == before
    assert no_leftovers(tmp_path)


def test_library_refuses_unknown_format_before_work(tmp_path):
    """The format is declared: the settings refuse it as they are built, before any file is read."""
    with pytest.raises(LayaError, match="unknown --format 'xlsx'"):
        run_export(tmp_path / "missing.pt", tmp_path / "o", on_cpu(format="xlsx"))


# --------------------------------------------------------------------------- the real command


def test_subprocess_export(digits_ckpt, tmp_path):
    out, env = tmp_path / "ci-artifact", {"LAYA_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_laya(
        "export", digits_ckpt, "--out", out, "--samples", 120, "--strip", 4, "--device", "cpu", env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Attention shift" in proc.stdout and "exported 120 samples" in proc.stdout
    assert (out / "report.html").is_file() and (out / "plots" / "samples_strip.png").is_file()
    assert len(pd.read_csv(out / "samples.csv")) == 120


def test_the_documented_pandas_snippet_gives_the_documented_types(exported, tmp_path, monkeypatch):
    """docs/export.md's "Loading the results" snippet, run as written on a digits export: class names
    ("0" … "9") stay text, as the column table says, instead of reading back as int64."""
    import re
    import shutil

    exp, out = exported
    doc = (Path(__file__).resolve().parents[1] / "docs" / "export.md").read_text(encoding="utf-8")
    snippet = re.search(r"## Loading the results\n\n```python\n(.*?)```", doc, re.S).group(1)
    shutil.copytree(out, tmp_path / "export")
    write_export(exp, tmp_path / "npz", fmt="npz", plots=False)  # the snippet also opens samples.npz
    shutil.copy(tmp_path / "npz" / "samples.npz", tmp_path / "export" / "samples.npz")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(snippet, "docs/export.md", "exec"), ns)
    t, prof, shift = ns["t"], ns["prof"], ns["shift"]
    assert all(type(v) is str for v in t["label_name"]) and all(type(v) is str for v in t["predicted_name"])
    assert set(t["label_name"]) <= set(CLASSES)
    assert (
        str(t["label"].dtype) == "int64" and str(t["correct"].dtype) == "bool" and str(t["p_pred"].dtype) == "float64"
    )
    assert all(type(v) is str for v in prof["class_name"]) and all(type(v) is str for v in shift["class_name"])
    assert list(ns["alpha"].columns) == LAYERS
    assert list(ns["heat"].index) == sorted(CLASSES)  # text, sorted as text
