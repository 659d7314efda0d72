"""The backbone mechanism of DESIGN §4, across families: run up to tap k (and no further),
raw activations and per-tap pooling, continue from tap k, truncated models; formats; globs."""

from __future__ import annotations

import functools

import pytest
import torch
from helpers import make_backbone
from torch import nn

from laya_cli import backbones as bb
from laya_cli.backbones.pooling import TapFormat
from laya_cli.runtime.errors import LayaError

# (backbone, input side): one per engine / layout, all small and random (no downloads)
CHAIN_FAMILIES = [
    ("mlp", 8),
    ("cnn", 16),
    ("timm:vit_tiny_patch16_224", 32),  # blocks, NLC+1
    ("timm:resnet18", 32),  # stages, NCHW, BatchNorm
    ("torchvision:resnet18", 32),  # torchvision feature-extraction (FX) engine
    pytest.param("timm:mixer_s16_224", 32, marks=pytest.mark.slow),  # blocks, NLC without prefix tokens
    pytest.param("timm:swin_tiny_patch4_window7_224", 64, marks=pytest.mark.slow),  # NHWC stages
    pytest.param("torchvision:vit_b_16", 32, marks=pytest.mark.slow),
    pytest.param("timm:efficientnet_b0", 32, marks=pytest.mark.slow),  # taps at blocks 0,1,2,4,6: steps in between
    pytest.param("torchvision:convnext_tiny", 32, marks=pytest.mark.slow),
]


@functools.cache
def backbone(name: str, side: int) -> bb.TappedBackbone:
    return make_backbone(name, side)


def images(b: bb.TappedBackbone, n: int = 3) -> torch.Tensor:
    return torch.rand(n, *b.example_shape, generator=torch.Generator().manual_seed(1))


def calls_of(module: nn.Module) -> tuple[list, list]:
    """Counts calls of the module and of everything inside it (leaf modules are what a traced
    graph calls); returns (calls, hook handles)."""
    seen: list = []
    handles = [m.register_forward_pre_hook(lambda m, a: seen.append(1)) for m in module.modules()]
    return seen, handles


