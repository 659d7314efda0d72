"""What a network-scope audit checks before any work: taps that cannot be patched (not modules of the model), blocks
whose output is not shaped like their input (a by-input removal), taps that gradient methods cannot reach."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...runtime.errors import LayaError
from ..registry import METHODS
from ..settings import BY_INPUT


def check_network_scope(model, removal: str, methods: Sequence[str] = ()) -> None:
    """Fail before any work: taps that cannot be patched (not modules of the model), blocks that ``removal`` (the
    network scope's, ``Removal.network``) cannot bypass, or taps that the gradients of ``methods`` cannot reach."""
    model.backbone.tap_modules()
    if removal in BY_INPUT:  # every tapped block's output must have its input's shape: one line, before any work
        with torch.no_grad():
            model.backbone.eval().activations_and_inputs(model.backbone.probe_input())
    if any(m in METHODS and METHODS[m].network for m in methods):  # their own network attribution: gradients
        check_gradients_reach_taps(model.backbone)


def check_gradients_reach_taps(backbone) -> None:
    """A model that computes some layers under ``torch.no_grad`` inside its own forward (HRM runs all but its last
    recurrent cycle so) gives those taps no gradient: network-scope IG, Grad×Act and AtP cannot attribute to them.
    Refused in one line on a probe batch rather than failing deep inside Captum."""
    x = backbone.probe_input()
    with torch.enable_grad():
        hs = backbone.eval().activations(x.detach().requires_grad_(x.is_floating_point()))
    cut = [name for name, h in zip(backbone.layer_names, hs) if not h.requires_grad]
    if cut:
        raise LayaError(
            f"the model computes {', '.join(cut[:3])}{' …' if len(cut) > 3 else ''} without gradients (under "
            "torch.no_grad inside its forward): network-scope gradient methods cannot reach them; audit with "
            "--scope head, or --compare without ig, gradxact, atp and saliency"
        )
