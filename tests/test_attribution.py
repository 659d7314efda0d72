"""Attribution methods against references: Captum called directly, IG completeness, contrib by hand."""

from functools import partial

import pytest
import torch
from captum.attr import InputXGradient, IntegratedGradients, Saliency
from helpers import make_attribution_inputs

from laya_cli.auditing.methods import (
    AttributionContext,
    attribution_patching,
    contrib,
    global_weights,
    gradient_x_activation,
    integrated_gradients,
    mean_attention,
    random_scores,
    reduce_layers,
    saliency,
)
from laya_cli.auditing.registry import METHODS, unavailable_reason
from laya_cli.runtime.errors import LayaError

DIMS = [12, 8, 6, 10]
C = 5


make = partial(make_attribution_inputs, batch=7, dims=DIMS, num_classes=C)  # (head, feats, ref, target)


def captum_forward(head):
    """The plain forward a user would hand Captum: (r_1..r_L) -> softmax probabilities."""
    return lambda *r: torch.softmax(head(list(r)).logits, -1)


def leaves(feats):
    return tuple(f.clone().requires_grad_(True) for f in feats)


def test_ig_equals_a_direct_captum_call():
    head, feats, ref, target = make()
    ours = integrated_gradients(head, feats, target, ref, n_steps=16)
    attrs = IntegratedGradients(captum_forward(head)).attribute(
        leaves(feats),
        baselines=tuple(r.unsqueeze(0).expand_as(f) for r, f in zip(ref, feats)),
        target=target,
        n_steps=16,
    )
    expected = torch.stack([a.sum(-1) for a in attrs], 1)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-7)


def test_ig_internal_batch_size_changes_memory_not_results():
    head, feats, ref, target = make(batch=9)
    full = integrated_gradients(head, feats, target, ref, n_steps=8)
    for size in (5, 20):  # fewer rows than samples (we split), more (Captum splits the steps)
        chunked = integrated_gradients(head, feats, target, ref, n_steps=8, internal_batch_size=size)
        torch.testing.assert_close(full, chunked, rtol=1e-5, atol=1e-7)


def test_ig_completeness_within_captums_convergence_delta():
    head, feats, ref, target = make(batch=11)
    scores, delta = integrated_gradients(head, feats, target, ref, n_steps=64, return_delta=True)
    with torch.no_grad():
        p = lambda fs: torch.softmax(head(fs).logits, -1).gather(1, target[:, None]).squeeze(1)
        gap = p(feats) - p([r.expand_as(f) for r, f in zip(ref, feats)])
    err = (scores.sum(1) - gap).abs()
    assert (err <= delta.abs() + 1e-6).all()
    assert delta.abs().max() < 1e-3  # and Captum's delta itself is small at 64 steps


def test_gradxact_equals_a_direct_captum_call():
    head, feats, _, target = make()
    ours = gradient_x_activation(head, feats, target)
    attrs = InputXGradient(captum_forward(head)).attribute(leaves(feats), target=target)
    torch.testing.assert_close(ours, torch.stack([a.sum(-1) for a in attrs], 1))


def test_saliency_is_the_sum_of_absolute_gradients():
    head, feats, _, target = make()
    ours = saliency(head, feats, target)
    x = leaves(feats)
    p = torch.softmax(head(list(x)).logits, -1).gather(1, target[:, None]).sum()
    grads = torch.autograd.grad(p, x)
    torch.testing.assert_close(ours, torch.stack([g.abs().sum(-1) for g in grads], 1))
    ref = Saliency(captum_forward(head)).attribute(leaves(feats), target=target, abs=True)
    torch.testing.assert_close(ours, torch.stack([a.sum(-1) for a in ref], 1))


def test_reductions():
    a = [torch.tensor([[1.0, -2.0, 2.0]]), torch.tensor([[-3.0, 4.0]])]
    torch.testing.assert_close(reduce_layers(a, "sum"), torch.tensor([[1.0, 1.0]]))
    torch.testing.assert_close(reduce_layers(a, "abs"), torch.tensor([[5.0, 7.0]]))
    torch.testing.assert_close(reduce_layers(a, "l2"), torch.tensor([[3.0, 5.0]]))
    with pytest.raises(LayaError, match="did you mean"):
        reduce_layers(a, "su")


