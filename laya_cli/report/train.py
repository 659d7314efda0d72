"""``laya train``'s lines: one per epoch, and what the finished run measured on held-out data (a classifier's test
accuracy, or a language model's table of layers and heads)."""

from __future__ import annotations

from .inert import rich_text


def epoch_line(r) -> str:
    """One epoch (a classifier's ``EpochRecord`` or a language model's ``LMEpoch``) with each figure's unit: a
    classifier's training cross-entropy and its other terms apart (``_loss_terms``), nats per sample; a language
    model's loss in nats per token, its terms summed (the objective, the tuned lens, --align, --exit-aware), the
    held-out KL and CE in bits per token; the best so far is marked."""
    mark = " [green]*best[/]" if r.best else ""
    if hasattr(r, "val_kl_bits"):  # a language model's: what it trains on, in nats; held-out figures in bits
        return (
            f"epoch {r.epoch:3d}  train objective {r.loss:.4f} nats/token (all terms summed)  held-out KL "
            f"{r.val_kl_bits:.4f}, CE {r.val_ce_bits:.4f} bits/token  {r.seconds:.1f}s{mark}"
        )
    faithfulness = "" if r.val_faithfulness is None else f"  val faith {r.val_faithfulness:.4f}"
    return (
        f"epoch {r.epoch:3d}  {_loss_terms(r)}  train acc {r.train_accuracy:.4f}  val acc "
        f"{r.val_accuracy:.4f}{faithfulness}  {r.seconds:.1f}s{mark}"
    )


def _loss_terms(r) -> str:
    """A classifier's training loss with its terms named: the cross-entropy alone, or the cross-entropy and what the
    --align / --alpha-entropy / --exit-aware terms add to it (a summed 'loss' rose while validation accuracy rose:
    issue 71). Records without the cross-entropy apart (data-parallel, older states): the sum, said as such."""
    ce = getattr(r, "cross_entropy", None)
    if ce is None:
        return f"loss {r.loss:.4f} nats/sample (all terms summed)"
    extra = r.loss - ce
    if abs(extra) < 5e-5:
        return f"CE {ce:.4f} nats/sample"
    return f"CE {ce:.4f} + α terms {extra:.4f} nats/sample"


def trained_lines(ckpt: dict, out) -> list:
    """What a finished run measured (rich renderables), ending with where its checkpoint went."""
    m = ckpt["metrics"]
    if ckpt.get("task") == "lm":
        from .lm import lm_layers_table

        laya = m["heads"]["laya"]
        return [
            lm_layers_table(m, ckpt["layers"]),
            f"[bold]held-out laya: KL {laya['kl']:.4f} bits, CE {laya['ce']:.4f} bits per token[/] -> {rich_text(out)}",
        ]
    return [
        f"[bold]test accuracy {m['test_accuracy']:.4f}  macro-F1 {m['test_macro_f1']:.4f}[/]  "
        f"(best epoch {m['best_epoch']} of {m['epochs_run']}) -> {rich_text(out)}"
    ]
