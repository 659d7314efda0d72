"""``laya audit`` on a language model (``--task lm``): every held-out position is a sample, its next token the
decision explained.

Head scope: the position's layer states h_1(t)..h_L(t) are the head's r_1..r_L and the vocabulary its classes, so
the classifier audit runs unchanged (``run.run_audit``: α, IG, Grad×Act…, leave-one-layer-out by r̄, Deletion@1,
intervals, gates); the LAYA head of a language model is a ``Head`` (model/lm_heads.py).

Network scope: layer i is bypassed inside the model (its output := its input, at every position) and the later
layers run on; Δ_i(t) = p_ŷ(t) − p_ŷ(t) with layer i bypassed, for all positions of a block in one pass. Scored
against it: α (the head's, unpatched), Grad×Act Σ_s ∂p_ŷ(t)/∂h_i(s) · h_i(s) and attribution patching (AtP)
Σ_s ∂p_ŷ(t)/∂h_i(s) · (h_i(s) − x_i(s)), x_i the layer's input (the first-order estimate of the bypass), their
gradients through every later layer and position (one backward pass per position), ``global`` and ``random``.
Layer IG with the bypass as baseline would sum to Δ itself (completeness): the target, not a competitor.

Both scopes are averaged over tokens and broken down by position in the block (``by_position``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import Tensor

from ..backbones.engines import HookEngine, block_input
from ..features.extraction import LayerFeatures
from ..features.lm_positions import batches, token_states
from ..model.lm_heads import LayaLM, lm_from_checkpoint
from ..runtime.device import autocast
from ..runtime.errors import LayaError
from ..runtime.memory import MemoryRequest, memory_budget, peak_measure, peak_memory_mb, reset_peak_memory
from ..runtime.progress import phase, track, within
from .budget import RowCosts, _OutputBytes, plan_from_costs
from .flags import chance_rate
from .head_scope import record_collapse, run_audit
from .intervals import network_columns, network_intervals
from .metrics import (
    check_removal,
    degenerate_effects,
    deletion_at_1,
    spearman_rows,
    target_probability,
    tie_undefined,
)
from .network.results import NetworkResult, method_scores
from .plan import AuditPlan
from .registry import METHODS
from .results import AuditResult, ties_block
from .settings import AuditSettings
from .verdict import mark_references

POSITION_BUCKETS = 4


@dataclass
class TokenAuditModel:
    """What ``run_audit`` reads of a model: the head, r̄ per layer, the layer names, the classes (the vocabulary)."""

    head: torch.nn.Module
    reference: list[Tensor]
    layer_names: list[str]
    classes: list[str]
    task: str = "lm"  # run_audit words its warnings for positions of a language model


@dataclass
class TokenData:
    features: LayerFeatures  # per position: r_i = h_i(t), label = the next token
    positions: Tensor  # (N,) t, the position in its block
    blocks: list[Tensor]  # the token batches the positions came from, in order
    dataset: str


def held_out_text(model: LayaLM, dataset: str | None, encoding: str | None = None):
    """(name, corpus, block size): the text a language model's held-out positions come from (``--dataset
    text:PATH``, default its training text, in the encoding it was read in), checked and opened; nothing is read
    yet."""
    from ..data.datasets import open_named_corpus

    name = dataset or model.ckpt["dataset"]["name"]
    config = model.ckpt.get("train_config") or {}
    if encoding is None and dataset is None:  # its own text: as it was read in training
        encoding = config.get("encoding")
    corpus = open_named_corpus(name, "a language model reads text", config.get("text_column"), encoding)
    return name, corpus, int(model.ckpt["dataset"]["block_size"])


def token_data(
    model: LayaLM, dataset: str | None, max_tokens: int, batch_size: int, encoding: str | None = None
) -> TokenData:
    """Up to ``max_tokens`` held-out positions (whole blocks: the first ones of the held-out text)."""
    name, corpus, block = held_out_text(model, dataset, encoding)
    states, targets, blocks, n = [], [], [], 0
    for x in track(
        batches(model.lm, corpus, "test", block, batch_size),
        "held-out positions",
        unit="batch",
        of=f"of {batch_size} blocks of {block} tokens",
    ):
        hs, y = token_states(model.lm, x)
        states.append(hs.cpu())
        targets.append(y.cpu())
        blocks.append(x)
        n += len(y)
        if n >= max_tokens:
            break
    if not states:
        raise LayaError(f"{name}: the held-out text is shorter than one block of {block} tokens")
    hs = torch.cat(states)[:max_tokens]
    features = LayerFeatures([hs[:, i].contiguous() for i in range(hs.shape[1])], torch.cat(targets)[:max_tokens])
    positions = torch.arange(block - 1).repeat(sum(len(x) for x in blocks))[:max_tokens]  # the last batch may be short
    return TokenData(features, positions, blocks, name)


def audit_model(model: LayaLM) -> TokenAuditModel:
    vocabulary = model.lm.readout.vocabulary
    return TokenAuditModel(model.laya, model.reference, list(model.ckpt["layers"]), [str(i) for i in range(vocabulary)])


# --------------------------------------------------------------------------- network scope


def _states_and_inputs(model: LayaLM, x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """Each tap's output h_i and its block's input x_i, in the autograd graph (the model's frozen weights; the
    gradient flows through the states)."""
    backbone = model.lm.backbone
    backbone.tap_modules()
    inputs: dict[int, Tensor] = {}

    def keep(i, args, kwargs):
        inputs[i] = block_input(args, kwargs)

    with autocast(x.device):  # bf16 on CUDA: the states stay in the graph as they are, the head reads them as float32
        outputs = HookEngine(backbone.model, backbone.layer_names).run(
            backbone.adapter(x), len(backbone.layer_names), pre=keep
        )
    return outputs, [inputs[i] for i in range(len(outputs))]


def _probabilities(head, states: Sequence[Tensor], target: Tensor) -> Tensor:
    """(B, T−1) p_target at every position that has a next token."""
    hs = torch.stack([h[:, :-1] for h in states], dim=2)  # B, T-1, L, d
    logits = head(hs.reshape(-1, hs.shape[2], hs.shape[3]).float()).logits
    return target_probability(logits, target.reshape(-1)).reshape(target.shape)


def bypassed_states(backbone, x: Tensor, i: int) -> list[Tensor]:
    """h_1..h_L (B, T, d, float32) of the blocks ``x`` with layer i bypassed at every position (its output := its
    input, the later layers run on), without gradient: what every network-scope effect of a language model reads
    (``_bypass_effects`` here; the per-token network alignment target, ``training/lm_alignment.py``)."""
    with torch.no_grad(), autocast(x.device):
        return [h.float() for h in backbone.bypassed_activations(x, [i])]


def each_bypassed(backbone, x: Tensor):
    """(i, h_1..h_L with layer i bypassed) for every layer i of the blocks ``x``, as ``bypassed_states`` gives them,
    at the cost of the floor: one pass records every layer's input and call, then bypassing layer i runs only the
    layers after it (``continue_from``: the earlier states cannot change), L(L−1)/2 layer calls in all instead of
    L full passes. A backbone that cannot continue from a tap (its replayed calls do not reproduce it on a probe
    batch) takes the full passes."""
    n = len(backbone.layer_names)
    if not backbone.can_continue:
        for i in range(n):
            yield i, bypassed_states(backbone, x, i)
        return
    with torch.no_grad(), autocast(x.device):
        hs, given = backbone.activations_and_inputs(x)
        for i in range(n):
            later = backbone.continue_from(i, given[i]) if i + 1 < n else []
            yield i, [h.float() for h in (*hs[:i], given[i], *later)]


def _bypass_effects(model: LayaLM, x: Tensor, target: Tensor, base: Tensor) -> Tensor:
    """(B, T−1, L) Δ_i(t): p_ŷ(t) minus p_ŷ(t) with layer i bypassed at every position."""
    out = []
    backbone = model.lm.backbone
    for _, states in within(each_bypassed(backbone, x), len(backbone.layer_names)):  # progress inside the batch
        with torch.no_grad():
            out.append(base - _probabilities(model.laya, states, target))
    return torch.stack(out, dim=-1)


def _gradient_scores(states, inputs, p: Tensor, parts: dict) -> dict[str, Tensor]:
    """(B, T−1, L) per method of ``parts`` (its record's ``token_gradient``: (h_i, x_i) -> what ∂p(t)/∂h_i(s) is
    multiplied by; Grad×Act h_i(s), AtP h_i(s) − x_i(s)), summed over positions s and features, one backward pass per
    position t shared by them all (the blocks of a batch are independent: their p(t) are summed)."""
    if not parts:
        return {}
    out: dict[str, list[Tensor]] = {m: [] for m in parts}
    for t in within(range(p.shape[1])):  # one backward pass per position
        grads = torch.autograd.grad(p[:, t].sum(), states, retain_graph=True, allow_unused=True)
        for m, part in parts.items():
            out[m].append(torch.stack([_dot(g, part(h, xi)) for g, h, xi in zip(grads, states, inputs)], -1))
    return {m: torch.stack(v, 1).detach() for m, v in out.items()}


def _dot(grad: Tensor | None, x: Tensor) -> Tensor:
    """(B,) Σ over positions and features of grad · x, in float32 (0 where the state does not reach p)."""
    if grad is None:
        return x.new_zeros(len(x), dtype=torch.float32)
    return (grad.float() * x.float()).flatten(1).sum(1)


@dataclass
class TokenBatch:
    """What a method's record reads to score one batch of blocks at network scope (``Method.tokens``)."""

    alpha: Tensor  # (N, L) the head's α at the batch's N positions (on the CPU)
    n_layers: int
    generator: torch.Generator  # the audit's seeded draws (random)


