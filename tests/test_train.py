import pytest
import torch
from helpers import make_image_folder, train_digits

from laya_cli import backbones as bb
from laya_cli.data.datasets import load_dataset
from laya_cli.data.settings import DataSettings
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.laya_model import load_model
from laya_cli.training.loop import predict


def test_every_head_learns_digits_well_above_chance(digits_ckpts):
    for kind, path in digits_ckpts.items():
        acc = read_checkpoint(path)["metrics"]["test_accuracy"]
        assert acc > 0.5, f"{kind} head reached only {acc:.3f} (chance is 0.1)"


def test_laya_on_digits_reaches_high_accuracy(digits_ckpt):
    m = read_checkpoint(digits_ckpt)["metrics"]
    assert m["test_accuracy"] >= 0.9
    assert 0.0 < m["test_macro_f1"] <= 1.0


def test_checkpoint_loads_with_weights_only_and_is_self_describing(digits_ckpt):
    ckpt = torch.load(digits_ckpt, weights_only=True)
    assert ckpt["format"] == "laya-checkpoint" and ckpt["format_version"] == 1
    assert ckpt["layers"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert ckpt["classes"] == [str(i) for i in range(10)]
    assert [r.shape[0] for r in ckpt["reference"]] == [512, 256, 128]
    assert {"torch", "timm", "laya"} <= set(ckpt["versions"])
    assert ckpt["backbone"]["weights"] is not None  # trained end to end: weights travel with it


def test_round_trip_gives_identical_predictions(digits_ckpt):
    model = load_model(digits_ckpt)
    data = load_dataset(DataSettings("digits", seed=0))
    feats = model.features(data.test.images)
    pred = predict(model.head, feats)
    acc = (pred == data.test.labels).float().mean().item()
    # the stored test accuracy was measured on the live model before saving
    assert abs(acc - read_checkpoint(digits_ckpt)["metrics"]["test_accuracy"]) < 1e-9
    again = load_model(digits_ckpt)
    torch.testing.assert_close(
        again.head(again.features(data.test.images)).logits, model.head(feats).logits, rtol=0, atol=0
    )


def test_reference_is_the_mean_training_feature(digits_ckpt):
    model = load_model(digits_ckpt)
    data = load_dataset(DataSettings("digits", seed=0))
    feats = model.features(data.train.images)
    for ref, f in zip(model.reference, feats):
        torch.testing.assert_close(ref, f.mean(0), atol=1e-5, rtol=1e-5)


def test_early_stopping_restores_the_best_epoch(tmp_path):
    ckpt = read_checkpoint(train_digits(tmp_path / "es.pt", epochs=30, patience=2))
    hist = ckpt["history"]
    best = max(hist, key=lambda r: r["val_accuracy"])
    assert ckpt["metrics"]["best_epoch"] == best["epoch"]
    assert len(hist) - best["epoch"] <= 2  # stopped after `patience` epochs without improvement


def test_frozen_timm_vit_trains_from_cached_features(tmp_path, monkeypatch, capsys):
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    folder = make_image_folder(tmp_path / "shapes", per_class=8)
    cache_root = tmp_path / "cache"
    monkeypatch.setenv("LAYA_CACHE_DIR", str(cache_root))
    messages = []
    monkeypatch.setattr("laya_cli.features.cache.log", messages.append)

    def run(out):
        req = TrainJobSettings(
            backbone="timm:vit_tiny_patch16_224",
            data=DataSettings(f"folder:{folder}", seed=0),
            train=TrainingSettings(epochs=2, seed=0),
            out=str(tmp_path / out),
            pretrained=False,
        )
        return train(req)

    first = run("a.pt")
    assert len(list(cache_root.glob("*.pt"))) == 3  # train, val, test
    assert not any("reusing" in m for m in messages)
    second = run("b.pt")
    assert sum("reusing" in m for m in messages) == 3
    assert first["layers"] == [f"blocks.{i}" for i in range(12)]
    assert first["backbone"]["spec"]["pool"] == "cls" and not first["backbone"]["spec"]["finetune"]
    for k, v in first["head"]["weights"].items():
        assert torch.equal(v, second["head"]["weights"][k])
    model = load_model(tmp_path / "b.pt")
    assert model.backbone.adapter.size == (224, 224)


def test_layer_globs_choose_taps_per_family():
    import timm
    import torchvision

    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0)
    assert bb.resolve_layers(vit, None) == [f"blocks.{i}" for i in range(12)]
    assert bb.resolve_layers(vit, ["blocks.1*"]) == ["blocks.1", "blocks.10", "blocks.11"]
    assert bb.resolve_layers(vit, ["blocks.0.*"]) == [
        "blocks.0.norm1",
        "blocks.0.attn",
        "blocks.0.ls1",
        "blocks.0.drop_path1",
        "blocks.0.norm2",
        "blocks.0.mlp",
        "blocks.0.ls2",
        "blocks.0.drop_path2",
    ]
    resnet = torchvision.models.resnet18()
    assert bb.resolve_layers(resnet, None, taps="stages") == ["layer1", "layer2", "layer3", "layer4"]
    assert bb.resolve_layers(resnet, None) == ["layer1.0", "layer1.1", "layer2.1", "layer3.1", "layer4.1"]


