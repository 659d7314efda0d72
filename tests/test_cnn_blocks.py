"""A CNN's residual blocks as taps (``--taps blocks``, backbones/blocks.py): which blocks are taps, and that
bypassing one is the network run without that block's residual branch — checked against forwards written here by
hand from the library's own modules (no hook, no ``Bypass``, no laya code between them)."""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from torch import nn

from laya_cli import backbones as bb
from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.auditing.registry import METHODS
from laya_cli.backbones.blocks import block_taps, residual_blocks


def randomised_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Batch norms with random running statistics and affine weights (fresh ones are the identity, which would let a
    wrong forward pass unnoticed); eval mode."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def tapped(name: str, model: nn.Module, side: int = 32) -> bb.TappedBackbone:
    spec = bb.BackboneSpec(name, in_channels=3, image_size=(side, side), input_size=side)
    return bb.tap_model(model, bb.InputConfig(3, (side, side), (0.0,), (1.0,)), spec, example_shape=(3, side, side))


def images(n: int = 4, side: int = 32) -> torch.Tensor:
    return torch.rand(n, 3, side, side, generator=torch.Generator().manual_seed(1))


# --------------------------------------------------------------------------- forwards written by hand


def basic_block(block, x: torch.Tensor, branch: bool = True) -> torch.Tensor:
    """torchvision's and timm's ResNet basic block: relu(F(x) + shortcut(x)); ``branch`` False: relu(shortcut(x))."""
    shortcut = x if block.downsample is None else block.downsample(x)
    if not branch:
        return torch.relu(shortcut)
    out = torch.relu(block.bn1(block.conv1(x)))
    out = block.bn2(block.conv2(out))
    return torch.relu(out + shortcut)


def torchvision_resnet_by_hand(model, x: torch.Tensor, without: str | None):
    """torchvision ResNet-18's forward, block by block by hand; ``without``: that block's residual branch left
    out. (the output of every block, the logits)."""
    x = model.maxpool(torch.relu(model.bn1(model.conv1(x))))
    outs = {}
    for stage in ("layer1", "layer2", "layer3", "layer4"):
        for i, block in enumerate(getattr(model, stage)):
            name = f"{stage}.{i}"
            x = outs[name] = basic_block(block, x, branch=name != without)
    return outs, model.fc(torch.flatten(model.avgpool(x), 1))


def timm_efficientnet_by_hand(model, x: torch.Tensor, without: str | None):
    """timm EfficientNet's forward with each block called whole, ``without``'s inverted residual x + F(x) written as
    x (its branch left out). (the output of every block, the pooled features the model returns)."""
    x = model.bn1(model.conv_stem(x))
    outs = {}
    for s, stage in enumerate(model.blocks):
        for i, block in enumerate(stage):
            name = f"blocks.{s}.{i}"
            x = outs[name] = x if name == without else block(x)
    x = model.bn2(model.conv_head(x))
    return outs, model.global_pool(x)


# --------------------------------------------------------------------------- the taps


def test_block_taps_are_the_blocks_with_an_identity_skip():
    resnet = torchvision.models.resnet18()
    assert residual_blocks(resnet) == ["layer1.0", "layer1.1", "layer2.1", "layer3.1", "layer4.1"]
    assert residual_blocks(timm.create_model("resnet50", num_classes=0))[:3] == ["layer1.1", "layer1.2", "layer2.1"]
    effnet = timm.create_model("efficientnet_b0", num_classes=0)
    assert all(effnet.get_submodule(n).has_skip for n in residual_blocks(effnet))
    assert "blocks.0.0" not in residual_blocks(effnet)  # 32 -> 16 channels: no skip
    assert block_taps(torchvision.models.vgg11()) is None  # no residual block: the stages stand
    assert block_taps(bb.SmallCNN(3)) is None


def test_taps_option_chooses_blocks_or_stages():
    blocks = bb.resolve_layers(torchvision.models.resnet18(), None)
    stages = bb.resolve_layers(torchvision.models.resnet18(), None, taps="stages")
    assert blocks == ["layer1.0", "layer1.1", "layer2.1", "layer3.1", "layer4.1"]
    assert stages == ["layer1", "layer2", "layer3", "layer4"]
    vit = timm.create_model("vit_tiny_patch16_224", num_classes=0)
    assert bb.resolve_layers(vit, None) == bb.resolve_layers(vit, None, taps="stages")  # isotropic: its blocks
    spec = bb.BackboneSpec("timm:resnet18", taps="stages")
    assert bb.BackboneSpec.from_dict(spec.to_dict()).taps == "stages"
    assert "taps" not in bb.BackboneSpec("timm:resnet18").to_dict()  # checkpoints of the default keep their layout