def _network_block(
    model: LayaLM, x: Tensor, settings: AuditSettings, generator, methods: Sequence[str]
) -> dict[str, Tensor]:
    """Every network-scope number of one batch of blocks, flattened to positions (B·(T−1), …): the scores of
    ``methods`` (each as its record says, ``Method.tokens`` or ``token_gradient``) under their names."""
    x = x.to(settings.device)
    parts = {m: METHODS[m].token_gradient for m in methods if METHODS[m].token_gradient is not None}
    with torch.enable_grad():
        states, inputs = _states_and_inputs(model, x)
        with torch.no_grad():
            hs = torch.stack([h[:, :-1] for h in states], dim=2).flatten(0, 1).float()
            out = model.laya(hs)
            target = out.logits.argmax(-1) if settings.target == "predicted" else x[:, 0, 1:].reshape(-1).long()
        target = target.reshape(x.shape[0], -1)
        p = _probabilities(model.laya, states, target)
        with phase(0.5):  # the backward passes per position, then the bypassed passes per layer: about half each
            gradients = _gradient_scores(states, inputs, p, parts)
    with phase(0.5):
        delta = _bypass_effects(model, x, target, p.detach())
    flat = lambda t: t.reshape(-1, t.shape[-1]).cpu()  # noqa: E731
    batch = TokenBatch(out.alpha.detach().cpu(), delta.shape[-1], generator)
    scores = {m: flat(gradients[m]) if m in parts else METHODS[m].tokens(batch) for m in methods}
    return {
        "delta": flat(delta),
        "alpha": batch.alpha,
        **scores,
        "pred": out.logits.argmax(-1).cpu(),
        "label": x[:, 0, 1:].reshape(-1).cpu(),
    }


