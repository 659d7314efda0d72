"""Every Hugging Face family of the zoo sweep (benchmarks/hf_zoo.py), built from a small config offline: one
tap per layer at the hidden size, the pool its kind implies, and prefix caching for the network scope."""

from __future__ import annotations

import pytest

from benchmarks.zoo.hf import HF_ZOO, check

pytest.importorskip("transformers")


@pytest.mark.parametrize("entry", HF_ZOO, ids=[e.name for e in HF_ZOO])
def test_every_hf_family_taps_every_layer(entry, tmp_path):
    result = check(entry, tmp_path)
    assert result.ok, result.error
    assert result.prefix_cached and len(result.taps) == 2


def test_the_sweep_spans_the_families_the_issue_names():
    names = {e.name for e in HF_ZOO}
    assert {"bert", "roberta", "distilbert", "deberta-v2", "electra", "gpt2", "gpt-neox", "llama", "mistral"} <= names
    assert {"qwen2", "phi", "vit", "deit", "dinov2", "swin", "convnext", "clip-vision"} <= names
