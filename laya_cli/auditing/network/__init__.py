"""Network scope: total layer effects, patched inside the backbone (docs/metrics.md, "Two scopes").

At head scope (``auditing.head_scope.run_audit``) layer i is removed where the head reads it: r_i is replaced
and every later layer still sees the original h_i — layer i's *direct* effect. Here layer i's
output is replaced *inside the backbone* by a reference activation (the training mean of the
unpooled activation, or zero) and the rest of the network runs on: its *total* effect, direct and
through every later layer (activation patching, as in causal tracing).

Cost: never recompute what a patch cannot change. The taps' activations are computed once per
batch; for backbones whose taps form a chain (``TappedBackbone.can_continue``: our mlp/cnn, timm
ViT/DeiT/Mixer blocks, ResNet stages, …) a patched pass and every IG step run only the layers
after the patched one (``continue_from``). Other backbones fall back to full forward passes with a
replacing hook (``patched_activations``).

The package:
  reference   what a patched tap takes: the training mean of each tap's activation (or update), cached;
  checks      what fails before any work (taps that cannot be patched or reached by gradients);
  patching    ``NetworkScope``: the patched passes and the total effects Δ_i;
  methods     Captum's layer attributions on them (ig, gradxact, atp, saliency: wrapped, never re-implemented);
              the other methods (laya, contrib, global, random) are the head's scores, scored against the
              total effects (``registry.Method.network`` says which is which);
  batches     the audit's batches and their rows (``auditing.job.run_scoped_audit`` runs it beside the head scope);
  results     ``NetworkResult``: per method its faithfulness and Deletion@1, and the two scopes compared.
"""
