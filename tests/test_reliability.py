"""Feature cache integrity, non-finite features, folder images that fail to decode."""

import pytest
import torch
from helpers import invoke, make_image_folder
from torch import nn

from laya_cli.features.cache import FeatureCache, cached_extract
from laya_cli.features.extraction import LayerFeatures
from laya_cli.runtime.errors import LayaError


def toy_features(n=6):
    return LayerFeatures([torch.randn(n, 4), torch.randn(n, 3)], torch.arange(n))


def test_cache_round_trip(tmp_path):
    cache = FeatureCache(tmp_path)
    feats = toy_features()
    cache.save("k", feats)
    back = cache.load("k")
    assert all(torch.equal(a, b) for a, b in zip(back.feats, feats.feats))
    assert torch.equal(back.labels, feats.labels)


def test_corrupted_cache_entry_is_never_read_back(tmp_path):
    cache = FeatureCache(tmp_path)
    cache.save("k", toy_features())
    data = bytearray((tmp_path / "k.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the middle
    (tmp_path / "k.pt").write_bytes(bytes(data))
    assert cache.load("k") is None


def test_write_killed_before_the_checksum_is_never_read_back(tmp_path):
    cache = FeatureCache(tmp_path)
    cache.save("k", toy_features())
    (tmp_path / "k.sha256").unlink()  # the data landed, the checksum never did
    assert cache.load("k") is None
    (tmp_path / "k.pt").write_bytes((tmp_path / "k.pt").read_bytes()[:100])  # and a truncated leftover
    assert cache.load("k") is None


def test_corrupt_entry_is_recomputed_by_cached_extract(tmp_path):
    class Taps(nn.Module):
        layer_names = ["a", "b"]

        def forward(self, x):
            return [x.flatten(1), 2 * x.flatten(1)]

    images, labels = torch.rand(5, 1, 2, 2), torch.arange(5)
    cache = FeatureCache(tmp_path)
    first = cached_extract(Taps(), images, labels, "key", cache)
    (tmp_path / "key.pt").write_bytes(b"garbage")
    second = cached_extract(Taps(), images, labels, "key", cache)
    assert torch.equal(first.feats[1], second.feats[1])
    assert cache.load("key") is not None  # rewritten, valid again


def test_nan_features_name_the_layer():
    class Broken(nn.Module):
        layer_names = ["good", "bad.layer"]

        def forward(self, x):
            return [x.flatten(1), torch.full((len(x), 2), float("nan"))]

    with pytest.raises(LayaError, match="bad.layer produced NaN or Inf"):
        cached_extract(Broken(), torch.rand(3, 1, 2, 2), torch.arange(3), "k", None)


def test_folder_with_a_broken_image_skips_it_or_fails_with_strict(tmp_path):
    root = make_image_folder(tmp_path / "d", per_class=6)
    (root / "square" / "bad.jpg").write_bytes(b"\xff\xd8\xff broken jpeg")
    args = ["train", "--dataset", f"folder:{root}", "--backbone", "mlp", "--epochs", "1", "--image-size", "8"]
    ok = invoke(*[*args, "--out", str(tmp_path / "a.pt")])
    assert ok.exit_code == 0, ok.output
    assert "skipped 1 undecodable image" in ok.output
    strict = invoke(*[*args, "--strict", "--out", str(tmp_path / "b.pt")])
    assert strict.exit_code == 2 and "bad.jpg" in strict.output
    assert not (tmp_path / "b.pt").exists()