def token_network(model: LayaLM, data: TokenData, methods: Sequence[str], settings: AuditSettings) -> NetworkResult:
    """The network scope on the same positions as the head scope."""
    plan = AuditPlan.prepare(audit_model(model), methods, settings, len(data.features), model.lm.num_layers)
    for m in plan.methods:
        if not METHODS[m].built_for_tokens and not plan.reasons[m]:
            plan.reasons[m] = f"{m} is not built at network scope for language models (α, gradxact, atp are)"
    generator = torch.Generator().manual_seed(settings.seed)
    blocks = torch.cat(data.blocks)
    per_batch = max(1, settings.batch_size // (blocks.shape[2] - 1))  # --batch-size counts positions
    chunks = blocks.split(per_batch)
    built = [m for m in plan.methods if not plan.reasons[m]]
    rows = [
        _network_block(model, x, settings, generator, built)
        for x in track(chunks, "network scope", len(chunks), unit="batch", of=f"of {per_batch} blocks")
    ]
    got = {k: torch.cat([r[k] for r in rows])[: len(data.features)] for k in rows[0]}
    delta, tol = got["delta"], settings.tie_tol
    for m in built:
        if METHODS[m].whole_set is not None:  # one statistic of the whole set: the mean over every position
            got[m] = got[m].mean(0, keepdim=True).expand_as(got[m])
    rho, d1, tie = {}, {}, {}
    for m in plan.methods:
        if plan.reasons[m]:
            continue
        rho[m] = spearman_rows(got[m], delta, tol)
        d1[m] = deletion_at_1(got[m], delta, tol)[0]
        tie[m] = tie_undefined(rho[m], spearman_rows(got[m], delta), delta, tol)
    _, oracle, random = deletion_at_1(delta, delta)
    degenerate = degenerate_effects(delta, tol)
    common = {"oracle": oracle, "random": random, "degenerate": degenerate}
    scores = method_scores(plan, rho, d1, tie, common)
    network_intervals(scores, rho, d1, common, settings)  # --ci, as at head scope
    ties = ties_block(tol, int(degenerate.sum()), int((degenerate & ~degenerate_effects(delta)).sum()), scores)
    notes = ["network scope: each layer bypassed (its output := its input) at every position of the block"]
    notes += [f"{m}: {plan.reasons[m]}" for m in plan.methods if not METHODS[m].built_for_tokens and plan.reasons[m]]
    network = NetworkResult(methods=scores, patched="full", reference="bypass", notes=notes, ties=ties)
    accuracy = float((got["pred"] == got["label"]).double().mean())
    # ρ is undefined (NaN) where every Δ is equal within the tolerance, as in the summary (and at head scope)
    undefined = {m: r.masked_fill(degenerate, float("nan")) for m, r in rho.items()}
    network.samples = {"faithfulness": undefined, "deletion@1": d1, "delta": delta, "accuracy": accuracy,
                       "columns": network_columns(scores, rho, d1, common), "alpha": got["alpha"],
                       "predicted": got["pred"], "label": got["label"]}  # fmt: skip
    return network


# --------------------------------------------------------------------------- the job


def by_position(positions: Tensor, faithfulness: dict[str, Tensor], d1: dict[str, Tensor], block: int) -> dict:
    """Mean faithfulness and Deletion@1 per method in ``POSITION_BUCKETS`` ranges of the position t; ``n``: the
    positions of each range, ``defined``: per method, those whose faithfulness is defined (the mean's count). Every
    method's means of a range in one set of kernels (their (M, N) rows stacked; each row reduced alone, as it was
    method by method) and the numbers to the host once, not per method and range."""
    edges = torch.linspace(0, block - 1, POSITION_BUCKETS + 1).round().long().tolist()
    buckets = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    rows = [((positions >= a) & (positions < b)).nonzero().squeeze(1) for a, b in buckets]
    out = {"positions": [f"{a + 1}-{b}" for a, b in buckets], "n": [len(r) for r in rows], "methods": {}}
    if not faithfulness:
        return out
    names = list(faithfulness)
    rho, deletion = torch.stack([faithfulness[m] for m in names]), torch.stack([d1[m].double() for m in names])
    per_range = [(rho[:, r].nanmean(1), (~rho[:, r].isnan()).sum(1), deletion[:, r].mean(1)) for r in rows]
    means, defined, d1_means = (torch.stack(column, dim=1).tolist() for column in zip(*per_range))  # (M, ranges)
    for k, m in enumerate(names):
        out["methods"][m] = {
            "faithfulness": [v if n else None for v, n in zip(means[k], out["n"])],
            "defined": defined[k],  # positions whose ρ is defined
            "deletion@1": [v if n else None for v, n in zip(d1_means[k], out["n"])],
        }
    return out


@torch.no_grad()
def token_row_costs(model: LayaLM, data: TokenData, device: str) -> RowCosts:
    """``budget.RowCosts`` of one position: its L states, the head's module outputs on it (its V logits among
    them), and its share of one block's module outputs and tap activations in the model."""
    backbone, x = model.lm.backbone, data.blocks[0][:1].to(device)
    positions = x.shape[2] - 1
    with _OutputBytes(backbone.model) as b:
        hs = backbone.activations(x)
    row = torch.stack([h[:, 0] for h in hs], dim=1).float()
    with _OutputBytes(model.laya) as h:
        model.laya(row)
    return RowCosts(
        features=row.numel() * 4,
        # + p_ŷ's softmax over the vocabulary and, in a backward pass, the gradients of it and of the logits: three
        # V-wide rows no module outputs (the logits themselves are the readout's output, counted above)
        head=h.total + 3 * 4 * model.lm.readout.vocabulary,
        backbone=b.total // positions,
        taps=sum(t.numel() * t.element_size() for t in hs) // positions,
    )


TOKENS_AUDITED = 2000  # a language model's default --samples: held-out positions (its held-out text may be huge)


def token_audit_job(
    model: LayaLM,
    methods: Sequence[str],
    settings: AuditSettings,
    scope: str,
    dataset: str | None,
    samples: int,
    memory: MemoryRequest | None = None,
    data: TokenData | None = None,
) -> AuditResult:
    """``laya audit`` on a ``--task lm`` checkpoint: ``samples`` held-out positions, at head scope, network scope
    or both; the result has the classifier audit's shape (tables, JSON, gates) and ``by_position``. ``memory``:
    the batches planned within its budget (``budget.plan_from_costs``), the budget and the peak recorded. ``data``:
    the positions already read (``token_data``; ``laya diff`` reads both models' to check they are the same)."""
    removal = settings.removal
    if scope != "head" and removal.name not in ("mean", "bypass"):
        raise LayaError(f"a language model's network scope bypasses each layer: --ablation {removal.name} "
                        "applies to classifiers (use the default, or bypass)")  # fmt: skip
    check_removal(model.laya, removal.head)  # at head scope bypass is mean, as at every scope (Removal.head)
    data = data or token_data(model, dataset, samples, 8)
    plan = None
    if memory is not None:
        reset_peak_memory(settings.device)
        costs = token_row_costs(model, data, settings.device)
        budget = memory_budget(memory.max_memory, settings.device)
        plan = plan_from_costs(costs, len(data.features), False, methods, settings, scope, budget, memory.given)
        settings = plan.settings
    result = _scoped(model, data, methods, settings, scope)
    if plan is not None:
        result.notes += plan.notes
        result.memory = plan.to_dict(peak_memory_mb(settings.device), peak_measure(settings.device))
    return result


def audit_lm_checkpoint(
    path, ckpt: dict, methods: Sequence[str], settings: AuditSettings, scope: str, data, load, check_planned, run=None
) -> AuditResult:
    """``laya audit``'s job on a language model's checkpoint (``ckpt``, read from ``path``; the task chose it:
    ``exporting.tasks``): ``data.samples`` held-out positions (``TOKENS_AUDITED`` by default), the model placed by
    ``load.device_map``; ``run`` (``RunSettings``): a language model's audit reads its memory."""
    model = lm_from_checkpoint(ckpt, load.device_map).to(settings.device)
    check_planned(data.samples, SimpleNamespace(head_kind="laya", layer_names=ckpt["layers"]))
    samples = data.samples or TOKENS_AUDITED
    result = token_audit_job(model, methods, settings, scope, data.dataset, samples, run and run.memory)
    result.settings.update({"model": str(path), "samples": data.samples})
    return result


def _scoped(model: LayaLM, data: TokenData, methods, settings: AuditSettings, scope: str) -> AuditResult:
    block = int(model.ckpt["dataset"]["block_size"])
    positions = data.positions
    audited = audit_model(model)
    if scope == "network":
        plan = AuditPlan.prepare(audited, methods, settings, len(data.features), model.lm.num_layers)
        result = AuditResult(settings=plan.settings_dict(data), n_samples=len(data.features), accuracy=float("nan"),
                             layers=list(model.ckpt["layers"]), methods={}, notes=plan.notes(), groups=())  # fmt: skip
    else:
        result = run_audit(audited, data.features, methods, settings)
    result.settings.update({"dataset": data.dataset, "task": "lm", "scope": scope, "tokens": len(data.features)})
    result.by_position = {}
    if scope != "network":
        s = result.samples
        result.by_position["head"] = by_position(positions, s["faithfulness"], s["deletion@1"], block)
    if scope != "head":
        result.network = token_network(model, data, methods, settings)
        net = result.network.samples
        result.by_position["network"] = by_position(positions, net["faithfulness"], net["deletion@1"], block)
        if scope == "network":
            result.accuracy = net["accuracy"]
            record_collapse(result, net["alpha"], model)  # α's summary and the uniform-α flag, as at head scope
            result.chance = chance_rate(net["label"].tolist(), len(audited.classes))  # and the model-at-chance one
    return mark_references(result)
