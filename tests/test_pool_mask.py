"""Issue 73, seventh round: a text batch's pooling mask is repeated over the stacked copies and cast to the tap's dtype
once per batch and shape of rows (``TokenAdapter.pool_mask``), not at every pooling; r_i stay those pooled with
``batch_mask`` bit for bit, and a new batch (or some of its rows) gets its own mask."""

from __future__ import annotations

import pytest
import torch
from test_network_batching import _bert_scope


@pytest.mark.parametrize("how", ["mean", "last"])
def test_a_text_batchs_pooling_mask_follows_the_batch(tmp_path, how):
    """The mask pooling reads is made once per batch and shape of rows, and a new batch (or some of its rows) gets its
    own: r_i equal those pooled with ``batch_mask`` every time."""
    net, x = _bert_scope(tmp_path, "zero")
    backbone = net.backbone
    backbone.pool = how  # a pooling that reads the mask (the tiny BERT's own: its class token)
    with torch.no_grad():
        for rows in (x, x[[0, 1]], x[[1, 0]], x[[0, 2, 4]], x):  # x[[1, 0]]: another mask of the same shape
            hs = backbone.activations(rows)
            for copies in (1, 3):
                for i, h in enumerate(hs):
                    stacked = h.repeat(copies, 1, 1)
                    fmt = backbone.tap_format(i, h)
                    want = fmt.pool(stacked, backbone.pool, "", backbone.adapter.batch_mask(stacked))
                    assert torch.equal(backbone.pool_tap(i, stacked), want)
            with backbone.batch_rows(torch.tensor([0, 1])):
                h = hs[0][:2]
                want = backbone.tap_format(0, h).pool(h, backbone.pool, "", backbone.adapter.batch_mask(h))
                assert torch.equal(backbone.pool_tap(0, h), want)
