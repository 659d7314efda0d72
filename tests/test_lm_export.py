"""``laya export`` on a ``--task lm`` checkpoint: α per held-out token against the head run again by hand, token
texts against the tokenizer, bad input in one line, --overwrite, and report.html's text explorer in a real browser
(tooltip numbers against tokens.parquet, markup in the text shown literally, the tokens' colours on screen)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from benchmarks import browser as lb
from laya_cli.data.corpus import open_corpus
from laya_cli.features.lm_positions import batches
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import lm_from_checkpoint
from laya_cli.report.lm_explorer import layer_colours, tint
from laya_cli.training.lm import train_lm
from tests.helpers import assert_user_error, invoke, lm_request, make_lm_folder, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
BLOCK, SAMPLES = 24, 150  # 6 whole blocks of 23 positions, then 12 of the 7th
SHOT = Path("/work/lmexport-shot.png")


def texts(n: int) -> list[str]:
    """Sentences, every third with markup in it: a token such as "<b" or "</b>" must be shown as text."""
    out = sentences(n)
    return [f"{s[:-1]} <b>x</b> or <script>y</script>." if i % 3 == 0 else s for i, s in enumerate(out)]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lmx"), texts(300), 240)


@pytest.fixture(scope="module")
def trained(lm_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lmxckpt") / "lm.pt"
    # objective ce: α then varies from token to token (kl: the last layer dominates every token of this tiny model)
    train_lm(lm_request(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", out, block_size=BLOCK, batch_size=8,
                       epochs=1, lr=3e-3, eval_tokens=300, objective="ce"))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lmxout") / "export"
    r = invoke("export", trained, "--out", out, "--samples", SAMPLES)
    assert r.exit_code == 0, r.output
    assert f"exported {SAMPLES} tokens" in r.output
    return out


def alpha_of(table: pd.DataFrame, layers) -> np.ndarray:
    return table[[f"alpha[{n}]" for n in layers]].to_numpy()


@torch.no_grad()
def by_hand(path: Path, lm_dir: Path) -> dict:
    """The same positions through the model and the LAYA head, one block at a time, without the export's code."""
    model = lm_from_checkpoint(read_checkpoint(path))
    rows = {k: [] for k in ("block", "position", "token", "next", "alpha", "pred", "p_pred", "p_next")}
    blocks = batches(model.lm, open_corpus(str(lm_dir / "corpus")), "test", BLOCK, 1)
    for b, x in zip(range(SAMPLES // (BLOCK - 1) + 1), blocks):
        hs = torch.stack([h[0, :-1].float() for h in model.lm.backbone.activations(x)], dim=1)  # T-1, L, d
        out = model.laya(hs)
        p = torch.softmax(out.logits.double(), -1)
        nxt = x[0, 0, 1:].long()
        rows["block"] += [b] * (BLOCK - 1)
        rows["position"] += list(range(BLOCK - 1))
        rows["token"] += x[0, 0, :-1].tolist()
        rows["next"] += nxt.tolist()
        rows["alpha"].append(out.alpha.double())
        rows["pred"] += p.argmax(-1).tolist()
        rows["p_pred"] += p.max(-1).values.tolist()
        rows["p_next"] += p[torch.arange(len(nxt)), nxt].tolist()
    rows["alpha"] = torch.cat(rows["alpha"]).numpy()
    return {k: np.asarray(v)[:SAMPLES] for k, v in rows.items()} | {"model": model}


def decoded(tok, i: int) -> str | re.Pattern:
    """A token decoded alone; a byte-level piece of a character (decoded: U+FFFD) as its bytes, escaped: one
    "\\xNN" per character of the token (the bytes themselves: test_byte_level_pieces_of_a_character…)."""
    text = tok.decode([i], skip_special_tokens=False)
    return text if "\ufffd" not in text else re.compile(r"(\\x[0-9a-f]{2})" f"{{{len(tok.id_to_token(i))}}}")


def same(got: list[str], want: list) -> bool:
    return len(got) == len(want) and all(g == w if isinstance(w, str) else w.fullmatch(g) for g, w in zip(got, want))


def test_byte_level_pieces_of_a_character_read_as_their_bytes(trained):
    from laya_cli.exporting.lm import TokenTexts

    model = lm_from_checkpoint(read_checkpoint(trained))
    texts = TokenTexts(model.lm.backbone.adapter.text.tokenizer)
    tok = texts.tokenizer
    e_acute = [tok.token_to_id(c) for c in ("Ã", "©")]  # "é" is bytes c3 a9: two tokens of the byte alphabet
    assert [tok.decode([i]) for i in e_acute] == ["\ufffd", "\ufffd"]
    assert texts(e_acute).tolist() == ["\\xc3", "\\xa9"] and texts([tok.token_to_id("Ġ")]).tolist() == [" "]


def test_alpha_per_token_is_the_heads_alpha_and_texts_are_the_tokenizers(exported, trained, lm_dir):
    from tokenizers import Tokenizer

    t = pd.read_parquet(exported / "tokens.parquet")
    want = by_hand(trained, lm_dir)
    layers = list(want["model"].ckpt["layers"])
    alpha = alpha_of(t, layers)
    assert len(t) == SAMPLES and t["block"].nunique() == 7
    for col, key in (("block", "block"), ("position", "position"), ("token", "token"), ("next_token", "next"),
                     ("predicted", "pred")):  # fmt: skip
        np.testing.assert_array_equal(t[col].to_numpy(), want[key], err_msg=col)
    np.testing.assert_allclose(alpha, want["alpha"], atol=1e-6)
    np.testing.assert_allclose(t["p_predicted"], want["p_pred"], atol=1e-6)
    np.testing.assert_allclose(t["p_next"], want["p_next"], atol=1e-6)
    np.testing.assert_allclose(alpha.sum(1), 1, atol=1e-6)
    np.testing.assert_array_equal(t["dominant_layer"], alpha.argmax(1) + 1)
    assert len(set(t["dominant_layer"])) > 1  # the colours of the explorer have something to show
    tok = Tokenizer.from_str(want["model"].lm.backbone.adapter.text.tokenizer)
    for col, ids in (("token_text", "token"), ("next_text", "next_token"), ("predicted_text", "predicted")):
        assert same(t[col].tolist(), [decoded(tok, i) for i in t[ids]]), col
    first = t[t["block"] == 0]
    running = "".join(first["token_text"]) + first["next_text"].iloc[-1]  # byte-level BPE: texts concatenate
    assert running == tok.decode(list(first["token"]) + [int(first["next_token"].iloc[-1])], skip_special_tokens=False)
    assert any("<" in s for s in t["token_text"])
    summary = json.loads((exported / "summary.json").read_text())
    assert summary["format"] == "laya-export" and summary["task"] == "lm" and summary["n_tokens"] == SAMPLES
    assert list(summary["mean_alpha"].values()) == pytest.approx(alpha.mean(0).tolist(), abs=1e-9)
    assert sorted(summary["files"]) == sorted(
        ["tokens.parquet", "plots/alpha_heatmap.png", "summary.json", "report.html"]
    )
    assert (exported / "plots" / "alpha_heatmap.png").read_bytes()[:4] == b"\x89PNG"


def test_csv_no_plots_and_overwrite(exported, trained, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(exported, out)
    before = sorted(p.name for p in out.rglob("*"))
    assert_user_error(invoke("export", trained, "--out", out, "--samples", 30, "--format", "csv"), "--overwrite")
    assert sorted(p.name for p in out.rglob("*")) == before
    r = invoke("export", trained, "--out", out, "--samples", 30, "--format", "csv", "--no-plots", "--overwrite", "-q")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "summary.json", "tokens.csv"]
    csv, parquet = pd.read_csv(out / "tokens.csv", keep_default_na=False), pd.read_parquet(exported / "tokens.parquet")
    assert list(csv.columns) == list(parquet.columns) and len(csv) == 30
    np.testing.assert_allclose(csv.filter(like="alpha[").to_numpy(), parquet.filter(like="alpha[").to_numpy()[:30])
    assert csv["token_text"].tolist() == parquet["token_text"].tolist()[:30]
    assert "plots were skipped" in (out / "report.html").read_text()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert_user_error(invoke("export", trained, "--out", foreign, "--overwrite"), "not a laya export")
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--format", "npz"], "csv or parquet"),
        (["--dataset", "mnist"], "text:PATH"),
        (["--dataset", "text:/no/such/corpus"], "no such file"),
        (["--model-card"], "--model-card only applies to classifiers"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(trained, tmp_path, args, fragment):
    out = tmp_path / "x" / "export"
    assert_user_error(invoke("export", trained, "--out", out, "--samples", 30, *args), fragment)
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


# --------------------------------------------------------------------------- report.html in a real browser

REASON = lb.unavailable_reason()


def mode_colour(shot: np.ndarray, box: dict) -> tuple[int, ...]:
    """The most common colour inside a box of a screenshot (a token's background, not its glyphs)."""
    x0, y0 = int(box["x"]) + 1, int(box["y"]) + 1
    x1, y1 = int(box["x"] + box["width"]) - 1, int(box["y"] + box["height"]) - 4  # above the 3 px underline
    pixels = shot[y0:y1, x0:x1, :3].reshape(-1, 3)
    values, counts = np.unique(pixels, axis=0, return_counts=True)
    return tuple(int(v) for v in values[counts.argmax()])


def rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(colour[k : k + 2], 16) for k in (1, 3, 5))


@pytest.mark.skipif(REASON is not None, reason=f"no browser to test report.html in: {REASON}")
def test_text_explorer_in_a_browser(exported, tmp_path):
    from PIL import Image

    t = pd.read_parquet(exported / "tokens.parquet")
    layers = json.loads((exported / "summary.json").read_text())["model"]["layers"]
    alpha = alpha_of(t, layers)
    with lb.chromium() as browser:
        page, watch = lb.open_report(browser, exported / "report.html")
        page.wait_for_selector("body[data-tokens=ready]", timeout=30_000)
        spans = page.locator("#t-text .t-tok")
        assert spans.count() == len(t)
        faults = lb.label_faults(page, ".t-legend .t-key")  # the tiny GPT-2's layer labels: none cut or overlapping
        assert faults["count"] == 2 * len(layers) and faults["clipped"] == [] and faults["overlapping"] == [], faults
        assert page.eval_on_selector_all("#t-text .t-tok", "s => s.map(e => e.textContent)") == [
            s.replace("\n", "\u21b5\n") if s else "\u2205" for s in t["token_text"]
        ]
        assert page.locator("#t-text b, #t-text script").count() == 0  # markup in the text stays text
        assert "<b>x</b>" in page.inner_text("#t-text") and "<script>y</script>" in page.inner_text("#t-text")
        k = int(np.flatnonzero(t["token_text"].str.contains("<").to_numpy())[0])
        for how, i in (("hover", 5), ("focus", k)):
            getattr(spans.nth(i), how)()
            check_tooltip(page, t.iloc[i], alpha[i], layers)
        page.keyboard.press("Escape")
        assert page.locator("#t-tip").is_hidden()
        spans.nth(9).hover()
        page.locator("#explorer").scroll_into_view_if_needed()
        spans.nth(9).hover()
        page.screenshot(path=tmp_path / "shot.png")
        boxes = [spans.nth(i).bounding_box() for i in range(12)]
        assert not watch.console_errors and not watch.page_errors and not watch.external_requests, watch
    shutil.copy(tmp_path / "shot.png", SHOT)
    shot = np.asarray(Image.open(tmp_path / "shot.png").convert("RGB"))
    colours = layer_colours(len(layers))
    for i, box in enumerate(boxes):
        want = rgb(tint(colours[int(t["dominant_layer"].iloc[i]) - 1]))
        got = mode_colour(shot, box)
        if i == 9:  # the hovered token: its colour darkened
            assert all(g < w for g, w in zip(got, want) if w > 0), (got, want)
        else:
            assert max(abs(a - b) for a, b in zip(got, want)) <= 2, (i, got, want)
    assert len({mode_colour(shot, box) for box in boxes}) > 1


def check_tooltip(page, row, alpha: np.ndarray, layers) -> None:
    tip = page.locator("#t-tip")
    assert tip.is_visible()
    bars = page.eval_on_selector_all(
        "#t-tip tr.t-bar-row",
        "rs => rs.map(r => [r.cells[0].textContent, r.querySelector('.t-bar').style.width, r.cells[2].textContent])",
    )
    assert [b[0] for b in bars] == list(layers)
    assert [float(b[2]) for b in bars] == pytest.approx(alpha.tolist(), abs=5e-4)
    assert [int(b[1].removesuffix("px")) for b in bars] == [max(1, round(a * 120)) for a in alpha]
    text, q = tip.inner_text(), lambda s: "\u201c" + s.replace("\n", "\u21b5") + "\u201d"
    assert f"next: {q(row['next_text'])}  p {row['p_next']:.3f}" in text
    assert f"predicted: {q(row['predicted_text'])}  p {row['p_predicted']:.3f}" in text
    assert f"block {row['block']}, position {row['position']}" in text