def test_torchvision_resnet_taps_pool_to_channel_vectors():
    spec = bb.BackboneSpec("torchvision:resnet18", in_channels=3, image_size=(32, 32), taps="stages")
    backbone = bb.build_backbone(spec)
    assert backbone.dims(torch.rand(2, 3, 32, 32)) == [64, 128, 256, 512]
    blocks = bb.build_backbone(bb.BackboneSpec("torchvision:resnet18", in_channels=3, image_size=(32, 32)))
    assert blocks.dims(torch.rand(2, 3, 32, 32)) == [64, 64, 128, 256, 512]


def test_user_weights_file_loads_into_its_architecture(tmp_path):
    import timm

    src = timm.create_model("resnet18", pretrained=False, num_classes=5)
    torch.save(src.state_dict(), tmp_path / "w.pt")
    state = bb.read_weights_file(tmp_path / "w.pt")
    backbone = bb.build_backbone(bb.BackboneSpec("timm:resnet18", in_channels=3), state)
    torch.testing.assert_close(backbone.model.conv1.weight, src.conv1.weight)


def test_pool_tokens():
    x = torch.arange(24.0).view(2, 3, 4)
    torch.testing.assert_close(bb.pool_tokens(x, "cls"), x[:, 0])
    torch.testing.assert_close(bb.pool_tokens(x, "mean"), x.mean(1))
    img = torch.rand(2, 5, 3, 3)
    torch.testing.assert_close(bb.pool_tokens(img, "cls"), img.mean((2, 3)))
    flat = torch.rand(2, 7)
    assert bb.pool_tokens(flat, "cls") is flat


def test_builtin_cnn_taps_every_stage_and_learns_digits(tmp_path):
    ckpt = read_checkpoint(train_digits(tmp_path / "cnn.pt", epochs=3, backbone="cnn"))
    assert ckpt["layers"] == ["stages.0", "stages.1", "stages.2", "stages.3"]
    assert ckpt["dims"] == [32, 64, 128, 256]
    assert ckpt["metrics"]["test_accuracy"] > 0.3


def test_vit_base_is_the_timm_alias():
    backbone = bb.build_backbone(bb.BackboneSpec("vit_base", in_channels=1, image_size=(8, 8)))
    assert type(backbone.model).__name__ == "VisionTransformer"
    assert backbone.layer_names == [f"blocks.{i}" for i in range(12)] and backbone.pool == "cls"
    assert backbone.dims(torch.rand(1, 1, 8, 8)) == [768] * 12  # 1-channel 8×8 input is adapted to 3×224×224


def test_image_folder_with_train_test_subfolders_uses_them(tmp_path):
    make_image_folder(tmp_path / "d" / "train", per_class=6)
    make_image_folder(tmp_path / "d" / "test", per_class=2, seed=1)
    data = load_dataset(DataSettings(f"folder:{tmp_path / 'd'}", image_size=16))
    assert len(data.test) == 6 and len(data.train) + len(data.val) == 18
    assert data.classes == ["circle", "cross", "square"] and data.image_shape == (3, 16, 16)


def test_undecodable_images_are_skipped_and_counted(tmp_path):
    root = make_image_folder(tmp_path / "d", per_class=6)
    (root / "circle" / "broken.png").write_bytes(b"not a png")
    data = load_dataset(DataSettings(f"folder:{root}", image_size=16))
    assert data.skipped == 1 and len(data.train) + len(data.val) + len(data.test) == 18
    import pytest

    from laya_cli.runtime.errors import LayaError

    with pytest.raises(LayaError, match="broken.png"):
        load_dataset(DataSettings(f"folder:{root}", image_size=16, strict=True))


def test_artworks_layout_labels_by_genre_or_artist(tmp_path):
    root = tmp_path / "art"
    images = root / "images" / "images"
    make_image_folder(images, classes=("Vincent_van_Gogh", "Claude_Monet", "Pablo_Picasso"), per_class=5)
    (root / "artists.csv").write_text(
        "id,name,years,genre,nationality\n"
        "0,Vincent van Gogh,1853-1890,Post-Impressionism,Dutch\n"
        "1,Claude Monet,1840-1926,Impressionism,French\n"
        '2,Pablo Picasso,1881-1973,"Cubism,Surrealism",Spanish\n'
    )
    by_genre = load_dataset(DataSettings("artworks", data_dir=str(root), image_size=16))
    assert by_genre.classes == ["Cubism", "Impressionism", "Post-Impressionism"]
    by_artist = load_dataset(DataSettings("artworks", data_dir=str(root), image_size=16, label="artist"))
    assert by_artist.classes == ["Claude_Monet", "Pablo_Picasso", "Vincent_van_Gogh"]