def replacing_forward(b: bb.TappedBackbone, i: int, h_new: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """The reference: a full forward of the plain model with a hook that replaces tap i's output."""
    modules = dict(b.model.named_modules())
    got: dict = {}
    handles = [
        modules[n].register_forward_hook(lambda m, a, o, n=n: got.setdefault(n, o)) for n in b.layer_names[i + 1 :]
    ]
    handles.append(modules[b.layer_names[i]].register_forward_hook(lambda m, a, o: h_new))
    try:
        with torch.no_grad():
            b.model(b.adapter(x))
    finally:
        for h in handles:
            h.remove()
    return [got[n] for n in b.layer_names[i + 1 :]]


@pytest.mark.parametrize("name,side", CHAIN_FAMILIES)
def test_upto_returns_the_first_k_taps_and_runs_nothing_above(name, side):
    b = backbone(name, side)
    x = images(b)
    k = 2
    with torch.no_grad():
        full = b(x)
        b(x, upto=k)  # torchvision: traces its graph for upto=k once (tracing calls every module)
        above, handles = calls_of(dict(b.model.named_modules())[b.layer_names[k]])  # the module of tap k+1
        part = b(x, upto=k)
        for h in handles:
            h.remove()
    assert len(part) == k and not above, "the forward ran past the last needed tap"
    for a, c in zip(part, full[:k]):
        torch.testing.assert_close(a, c)
    raw = b.activations(x, upto=k)
    for i, h in enumerate(raw):
        torch.testing.assert_close(b.pool_tap(i, h), full[i])


@pytest.mark.parametrize("name,side", CHAIN_FAMILIES)
def test_continue_from_equals_a_full_forward_with_a_replacing_hook(name, side):
    b = backbone(name, side)
    assert b.can_continue
    x = images(b)
    with torch.no_grad():
        hs = b.activations(x)
        assert all(torch.equal(c, h) for c, h in zip(b.continue_from(0, hs[0]), hs[1:]))
        for i in (0, len(hs) // 2):
            patched = hs[i] + 0.5 * torch.randn(hs[i].shape, generator=torch.Generator().manual_seed(i))
            keep = patched.clone()
            got = b.continue_from(i, patched)
            assert torch.equal(patched, keep), "continue_from changed the caller's activation"
            want = replacing_forward(b, i, patched, x)
            assert len(got) == len(want) == len(hs) - i - 1
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=1e-6)
            # the backbone's own full pass with a replacing hook (the fallback of patched audits)
            full = b.patched_activations(x, i, patched)
            assert torch.equal(full[i], patched) and len(full) == len(hs)
            for f, w in zip(full[i + 1 :], want):
                torch.testing.assert_close(f, w, rtol=0, atol=1e-6)
        k = min(3, len(hs))
        assert len(b.continue_from(0, hs[0], upto=k)) == k - 1


@pytest.mark.parametrize("name,side", CHAIN_FAMILIES)
def test_truncated_stops_at_tap_k_and_holds_nothing_above(name, side):
    b = backbone(name, side)
    k = 2
    t = b.truncated(k)
    x = images(b)
    with torch.no_grad():
        for a, c in zip(t(x), b(x, upto=k)):
            torch.testing.assert_close(a, c)
    assert t.layer_names == b.layer_names[:k]
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(t.model) < n(b.model)
    above = dict(b.model.named_modules())[b.layer_names[k]]
    assert not any(p.numel() for p in above.parameters()) or all(
        not any(p is q for q in t.model.parameters()) for p in above.parameters()
    )
    kept = dict(t.model.named_modules())
    assert b.layer_names[k] not in kept or not any(True for _ in kept[b.layer_names[k]].parameters())


def test_truncation_uses_each_familys_own_pruning():
    mlp = backbone("mlp", 8).truncated(2)
    assert len(mlp.model.blocks) == 2  # built-ins: the later blocks are dropped
    vit = backbone("timm:vit_tiny_patch16_224", 32).truncated(3)
    assert len(vit.model.blocks) == 3  # timm: prune_intermediate_layers


class Skippy(nn.Module):
    """Tap 2 takes tap 1's output plus the input: not a chain."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = x.flatten(1)[:, :4]
        h = self.a(x)
        return self.c(self.b(h) + x)


def test_a_model_with_skip_connections_cannot_continue():
    b = bb.TappedBackbone(
        Skippy(), bb.InputConfig(1, None, (0.5,), (0.5,)), ["a", "b", "c"], "mean", example_shape=(1, 2, 2)
    )
    x = torch.rand(2, 1, 2, 2)
    assert len(b(x)) == 3 and b.tap_formats == ["NC"] * 3
    assert not b.can_continue
    with pytest.raises(LayaError, match="cannot continue"):
        b.continue_from(0, torch.zeros(2, 4))
    with pytest.raises(LayaError, match="upto"):
        b(x, upto=4)


def test_pooling_follows_the_declared_format_not_the_rank():
    h = torch.arange(2 * 3 * 5 * 7, dtype=torch.float).view(2, 3, 5, 7)
    torch.testing.assert_close(TapFormat("NCHW").pool(h), h.mean((2, 3)))  # width 3
    torch.testing.assert_close(TapFormat("NHWC").pool(h), h.mean((1, 2)))  # width 7
    tokens = torch.rand(2, 6, 4)
    fmt = TapFormat.parse("NLC+2")
    assert str(fmt) == "NLC+2" and fmt.prefix == 2
    torch.testing.assert_close(fmt.pool(tokens, "cls"), tokens[:, 0])
    torch.testing.assert_close(fmt.pool(tokens, "mean"), tokens[:, 2:].mean(1))  # prefix tokens left out
    with pytest.raises(LayaError, match="declared format is NCHW"):
        TapFormat("NCHW").pool(tokens, name="x")


def test_declared_layouts_per_family():
    deit = bb.build_backbone(
        bb.BackboneSpec("timm:deit_tiny_distilled_patch16_224", in_channels=3, image_size=(32, 32), input_size=32)
    )
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        r = deit(x)
        h = deit.activations(x, upto=1)[0]
    assert deit.pool == "cls" and deit.tap_formats[0] == "NLC+2"
    torch.testing.assert_close(r[0], h[:, 0])
    assert deit.spec.formats == ["NLC+2"] * 12  # recorded for the checkpoint once known


@pytest.mark.slow
def test_token_blocks_without_prefix_tokens_pool_by_mean():
    mixer = backbone("timm:mixer_s16_224", 32)
    mixer(images(mixer))
    assert mixer.pool == "mean" and set(mixer.tap_formats) == {"NLC"}


def test_state_fingerprint_of_batchnorm_models():
    """BatchNorm's 0-dim num_batches_tracked broke the fingerprint (every BN model failed)."""
    state = nn.BatchNorm2d(3).state_dict()
    assert state["num_batches_tracked"].ndim == 0
    fp = bb.state_fingerprint(state)
    state["num_batches_tracked"] += 1
    assert bb.state_fingerprint(state) != fp and len(bb.weights_sha256(state)) == 64


def test_torchvision_graph_node_names_are_taps_too():
    b = bb.build_backbone(
        bb.BackboneSpec("torchvision:resnet18", ["layer*.0.add"], in_channels=3, image_size=(32, 32), input_size=32)
    )
    assert b.layer_names == ["layer1.0.add", "layer2.0.add", "layer3.0.add", "layer4.0.add"]
    assert b.dims(torch.rand(1, 3, 32, 32)) == [64, 128, 256, 512]


def test_layer_globs_matching_nothing_is_a_user_error():
    with pytest.raises(LayaError, match="matched no module"):
        bb.build_backbone(bb.BackboneSpec("mlp", ["nothing.*"], in_channels=1, image_size=(8, 8)))


# --------------------------------------------------------------------------- timm stages from forward_intermediates


def test_timm_stages_that_hooks_cannot_read_come_from_forward_intermediates_and_stop_after_tap_k():
    """MViTv2 declares ``block.N``, a module it does not have: its taps are the declared stages, read where timm
    reads them, and ``upto=k`` runs no stage above tap k (timm's ``stop_early``)."""
    b = backbone("timm:mvitv2_tiny", 64)
    assert b.layer_names == [f"feature_info.{i}" for i in range(4)] and b.engine_kind == "intermediates"
    x = images(b)
    with torch.no_grad():
        full = b(x)
        above, handles = calls_of(b.model.stages[2])
        part = b(x, upto=2)
        for h in handles:
            h.remove()
        want = b.model.forward_intermediates(b.adapter(x), intermediates_only=True)
    assert len(part) == 2 and not above, "the forward ran past the last needed stage"
    assert [r.shape[-1] for r in full] == [f["num_chs"] for f in b.model.feature_info]
    for a, c, w in zip(part, full, want):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(c, w.mean((2, 3)))
    assert b.tap_formats == ["NCHW"] * 4


def test_timm_stages_truncate_with_timms_pruning_and_cannot_be_patched():
    b = backbone("timm:mvitv2_tiny", 64)
    t = b.truncated(2)
    x = images(b)
    with torch.no_grad():
        for a, c in zip(t(x), b(x, upto=2)):
            torch.testing.assert_close(a, c)
    assert len(t.model.stages) == 2 and t.layer_names == ["feature_info.0", "feature_info.1"]
    assert not b.can_continue
    with pytest.raises(LayaError, match="feature_info.0 is a timm stage read from forward_intermediates, not a module"):
        b.tap_modules()


def test_timm_stages_as_layers_and_class_tokens():
    """``--layers 'feature_info.*'`` reads any timm model's stages (the same r_i as its hooked modules); a model
    whose stages carry prefix tokens keeps them (NLC+P, class-token pooling); stages and modules do not mix."""

    def build(name, layers, taps="blocks"):  # the weights of backbone(name, 32): the same seed
        torch.manual_seed(0)
        spec = bb.BackboneSpec(name, layers, in_channels=3, image_size=(32, 32), input_size=32, taps=taps)
        return bb.build_backbone(spec)

    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    hooked = build("timm:resnet18", [], taps="stages").eval()  # the stage ends, by hooks on their modules
    staged = build("timm:resnet18", ["feature_info.*"]).eval()
    assert staged.engine_kind == "intermediates" and hooked.engine_kind == "hooks"
    assert staged.layer_names == [f"feature_info.{i}" for i in range(len(hooked.layer_names))]
    with torch.no_grad():
        for a, c in zip(staged(x), hooked(x)):
            torch.testing.assert_close(a, c)
    vit = build("timm:vit_tiny_patch16_224", ["feature_info.1*"]).eval()
    with torch.no_grad():
        r = vit(x)
        blocks = backbone("timm:vit_tiny_patch16_224", 32)(x)
    assert vit.layer_names == ["feature_info.1", "feature_info.10", "feature_info.11"]
    assert vit.tap_formats == ["NLC+1"] * 3 and vit.pool == "cls"
    for a, c in zip(r, [blocks[1], blocks[10], blocks[11]]):
        torch.testing.assert_close(a, c)
    with pytest.raises(LayaError, match="mix timm stages"):
        build("timm:resnet18", ["layer1", "feature_info.2"])


class _TableLayer(nn.Module):
    """A transformer-like layer taking a per-sample mask and a positions × positions table besides the hidden
    state (Inkling's relative distances)."""

    def __init__(self, width: int):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, h, mask=None, table=None):
        mixed = torch.einsum("st,btw->bsw", table, h) * mask  # table: positions × positions, mask: batch × 1 × 1
        return (self.proj(mixed) + h,)