def test_contrib_equals_the_design_formula_by_hand():
    head, feats, _, target = make(batch=6)
    ours = contrib(head, feats, target)
    # docs/metrics.md: α_i·((W z_i)_ŷ − (W z_i)_ŷ₂), ŷ₂ the runner-up, in float64, written out longhand.
    h = {k: v.double() for k, v in head.state_dict().items()}
    f64 = [f.double() for f in feats]
    z = torch.stack([f64[i] @ h[f"adapters.{i}.weight"].T + h[f"adapters.{i}.bias"] for i in range(len(DIMS))], 1)
    s = torch.nn.functional.gelu(z.flatten(1) @ h["scorer.0.weight"].T + h["scorer.0.bias"])
    s = s @ h["scorer.2.weight"].T + h["scorer.2.bias"]
    alpha = torch.softmax(s / head.tau, -1)
    W, b = h["classifier.weight"], h["classifier.bias"]
    logits = (alpha.unsqueeze(-1) * z).sum(1) @ W.T + b
    for n in range(len(target)):
        y = target[n].item()
        y2 = max((c for c in range(C) if c != y), key=lambda c: logits[n, c].item())
        for i in range(len(DIMS)):
            expected = alpha[n, i] * (W[y] @ z[n, i] - W[y2] @ z[n, i])
            assert ours[n, i].item() == pytest.approx(expected.item(), rel=1e-9, abs=1e-12)
        # contributions add up to the margin minus the bias difference
        assert ours[n].sum().item() == pytest.approx((logits[n, y] - logits[n, y2] - b[y] + b[y2]).item(), abs=1e-9)


def test_ig_works_on_a_last_head_that_ignores_earlier_layers():
    head, feats, ref, target = make("last")
    scores = integrated_gradients(head, feats, target, ref, n_steps=8)
    assert (scores[:, :-1] == 0).all()
    assert (scores[:, -1] != 0).any()
    assert (gradient_x_activation(head, feats, target)[:, :-1] == 0).all()


def test_global_is_mean_alpha_and_softmax_w_for_scalarmix():
    head, feats, _, _ = make("laya")
    w = mean_attention(head, [[f[:3] for f in feats], [f[3:] for f in feats]])  # streamed in two batches
    torch.testing.assert_close(w, head(feats).alpha.mean(0))
    torch.testing.assert_close(global_weights(w, 4), w.expand(4, -1))
    mix, feats, _, _ = make("scalarmix")
    with torch.no_grad():
        mix.mix_logits.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0]))
    torch.testing.assert_close(mean_attention(mix, [feats]), torch.softmax(mix.mix_logits.detach(), 0))


