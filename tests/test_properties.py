"""Property tests (hypothesis) for the metrics and the head: invariants that must always hold."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from laya_cli.auditing.metrics import deletion_at_1, spearman_rows
from laya_cli.model.heads import build_head
from laya_cli.model.settings import HeadSettings

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


def matrices(min_layers=2, max_layers=8):
    return st.integers(1, 6).flatmap(
        lambda rows: st.integers(min_layers, max_layers).flatmap(
            lambda cols: st.tuples(
                st.lists(st.lists(finite, min_size=cols, max_size=cols), min_size=rows, max_size=rows),
                st.lists(st.lists(finite, min_size=cols, max_size=cols), min_size=rows, max_size=rows),
            )
        )
    )


@settings(max_examples=200, deadline=None)
@given(matrices())
def test_faithfulness_is_within_minus_one_and_one(ab):
    a, b = (torch.tensor(x, dtype=torch.float64) for x in ab)
    rho = spearman_rows(a, b)
    defined = rho[~torch.isnan(rho)]
    assert ((defined >= -1 - 1e-9) & (defined <= 1 + 1e-9)).all()


@settings(max_examples=200, deadline=None)
@given(matrices(), st.floats(0.01, 100), st.floats(-50, 50), st.sampled_from(["affine", "cube", "exp"]))
def test_faithfulness_is_invariant_to_monotone_rescaling_of_attributions(ab, scale, shift, kind):
    a, b = (torch.tensor(x, dtype=torch.float64) for x in ab)
    a = a.round(decimals=2)  # keep ties exact under the transforms below
    transform = {"affine": lambda x: scale * x + shift, "cube": lambda x: x**3, "exp": lambda x: torch.exp(x / 1000)}[
        kind
    ]
    rho, rho_t = spearman_rows(a, b), spearman_rows(transform(a), b)
    torch.testing.assert_close(rho, rho_t, equal_nan=True, atol=1e-9, rtol=0)


@settings(max_examples=200, deadline=None)
@given(matrices())
def test_deletion_at_1_never_exceeds_its_oracle_nor_falls_below_the_minimum(ab):
    a, delta = (torch.tensor(x, dtype=torch.float64) for x in ab)
    d1, oracle, random = deletion_at_1(a, delta)
    assert (d1 <= oracle + 1e-12).all()
    assert (d1 >= delta.min(-1).values - 1e-12).all()
    assert (random <= oracle + 1e-12).all()


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.integers(1, 12), min_size=1, max_size=5),
    st.floats(0.05, 20),
    st.sampled_from(["identity", "mlp"]),
    st.integers(0, 2**16),
)
def test_alpha_rows_always_sum_to_one(batch, dims, tau, psi, seed):
    torch.manual_seed(seed)
    head = build_head("laya", dims, 3, HeadSettings(d_star=4, tau=tau, psi=psi, score_hidden=5))
    feats = [torch.randn(batch, d) * 10 for d in dims]
    alpha = head(feats).alpha
    assert alpha.shape == (batch, len(dims)) and (alpha >= 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(batch), atol=1e-5, rtol=0)
