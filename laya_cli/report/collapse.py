"""α collapse in words: the one line ``laya info``, the audit's caption and report.html write from a collapse summary
(the dict ``auditing.collapse.collapse_summary`` returns; docs/metrics.md, "α collapse")."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .cells import fmt


def collapse_text(
    summary: dict | None,
    layers: Sequence[str] | None = None,
    flag: str = "{}",
    escape: Callable[[str], str] = str,
) -> str | None:
    """ "entropy 0.021 ± 0.018 of max 1.099 nats, 1.02 of 3 effective layers, top-layer spread 0.0 %", then "—
    collapsed onto <layer>" when collapsed (written through ``flag``, a format string, so that each form can mark it;
    the layer name through ``escape``). None without a summary (a head without α, an older checkpoint or audit)."""
    if not summary:
        return None
    s = summary
    text = (
        f"entropy {fmt(s.get('entropy_mean'))} ± {fmt(s.get('entropy_sd'))} of max {fmt(s.get('entropy_max'))} "
        f"nats, {fmt(s.get('effective_layers_mean'), '{:.2f}')} of {s.get('layers', '?')} effective layers, "
        f"top-layer spread {fmt(_percent(s.get('top_layer_spread')), '{:.1f}')} %"
    )
    if s.get("collapsed"):
        top = s.get("modal_top_layer")
        name = layers[top] if layers is not None and isinstance(top, int) and top < len(layers) else f"layer {top}"
        if s.get("finding"):  # trained against the network's effects: about the model, not a warning about the head
            text += f" — concentrated on {escape(str(name))} (trained against the network's effects)"
        else:
            text += " — " + flag.format(f"collapsed onto {escape(str(name))}")
    return text


def _percent(share):
    return None if share is None else 100 * share
