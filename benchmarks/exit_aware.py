"""Experiment (issue 47): a language-model LAYA head trained under random truncation — exit-aware training.

    python -m benchmarks.exit_aware --weight W -- train --task lm ...   # laya train's own arguments after --

``laya depth``'s early exit reads the head truncated at depth k: the layers above k replaced by the training mean
r̄, α masked above k and renormalised (``depthing.token_exit.truncated_laya``). A plain head never sees that input
while it trains, so its truncated predictions are worse than they need be and an exit that trusts them costs cross-
entropy. Here every training step adds W · the objective of the head truncated at a depth k drawn uniformly from
1..L−1 per position (depth L is the full head, already trained), with r̄ the running mean of the states trained on
so far (the checkpoint's r̄ is the mean of epoch 1's first positions: the same quantity, converging to it).

Not a laya option: a benchmark wraps ``laya train`` (``training.lm.train_step``) so the variant can be measured
(``benchmarks.lm_align --variants plain+trunc,rank+trunc``) before anything is added to the product; the
checkpoint it writes is an ordinary one, audited and exited by ``laya`` itself. docs/lm.md has what it measured.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import Tensor


class RunningMean:
    """Σ states / n over every position trained on so far, per layer (L, d)."""

    def __init__(self):
        self.total, self.n = None, 0

    def add(self, hs: Tensor) -> Tensor:
        s = hs.detach().double().sum(0)
        self.total = s if self.total is None else self.total + s
        self.n += len(hs)
        return (self.total / self.n).to(hs.dtype)


def truncated_objective(laya, hs: Tensor, targets: Tensor, name: str, reference: Tensor, generator=None) -> Tensor:
    """Mean over positions of the objective of the head truncated at a uniform depth k ∈ 1..L−1 of each."""
    from laya_cli.model.lenses import chunks, fused_loss
    from laya_cli.training.lm import reference_of

    n, L = hs.shape[:2]
    k = torch.randint(1, L, (n,), generator=generator).to(hs.device)
    keep = torch.arange(L, device=hs.device) < k.unsqueeze(1)  # (n, L): the layers computed by depth k
    total = hs.new_zeros((), dtype=torch.float32)
    for rows in chunks(n, laya.readout.vocabulary):
        h, y, kept = hs[rows], targets[rows], keep[rows]
        seen = torch.where(kept.unsqueeze(-1), h, reference.to(h.dtype))
        ref = reference_of(laya.readout, h[:, -1]) if name == "kl" else None
        total = total + fused_loss(name, laya(seen, kept.float())[0].unsqueeze(1), ref, y).sum()
    return total / n


def install(weight: float) -> None:
    """Wrap ``training.lm.train_step``: its alignment callable also returns W · the truncated objective."""
    from laya_cli.training import lm

    plain_step, mean = lm.train_step, RunningMean()

    def step(laya, tuned, hs, targets, name, opt, dropout, sample=None, align=None):
        reference = mean.add(hs)

        def term():
            extra = weight * truncated_objective(laya, hs, targets, name, reference)
            got = align() if align is not None else None
            return extra if got is None else extra + got

        return plain_step(laya, tuned, hs, targets, name, opt, dropout, sample, term)

    lm.train_step = step


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weight", type=float, default=1.0, help="W: the truncated objective's weight")
    a = p.parse_args(argv[:split])
    install(a.weight)
    from laya_cli.cli.group import main as laya

    sys.argv = ["laya", *argv[split + 1 :]]
    laya()


if __name__ == "__main__":
    main()