def test_fashion_mnist_idx_files_in_a_data_dir(tmp_path):
    import gzip

    import numpy as np

    def idx(path, arr):
        header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        with gzip.open(path, "wb") as f:
            f.write(header + arr.astype(np.uint8).tobytes())

    rng = np.random.default_rng(0)
    for split, n in (("train", 50), ("t10k", 20)):
        idx(tmp_path / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 255, (n, 28, 28)))
        idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    data = load_dataset(DataSettings("fashion-mnist", data_dir=str(tmp_path)))
    assert len(data.test) == 20 and len(data.train) + len(data.val) == 50
    assert data.test.labels.tolist() == [i % 10 for i in range(20)]


def test_hub_style_safetensors_file_loads_offline(tmp_path):
    """What `--pretrained` downloads (a hub model.safetensors) also loads from disk via --weights."""
    import timm
    from safetensors.torch import save_file

    src = timm.create_model("vit_tiny_patch16_224", pretrained=False)  # with its 1000-class head
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(tmp_path / "model.safetensors"))
    state = bb.read_weights_file(tmp_path / "model.safetensors")
    backbone = bb.build_backbone(bb.BackboneSpec("timm:vit_tiny_patch16_224", in_channels=3), state)
    torch.testing.assert_close(backbone.model.blocks[3].attn.qkv.weight, src.blocks[3].attn.qkv.weight)


def _flat(tree, prefix: str = "") -> dict:
    """Every leaf of a checkpoint by its dotted path (lists of tensors by index)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    if isinstance(tree, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in tree):
        return {f"{prefix}{i}": t for i, t in enumerate(tree)}
    return {prefix.rstrip("."): tree}


# Where the data and the command came from: what a DataLoader cannot know of itself, and the command line.
WHERE_FROM = {
    "dataset.name",
    "dataset.label",
    "dataset.source",
    "backbone.source",
    "digest.sha256",
    # Data pinning (data/pinning.py) names where a named dataset was read and what it held; loaders have no name
    # to re-read, so laya_cli.fit records none of it.
    "dataset.resolved",
    "dataset.data_dir_resolved",
    "dataset.fingerprint",
}  # the digest covers them


@pytest.mark.parametrize("finetune", [True, False], ids=["end-to-end", "frozen"])
def test_fit_on_digits_loaders_writes_the_checkpoint_laya_train_writes(finetune, tmp_path):
    """One training job behind the command and the API: the same seed, options and samples give identical
    tensors and the same record, key for key (where the data and the command came from aside)."""
    from helpers import invoke
    from torch.utils.data import DataLoader, TensorDataset

    import laya_cli

    seed, epochs = 5, 3
    flags = ["--finetune"] if finetune else ["--frozen"]
    cli = invoke(
        "train", "--dataset", "digits", "--epochs", epochs, "--seed", seed, *flags, "--out", tmp_path / "cli.pt"
    )
    assert cli.exit_code == 0, cli.output
    # The API, given what laya train builds: the digits splits (same split seed), the built-in MLP seeded as
    # laya train seeds it, and its input normalisation.
    data = load_dataset(DataSettings("digits", seed=seed))
    torch.manual_seed(seed)
    mlp = bb.build_backbone(bb.BackboneSpec("mlp", in_channels=1, image_size=(8, 8), finetune=finetune)).model
    loader = lambda split: DataLoader(TensorDataset(split.images, split.labels), batch_size=128)
    tapped = laya_cli.attach(mlp, mean=[0.5], std=[0.5])
    model = laya_cli.fit(
        tapped,
        loader(data.train),
        loader(data.val),
        frozen=not finetune,
        test_loader=loader(data.test),
        epochs=epochs,
        seed=seed,
        batch_size=128,
        device="cpu",
        progress=False,
    )
    model.save(tmp_path / "api.pt")
    ours, theirs = (
        {k: v for k, v in _flat(read_checkpoint(tmp_path / f"{n}.pt")).items() if k.split(".")[0] != "options"}
        for n in ("cli", "api")
    )
    assert set(ours) - WHERE_FROM == set(theirs) - WHERE_FROM
    differ = sorted(
        k
        for k in set(ours) - WHERE_FROM
        if not (torch.equal(ours[k], theirs[k]) if isinstance(ours[k], torch.Tensor) else ours[k] == theirs[k])
        and k != "history"  # compared below without the epochs' wall time
    )
    assert differ == []
    assert [{**r, "seconds": 0} for r in ours["history"]] == [{**r, "seconds": 0} for r in theirs["history"]]
    assert ours["metrics.test_accuracy"] == theirs["metrics.test_accuracy"] > 0.5
