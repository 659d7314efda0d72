"""How much of the depth α actually uses: pure functions of a batch of layer weightings α, (N, L) rows on the simplex.

- ``alpha_entropy``: H(α(x)) in nats per sample, 0 when all mass is on one layer, log L when uniform.
- ``effective_layers``: exp H(α(x)), the number of equally weighted layers with the same entropy (1 … L).
- ``top_layer_spread``: the share of samples whose most attended layer is not the most common one — 0 when every
  sample puts its peak on the same layer, i.e. α says nothing per sample about *which* depth drives it.

α has **collapsed** (``is_collapsed``) when the mean effective number of layers is below ``COLLAPSE_LAYERS`` and at
most ``COLLAPSE_SPREAD`` of the samples peak elsewhere: one layer takes (nearly) all the mass for (nearly) everyone.
What that means depends on what α was trained to rank (``trained_against``): a head that only learnt to predict, or
to rank its own effects, may have stopped reading the other layers (a warning about the head); one trained against
the network-scope effects (``--align-target network``) names the layer the network needs most for nearly every
sample (a finding about the model, said as a note).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .settings import NETWORK_SCOPES

COLLAPSE_LAYERS = 1.5  # mean effective layers below this: one layer holds most of the mass
COLLAPSE_SPREAD = 0.05  # and at most this share of samples peak on another layer


def alpha_entropy(alpha: Tensor) -> Tensor:
    """(N,) Shannon entropy in nats of each row of α (0 · log 0 := 0)."""
    p = alpha.double().clamp_min(0)
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-300)
    return -torch.special.xlogy(p, p).sum(-1)


def effective_layers(alpha: Tensor) -> Tensor:
    """(N,) exp of the entropy: how many layers α spreads its mass over, between 1 and L."""
    return alpha_entropy(alpha).exp()


def top_layer_spread(alpha: Tensor) -> float:
    """The share of samples whose most attended layer differs from the most common most-attended layer."""
    if alpha.shape[0] == 0:
        return float("nan")
    top = alpha.argmax(-1)
    modal = torch.bincount(top, minlength=alpha.shape[-1]).argmax()
    return float((top != modal).double().mean())


def trained_against(checkpoint: dict | None) -> str | None:
    """What the checkpoint's α was trained to rank: ``network`` or ``head`` where an alignment term trained it (its
    ``train_config``), None where none did (or the checkpoint does not say)."""
    config = (checkpoint or {}).get("train_config") or {}
    return config.get("align_target", "head") if config.get("align") else None


def collapse_summary(alpha: Tensor, against: str | None = None) -> dict:
    """What ``laya info``, the audit and report.html show: entropy (mean, sd, quartiles, its maximum log L), the
    effective number of layers (mean and quartiles), the top-layer spread, the modal top layer and ``collapsed``;
    ``trained_against``: what α was trained to rank (``trained_against``)."""
    n_layers = alpha.shape[-1]
    h = alpha_entropy(alpha)
    eff = h.exp()
    q = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
    # both quartiles in one call (each row's are those of the 1-D tensor), the top layer counted once
    hq, eq = torch.quantile(torch.stack([h, eff]), q, dim=-1).T.tolist() if len(h) else ([math.nan] * 3,) * 2
    top = alpha.argmax(-1)
    modal = torch.bincount(top, minlength=n_layers).argmax() if len(alpha) else None
    spread = float((top != modal).double().mean()) if len(alpha) else float("nan")  # top_layer_spread
    modal = int(modal) if modal is not None else None
    summary = {
        "samples": int(alpha.shape[0]),
        "layers": int(n_layers),
        "entropy_mean": float(h.mean()) if len(h) else math.nan,
        "entropy_sd": float(h.std(unbiased=False)) if len(h) else math.nan,
        "entropy_quartiles": hq,
        "entropy_max": math.log(n_layers),
        "effective_layers_mean": float(eff.mean()) if len(eff) else math.nan,
        "effective_layers_quartiles": eq,
        "top_layer_spread": spread,
        "modal_top_layer": modal,
        # mean of L · max_i α_i: 1 for a uniform α, L for one-hot (auditing/flags.py flags an α within noise of uniform)
        "top_weight_ratio": float(alpha.double().max(-1).values.mean() * n_layers) if len(alpha) else math.nan,
    }
    summary["collapsed"] = is_collapsed(summary)
    summary["trained_against"] = against
    # collapsed, α trained against the network-scope effects: it names the layer the network needs, not a head that
    # stopped reading the others (a note, not a warning)
    summary["finding"] = summary["collapsed"] and against in NETWORK_SCOPES
    return summary


def is_collapsed(summary: dict) -> bool:
    """One layer takes (nearly) all of α's mass for (nearly) every sample (thresholds above)."""
    eff, spread = summary["effective_layers_mean"], summary["top_layer_spread"]
    return bool(eff < COLLAPSE_LAYERS and spread <= COLLAPSE_SPREAD)


def collapse_warning(summary: dict, layer_names=None) -> str:
    """The one line for a collapsed α: what it means and what to try (docs/metrics.md, α collapse); for an α trained
    against the network-scope effects, the finding it states (the summary's ``finding``)."""
    top = summary["modal_top_layer"]
    name = layer_names[top] if layer_names is not None and top is not None else f"layer {top}"
    if summary.get("finding"):
        return (
            f"α concentrates on {name} ({summary['effective_layers_mean']:.2f} effective layers of "
            f"{summary['layers']}, {100 * summary['top_layer_spread']:.1f} % of samples peak elsewhere). It was "
            f"trained to rank the layers as removing each inside the network moves the prediction "
            f"(--align-target network), so this is about the model: for nearly every sample {name} is the layer its "
            f"prediction needs most; laya audit --scope network scores how faithfully α ranks the rest"
        )
    return (
        f"α has collapsed onto {name}: {summary['effective_layers_mean']:.2f} effective layers of "
        f"{summary['layers']} on average, {100 * summary['top_layer_spread']:.1f} % of samples peak elsewhere. "
        f"α then says little per sample (nearly everyone gets the same layer) and its faithfulness rests on the "
        f"small weights left on the other layers (near-ties when they are tiny); see docs/metrics.md (α collapse) "
        f"for what to try"
    )


def collapse_notes(summary: dict | None, layer_names=None) -> list[str]:
    """The audit's note for a collapsed α (a ``warning:`` note: printed as a warning, kept in the JSON's notes); none
    for an α that spreads, or a head without α (``summary`` None)."""
    if not (summary and summary["collapsed"]):
        return []
    return [("" if summary.get("finding") else "warning: ") + collapse_warning(summary, layer_names)]
