"""benchmarks/causal_lm.py's building blocks at toy size: WordNet glosses → BPE → GPT-2 → held-out CE → reload.

The 12-minute fixture itself is made by hand (docs/lm.md); this checks, in seconds, that its pieces fit: the
split is stable and disjoint, a few seconds of training beat the uniform guess, and the saved folder reloads
through ``Auto*`` with the very same logits (what ``--task lm`` will rely on)."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from benchmarks import causal_lm  # noqa: E402

ROOT = causal_lm.wordnet_root()
needs_wordnet = pytest.mark.skipif(ROOT is None, reason="WordNet's data files: apt-get install wordnet-base")


@pytest.fixture(scope="module")
def toy():
    """A few hundred glosses, a 300-token BPE and their token streams."""
    glosses = causal_lm.gather_glosses(ROOT)[:800]
    train, test = causal_lm.split_glosses(glosses)
    tokenizer = causal_lm.train_tokenizer(train, 300)
    return {
        "train": train,
        "test": test,
        "tokenizer": tokenizer,
        "train_ids": causal_lm.token_stream(tokenizer, train),
        "test_ids": causal_lm.token_stream(tokenizer, test),
    }


@needs_wordnet
def test_the_split_is_a_stable_disjoint_tenth(toy):
    assert set(toy["train"]).isdisjoint(toy["test"])
    assert 0.04 < len(toy["test"]) / (len(toy["train"]) + len(toy["test"])) < 0.2
    # A hash of the text, not a shuffle: the same gloss lands on the same side whatever comes before it.
    assert causal_lm.split_glosses(list(reversed(toy["test"])))[1] == list(reversed(toy["test"]))
    assert all("\n" not in g for g in toy["train"] + toy["test"])


@needs_wordnet
def test_a_few_seconds_of_training_beat_uniform_and_the_reload_is_exact(toy, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; toy sizes gain nothing from more
    try:
        tokenizer = toy["tokenizer"]
        model = causal_lm.build_model(tokenizer, layers=2, width=32, heads=2, block=32, seed=0)
        trained = causal_lm.train_model(model, toy["train_ids"], 32, 8, seconds=3.0, peak_lr=1e-2, seed=0)
        bits = causal_lm.heldout_bits(model, toy["test_ids"], 32)
        causal_lm.save_atomic(model, tokenizer, tmp_path / "model")
        diff = causal_lm.reload_difference(tmp_path / "model", model, toy["test"][:4])
    finally:
        torch.set_num_threads(threads)
    assert trained["steps"] > 0 and trained["tokens_seen"] == trained["steps"] * 8 * 32
    assert math.isfinite(bits) and bits < math.log2(len(tokenizer))
    assert diff == 0.0
    assert not list(tmp_path.glob("model.*")), "the temporary folder was renamed into place"
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o044, "readable by others, as a fixture is"


@needs_wordnet
def test_the_unigram_baseline_is_below_uniform(toy):
    bits = causal_lm.unigram_bits(toy["train_ids"], toy["test_ids"], len(toy["tokenizer"]))
    assert 0 < bits < math.log2(len(toy["tokenizer"]))


def test_the_corpus_files_hold_one_gloss_a_line(tmp_path):
    causal_lm.write_corpus(tmp_path, ["a b", "c"], ["d e f"])
    assert (tmp_path / "corpus" / "train.txt").read_text() == "a b\nc\n"
    assert (tmp_path / "corpus" / "test.txt").read_text() == "d e f\n"
    causal_lm.write_atomic(tmp_path / "r.json", json.dumps({"x": 1}))
    assert not list(tmp_path.glob("*.tmp"))


def test_without_wordnet_the_benchmark_is_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(causal_lm, "wordnet_root", lambda: None)
    assert causal_lm.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "apt-get install wordnet-base" in out[0]