def test_random_is_seeded_uniform():
    a = random_scores(50, 4, torch.Generator().manual_seed(3))
    b = random_scores(50, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (50, 4)
    assert (a >= 0).all() and (a < 1).all()
    assert not torch.equal(a, random_scores(50, 4, torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("kind", ["laya", "last", "concat", "scalarmix"])
def test_every_method_gives_b_by_l_scores_or_says_why_not(kind):
    head, feats, ref, target = make(kind)
    ctx = AttributionContext(
        target,
        ref,
        n_steps=4,
        generator=torch.Generator().manual_seed(0),
        global_weights=torch.full((len(DIMS),), 0.25),
    )
    for name, fn in METHODS.items():
        reason = unavailable_reason(name, head)
        if reason:
            assert "undefined" in reason and kind in reason
            continue
        scores = fn(head, feats, ctx)
        assert scores.shape == (len(target), len(DIMS)), name
        assert torch.isfinite(scores).all(), name
    assert (unavailable_reason("laya", head) is None) == (kind in ("laya", "scalarmix"))
    assert (unavailable_reason("global", head) is None) == (kind in ("laya", "scalarmix"))
    assert (unavailable_reason("contrib", head) is None) == (kind == "laya")


# --------------------------------------------------------------------------- the joined input (issue 73)


WIDE = [64, 128, 256, 512]  # widths as a CNN's blocks have them


def _per_layer_forward(head):
    """The forward the audit handed Captum before issue 73: L inputs, each tied into the graph with a zero term."""

    def forward(*feats):
        probs = torch.softmax(head(list(feats)).logits, dim=-1)
        return probs + torch.stack([(f.flatten(1) * 0).sum(-1) for f in feats]).sum(0).unsqueeze(-1)

    return forward


def _per_layer(method, head, feats, target, **kwargs):
    """Captum on the L inputs separately (the audit's way before issue 73): per-feature attributions per layer."""
    return method(_per_layer_forward(head)).attribute(leaves([f.float() for f in feats]), target=target, **kwargs)


def _ig_both_ways(kind, batch, n_steps, dims):
    """(scores, δ) of ``integrated_gradients`` on the joined input, and of Captum on the L inputs separately."""
    head, feats, ref, target = make(batch=batch, kind=kind, dims=dims)
    scores, delta = integrated_gradients(head, feats, target, ref, n_steps=n_steps, return_delta=True)
    attrs, want_delta = IntegratedGradients(_per_layer_forward(head)).attribute(
        leaves(feats),
        baselines=tuple(r.reshape(1, -1) for r in ref),
        target=target,
        n_steps=n_steps,
        return_convergence_delta=True,
    )
    return (scores, delta), (reduce_layers(attrs).detach(), want_delta.detach())


@pytest.mark.parametrize("kind", ["laya", "concat", "scalarmix", "last"])
@pytest.mark.parametrize("batch,n_steps", [(1, 4), (7, 8), (13, 32), (32, 64)])
def test_ig_on_the_joined_input_is_bit_for_bit_the_per_layer_call(kind, batch, n_steps):
    """Layer widths that are multiples of 64 (every backbone's here: 64 … 768): the same bits."""
    (scores, delta), (want, want_delta) = _ig_both_ways(kind, batch, n_steps, WIDE)
    assert torch.equal(scores, want)
    assert torch.equal(delta, want_delta)


@pytest.mark.parametrize("batch,n_steps", [(1, 4), (7, 8), (13, 32)])
def test_ig_on_the_joined_input_rounds_alike_for_odd_widths(batch, n_steps):
    """Odd widths (12, 8, 6, 10): Captum's sum over the steps is one CPU reduction over all the batch's features,
    whose last (columns mod 32 or 64) are added in another order than the rest; which features fall there differs
    between one joined input and L inputs, so a sum over ≥ 8 steps can round differently (≈ 1e-9 here)."""
    (scores, delta), (want, want_delta) = _ig_both_ways("laya", batch, n_steps, DIMS)
    torch.testing.assert_close(scores, want, rtol=0, atol=1e-8)
    torch.testing.assert_close(delta, want_delta, rtol=0, atol=1e-8)
    if n_steps == 4:  # fewer than 8 steps are added in one order everywhere
        assert torch.equal(scores, want)


@pytest.mark.parametrize("kind", ["laya", "last"])
@pytest.mark.parametrize("batch,dims", [(1, DIMS), (7, DIMS), (32, WIDE)])
def test_gradient_methods_on_the_joined_input_are_bit_for_bit_the_per_layer_calls(kind, batch, dims):
    head, feats, ref, target = make(batch=batch, kind=kind, dims=dims)
    want = reduce_layers(_per_layer(InputXGradient, head, feats, target)).detach()
    assert torch.equal(gradient_x_activation(head, feats, target), want)
    want = reduce_layers(_per_layer(Saliency, head, feats, target, abs=True)).detach()
    assert torch.equal(saliency(head, feats, target), want)
    grads = _per_layer(Saliency, head, feats, target, abs=False)
    want = reduce_layers([(f - r) * g for f, r, g in zip(feats, ref, grads)]).detach()
    assert torch.equal(attribution_patching(head, feats, target, ref), want)