def test_the_api_attaches_blocks_or_stages_as_laya_train_does():
    import laya_cli

    assert laya_cli.attach(torchvision.models.resnet18()).layers == [
        "layer1.0",
        "layer1.1",
        "layer2.1",
        "layer3.1",
        "layer4.1",
    ]
    assert laya_cli.attach(torchvision.models.resnet18(), taps="stages").layers == [
        "layer1",
        "layer2",
        "layer3",
        "layer4",
    ]
    with pytest.raises(laya_cli.LayaError, match="--taps"):
        laya_cli.attach(torchvision.models.resnet18(), taps="block")


# --------------------------------------------------------------------------- bypassed = run without the branch


@pytest.fixture(scope="module")
def resnet():
    model = randomised_norms(torchvision.models.resnet18(num_classes=7))
    return model, tapped("torchvision:resnet18", model)


@pytest.fixture(scope="module")
def effnet():
    model = randomised_norms(timm.create_model("efficientnet_b0", num_classes=0))
    return model, tapped("timm:efficientnet_b0", model)


@pytest.mark.parametrize("k", [0, 2, 4])
def test_bypassed_resnet_block_is_the_network_without_its_residual_branch(resnet, k):
    model, b = resnet
    x = images()
    name = b.layer_names[k]
    want_taps, want_logits = torchvision_resnet_by_hand(model, x, without=name)
    _, intact_logits = torchvision_resnet_by_hand(model, x, without=None)
    assert not torch.allclose(want_logits, intact_logits, atol=1e-3), "the block must matter for the test to test"
    with torch.no_grad():
        got = b.bypassed_activations(x, [k])  # hooks: tap k's output := its input, the rest run on
        dropped = b.dropped([k])  # the block replaced by a Bypass module
        got_logits = dropped.whole_model(x)
        net = NetworkScope(b, nn.Identity(), ablation="bypass")  # the audit's and the network target's removal
        removed = net.removed_taps(x, net.activations(x))[k]
    for j, tap in enumerate(b.layer_names):
        torch.testing.assert_close(got[j], want_taps[tap], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    pooled = [want_taps[t].mean((2, 3)) for t in b.layer_names[k:]]
    for r, w in zip(removed, pooled):
        torch.testing.assert_close(r, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k", [0, 8])
def test_bypassed_inverted_residual_is_the_network_without_its_branch(effnet, k):
    model, b = effnet
    x = images()
    name = b.layer_names[k]
    want_taps, want_out = timm_efficientnet_by_hand(model, x, without=name)
    _, intact = timm_efficientnet_by_hand(model, x, without=None)
    assert not torch.allclose(want_out, intact, atol=1e-4), "the block must matter for the test to test"
    with torch.no_grad():
        got = b.bypassed_activations(x, [k])
        got_out = b.dropped([k]).whole_model(x)
    for j, tap in enumerate(b.layer_names):
        torch.testing.assert_close(got[j], want_taps[tap], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_out, want_out, rtol=1e-4, atol=1e-5)


def test_gradient_methods_share_one_backward_pass_and_give_what_each_gave_alone(resnet):
    """Grad×Act, AtP and saliency at network scope from one Captum pass of layer gradients (the audit's route since
    issue 65) equal each method's own Captum call."""
    _, b = resnet
    dims = [r.shape[-1] for r in b(images(2))]
    weight = torch.randn(sum(dims), 7, generator=torch.Generator().manual_seed(0))

    class Head(nn.Module):
        def forward(self, feats):
            return type("Out", (), {"logits": torch.cat(list(feats), -1) @ weight})()

    head = Head()
    net = NetworkScope(b, head, ablation="bypass")
    x = images()
    hs = net.activations(x)
    target = head(net.pooled(hs)).logits.argmax(-1)
    grads = net.layer_gradients(x, target, multiply=False)
    shared = {m: net.from_gradients(METHODS[m].from_gradients, hs, grads) for m in ("gradxact", "atp", "saliency")}
    torch.testing.assert_close(shared["gradxact"], net.gradient_x_activation(x, target))
    torch.testing.assert_close(shared["atp"], net.attribution_patching(x, hs, target))
    torch.testing.assert_close(shared["saliency"], net.saliency(x, target))
