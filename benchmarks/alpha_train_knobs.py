"""``laya`` with three training knobs laya has no option for, to measure them (docs/results/alpha-ceiling.md,
"Training α toward its ceiling"): ``python -m benchmarks.alpha_train_knobs train ...`` takes ``laya``'s arguments.

    AL74_SUBSET=N      a frozen backbone's network term caches Δᴺ for about N rows a batch (FROZEN_SUBSET: 16)
    AL74_SCORER_LR=M   α's scorer learns at M × --lr (its own Adam group)
    AL74_DETACH=1      the prediction reads α detached while training: the scorer learns from the --align term only
    AL74_KAPPA=K       the ranking loss reads K·log α (what --align-sharpness K now does, bitwise)
"""

from __future__ import annotations

import os

import torch

import laya_cli.training.alignment as alignment
import laya_cli.training.loop as loop
import laya_cli.training.network_target as network_target
from laya_cli.model import heads


def _scorer_optimizer(multiple: float):
    def make_optimizer(model, cfg, n_batches):
        head = getattr(model, "head", model)
        scorer = {id(p) for p in head.scorer.parameters()}
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if id(p) not in scorer], "lr": cfg.lr},
            {"params": [p for p in params if id(p) in scorer], "lr": cfg.lr * multiple},
        ]
        return torch.optim.Adam(groups, lr=cfg.lr)

    return make_optimizer


def _detached_forward(self, feats, alpha_mask=None):
    z = self.embed(feats)
    alpha = self.attention(z, feats)
    alpha = heads._masked(alpha.detach() if self.training else alpha, alpha_mask)
    return heads.HeadOutput(self.classifier((alpha.unsqueeze(-1) * z).sum(1)), alpha)


def main() -> None:
    torch.set_num_threads(1)
    if subset := int(os.environ.get("AL74_SUBSET", "0")):
        network_target.cached_rows.__defaults__ = (subset, None)
    if multiple := float(os.environ.get("AL74_SCORER_LR", "0")):
        loop.make_optimizer = _scorer_optimizer(multiple)
    if kappa := float(os.environ.get("AL74_KAPPA", "0")):
        rank = alignment.ranking_loss
        alignment.ranking_loss = lambda log_alpha, delta, data_parallel=False, sharpness=1.0: rank(
            kappa * log_alpha, delta, data_parallel
        )
    if os.environ.get("AL74_DETACH"):
        heads.LAYAHead.forward = _detached_forward
    from laya_cli.cli.group import main as laya

    laya()


if __name__ == "__main__":
    main()