class _TableModel(nn.Module):
    def __init__(self, width: int = 4, depth: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(_TableLayer(width) for _ in range(depth))

    def forward(self, x):
        mask = torch.arange(1, len(x) + 1, dtype=x.dtype).view(-1, 1, 1)
        table = torch.randn(x.shape[1], x.shape[1], generator=torch.Generator().manual_seed(0))
        for layer in self.layers:
            x = layer(x, mask=mask, table=table)[0]
        return x


def test_replay_after_selecting_as_many_rows_as_positions_repeats_only_per_sample_tensors():
    """IG refining 5 of 8 samples of 5 positions: a 5 × 5 table recorded beside the calls is not laid out by the
    batch and is not repeated with Captum's copies (it once was, and the layer failed on its shape)."""
    from laya_cli.backbones.engines import ReplayEngine

    torch.manual_seed(0)
    model, x = _TableModel().eval(), torch.randn(8, 5, 4)
    names = ["layers.0", "layers.1", "layers.2"]
    engine = ReplayEngine(model, names)
    with torch.no_grad():
        taps = engine.run(x, 3)
        rows = torch.tensor([0, 2, 3, 5, 7])
        undo = engine.select_rows(rows)
        copies = 3  # Captum's stacked copies of the selected rows
        got = engine.replay(0, taps[0][rows].repeat(copies, 1, 1), 3)
        undo()
    want = taps[2][rows].repeat(copies, 1, 1)
    assert torch.allclose(got[-1], want, atol=1e-5)


class _ConvPoolFc(nn.Module):
    """An own module as users write it: three convolutions, a pooling layer, a classifier (issue 71)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc(self.pool(x).flatten(1))


def test_attach_never_taps_the_classifier_or_a_parameter_free_copy_of_a_tap():
    import laya_cli

    torch.manual_seed(0)
    tapped = laya_cli.attach(_ConvPoolFc())
    assert tapped.layers == ["conv1", "conv2", "conv3"]  # not pool (conv3, mean-pooled) nor fc (the logits)


def test_an_activation_after_a_tapped_layer_takes_its_place():
    """A flat Linear, GELU, … Linear (logits): tapped after each GELU (the representation after the nonlinearity, as
    the paper's MLP), never at the Linear before it too, nor at the classifier; a dropout after it is a copy."""
    import laya_cli

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, kernel_size=56, stride=56), nn.Flatten(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 32),
        nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 10),
    )  # fmt: skip
    assert laya_cli.attach(net).layers == ["0", "3", "5", "8"]  # not the flatten, the dropout, nor the logits
