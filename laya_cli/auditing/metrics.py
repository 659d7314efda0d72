"""Metrics as pure functions of tensors: accuracy, macro-F1, and the faithfulness metrics
of docs/metrics.md (leave-one-layer-out effects, per-sample Spearman faithfulness, Deletion@1),
and the deeper ones (deletion curve and AOPC, sufficiency and the insertion curve, IG
completeness, the model-randomisation sanity check)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..model.heads import MASKABLE_HEADS
from ..runtime.errors import LayaError

# Below this many rows a CPU's matrix kernels can round a product differently from the same rows inside a larger
# one (seen: 1, 2, 3, 5, 6, 7, 9, 10, 11 rows, docs/results/dispatch.md): passes of fewer rows are not stacked, so
# the stacked passes give the loop's numbers bit for bit.
STACK_MIN_ROWS = 12


def accuracy(pred: Tensor, target: Tensor) -> float:
    return (pred == target).float().mean().item() if len(target) else float("nan")


def macro_f1(pred: Tensor, target: Tensor, num_classes: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in target or pred."""
    f1s = []
    for c in range(num_classes):
        tp = ((pred == c) & (target == c)).sum().item()
        fp = ((pred == c) & (target != c)).sum().item()
        fn = ((pred != c) & (target == c)).sum().item()
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s) if f1s else float("nan")


# --------------------------------------------------------------------------- faithfulness (docs/metrics.md)


def target_probability(logits: Tensor, target: Tensor) -> Tensor:
    """p_ŷ: the softmax probability of the target class, (B,): in float32 (float64 logits stay float64)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return torch.softmax(logits, dim=-1).gather(1, target.view(-1, 1)).squeeze(1)


def check_removal(head: nn.Module, removal: str) -> None:
    """Raise a LayaError unless the head-scope ``removal`` (``Removal.head``) applies to this head: mask needs a head
    whose layer weights it can drop (the head's ``maskable``). Checked once, before any work."""
    if removal == "mask" and not getattr(head, "maskable", False):
        raise LayaError(
            f"--ablation mask needs a head with layer weights ({' or '.join(MASKABLE_HEADS)}); "
            f"use --ablation mean or zero for this head"
        )


@torch.no_grad()
def lolo_effects(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
) -> Tensor:
    """Leave-one-layer-out effects Δ_i(x) = p_ŷ(x) − p_ŷ(x with layer i removed): (B, L).

    L+1 head passes, run as one pass of (L + 1)·B rows (``removal_rows``; ``mask``: the intact pass, then one of
    L·B rows). ``mean``: r_i := r̄_i (``reference``, the training mean); ``zero``:
    r_i := 0; ``mask``: α_i := 0 and the other weights renormalised (heads with layer
    weights only: heads with ``maskable``). ``ablation``: the head scope's removal, checked (``check_removal``).
    """
    feats = list(feats)
    n_layers, batch = len(feats), len(target)
    if ablation != "mask" and hasattr(head, "removed_logits"):  # a head that reuses its other layers' work
        if ablation == "mean" and reference is None:
            raise LayaError("--ablation mean needs the reference r̄ (mean training features) from the checkpoint")
        fills = [torch.zeros_like(r[0]) if ablation == "zero" else reference[i].to(r) for i, r in enumerate(feats)]
        groups = head.removed_logits(feats, fills, stack=batch >= STACK_MIN_ROWS)
        p = torch.cat([target_probability(logits, _tiled(target, len(logits) // batch)) for logits in groups])
        p = p.view(n_layers + 1, batch)
        return p[0].unsqueeze(1) - p[1:].T
    if ablation == "mask":  # the intact pass has no mask (a mask of ones renormalises α: not the same rounding)
        base = target_probability(head(feats).logits, target)
        keep = 1 - torch.eye(n_layers, device=base.device)  # [i] drops layer i
        masks = keep.unsqueeze(1).expand(n_layers, batch, n_layers).reshape(-1, n_layers)
        tiled = [f.unsqueeze(0).expand(n_layers, *f.shape).reshape(-1, *f.shape[1:]) for f in feats]
        removed = target_probability(head(tiled, alpha_mask=masks).logits, target.repeat(n_layers))
        return base.unsqueeze(1) - removed.view(n_layers, batch).T
    if ablation == "mean" and reference is None:
        raise LayaError("--ablation mean needs the reference r̄ (mean training features) from the checkpoint")
    if reference is not None and len(reference) != n_layers:
        raise LayaError(f"the reference has {len(reference)} layers but the features have {n_layers}")
    fills = [torch.zeros_like(r[0]) if ablation == "zero" else reference[i].to(r) for i, r in enumerate(feats)]
    p = target_probability(head(removal_rows(feats, fills)).logits, target.repeat(n_layers + 1))
    p = p.view(n_layers + 1, batch)
    return p[0].unsqueeze(1) - p[1:].T


def _tiled(t: Tensor, times: int) -> Tensor:
    return t if times == 1 else t.repeat(times)


def removal_rows(feats: Sequence[Tensor], fills: Sequence[Tensor]) -> list[Tensor]:
    """The L + 1 head passes of the leave-one-layer-out effects as one pass of (L + 1)·B rows: each r_i (B, …) tiled
    L + 1 times, block 0 intact, block j + 1 with r_j replaced by ``fills[j]`` (broadcast over the rows). A head
    reads each row alone, so every row's output is the one its own pass gives (the same kernels over more rows;
    on the CPU bit for bit), in a few large kernels instead of L + 1 passes of small ones."""
    out = []
    for i, (r, fill) in enumerate(zip(feats, fills)):
        tiled = r.unsqueeze(0).repeat(len(feats) + 1, *[1] * r.dim())
        tiled[i + 1] = fill
        out.append(tiled.flatten(0, 1))
    return out


def tie_levels(values: Tensor, tol: float = 0.0) -> Tensor:
    """``values`` (…, L) with each row's near-equal entries snapped to one level: the tie groups of docs/metrics.md.

    Per row, the values are sorted and neighbours whose gap is at most ``tol`` are chained into one group (single
    linkage): a group is a maximal run of the sorted row without a gap above ``tol``. Every value is replaced by its
    group's smallest value, so exact comparisons on the result (ranks, argmax, "all equal") see the groups as
    ties. The groups depend only on the row's set of values, never on their order or on a grid's position (rounding
    to a grid would split two values 1e-12 apart that straddle a grid line). A group can span more than ``tol``
    (a chain of small gaps): values in it are not told apart by rounding-proof evidence either. ``tol`` = 0 keeps
    exact ties only (the values unchanged). NaN entries stay NaN and join no group.
    """
    if values.shape[-1] < 2 or tol <= 0:
        return values
    ordered, order = values.sort(dim=-1)  # NaN last
    gap = ordered.diff(dim=-1).double()
    split = ~(gap <= tol)  # a gap above tol (or a NaN) starts a new group
    starts = torch.cat([torch.ones_like(split[..., :1]), split], dim=-1)
    position = torch.arange(values.shape[-1], device=values.device).expand_as(starts)
    first = torch.where(starts, position, torch.zeros_like(position)).cummax(dim=-1).values
    snapped = torch.empty_like(values).scatter_(-1, order, ordered.gather(-1, first))
    return torch.where(values.isnan(), values, snapped)


def average_ranks(x: Tensor) -> Tensor:
    """1-based ranks along the last dim, ties given their average rank (as scipy's rankdata)."""
    return ranks_and_ties(x)[0]


def ranks_and_ties(x: Tensor) -> tuple[Tensor, Tensor]:
    """(``average_ranks(x)``, each entry's tie group size along the last dim, itself included): one comparison of the
    rows gives both (the group sizes say whether a row of effects is degenerate, ``varies_in_at_most_one``)."""
    below = (x.unsqueeze(-2) < x.unsqueeze(-1)).sum(-1)  # [b, i] = #{j : x_j < x_i}
    equal = (x.unsqueeze(-2) == x.unsqueeze(-1)).sum(-1)  # includes i itself
    return below.double() + (equal.double() + 1) / 2, equal


def spearman_rows(a: Tensor, b: Tensor, tol: float = 0.0) -> Tensor:
    """Spearman ρ between matching rows of scores a and effects b (B, L) -> (B,), in float64.

    Average ranks for ties; NaN where either row is constant (or holds a NaN), like
    ``scipy.stats.spearmanr``. ``tol`` (``--tie-tol``): values of a row closer than this noise floor are
    ties (``tie_levels``, in both rows); 0: exact ties only.
    """
    a, b = a.double(), b.double()
    ra, rb = average_ranks(tie_levels(a, tol)), average_ranks(tie_levels(b, tol))
    return rank_correlation(ra, rb, a.isnan().any(-1) | b.isnan().any(-1))


def rank_correlation(ra: Tensor, rb: Tensor, has_nan: Tensor) -> Tensor:
    """Pearson's r of two rows' ranks (``average_ranks``; ``rb`` may broadcast against ``ra``), NaN where either row
    is constant or ``has_nan``: ``spearman_rows`` from ranks already made (each row's numbers its own)."""
    ra = ra - ra.mean(-1, keepdim=True)
    rb = rb - rb.mean(-1, keepdim=True)
    den = (ra.square().sum(-1) * rb.square().sum(-1)).sqrt()
    rho = (ra * rb).sum(-1) / den
    return rho.clamp(-1, 1).masked_fill((den == 0) | has_nan, float("nan"))


RANK_MARGIN = 0.2  # a sample's layer effects all within 20 % of its largest |Δ| of each other: near-equal
UNDETERMINED_FROM = 0.5  # a scope whose samples are near-equal more often than this: its ranking is undetermined


def near_equal_effects(delta: Tensor, margin: float = RANK_MARGIN) -> Tensor:
    """(B,) True where a sample's effects Δ (B, L) all lie within ``margin`` × its largest |Δ_i| of each other
    (max Δ − min Δ < margin · max |Δ|): removing any layer costs about the same (a frozen pretrained CNN patched at
    any stage loses 0.39–0.44 of p), so a ranking of its layers ranks near-equal effects. With L < 3 no sample is
    flagged (as ``degenerate_effects``)."""
    if delta.shape[-1] < 3:
        return torch.zeros(delta.shape[:-1], dtype=torch.bool, device=delta.device)
    spread = delta.amax(-1) - delta.amin(-1)
    return spread <= margin * delta.abs().amax(-1)


def ranking_block(near_equal: Tensor, margin: float = RANK_MARGIN) -> dict:
    """What the audit says of a scope's layer ranking: ``determined`` unless more than ``UNDETERMINED_FROM`` of the
    samples have near-equal effects (``near_equal_effects``); then faithfulness, a ranking of near-equal effects, is
    not scored there (the tables say "undetermined"; the JSON keeps the numbers beside this block)."""
    n, k = int(near_equal.numel()), int(near_equal.sum())
    return {"determined": not (n and k / n > UNDETERMINED_FROM), "near_equal": k, "samples": n, "margin": margin}


def undetermined_note(block: dict, scope: str) -> str | None:
    """The audit's note for a scope whose ranking is undetermined (``ranking_block``); None where it is determined."""
    if block["determined"]:
        return None
    return (
        f"{scope} scope: removing any layer costs about the same (the effects lie within {100 * block['margin']:.0f} "
        f"% of each other on {block['near_equal']:,} of {block['samples']:,} samples), so the layers' ranking is "
        "undetermined there: faithfulness is not scored at this scope (the tables say 'undetermined'; Deletion@1 "
        "still is)"
    )


def degenerate_effects(delta: Tensor, tol: float = 0.0) -> Tensor:
    """(B,) True where a sample's LOLO effects Δ (B, L) vary in at most one layer (L ≥ 3).

    Then every layer but (at most) one has the same effect, typically Δ_i = 0 because the head does not
    read layer i (a ``last`` head reads only r_L), or effects within float rounding of each other: "the
    same" is one tie group of ``tie_levels(Δ, tol)``. A rank correlation over layers then only says where
    a method put that one layer, which any method that gives the unread layers the same score as each other
    gets right by construction: faithfulness calls such a sample undefined (docs/metrics.md). With L < 3, ρ
    is ±1 or undefined anyway (the audit warns separately), so no sample is flagged.
    """
    delta = tie_levels(delta, tol)
    return varies_in_at_most_one((delta.unsqueeze(-1) == delta.unsqueeze(-2)).sum(-1))


def varies_in_at_most_one(same: Tensor) -> Tensor:
    """``degenerate_effects`` from the rows' tie group sizes (``same`` (…, L): [b, i] = #{j : Δ_j ~ Δ_i}, as
    ``ranks_and_ties`` gives them): True where one group holds all layers but at most one (never with L < 3)."""
    n_layers = same.shape[-1]
    if n_layers < 3:
        return torch.zeros(same.shape[:-1], dtype=torch.bool, device=same.device)
    return same.max(-1).values >= n_layers - 1


def tie_undefined(rho: Tensor, rho_exact: Tensor, delta: Tensor, tol: float) -> Tensor:
    """(B,) True where faithfulness is undefined only because of the tie tolerance (the ``ties`` block of the audit).

    ``rho``: ``spearman_rows(a, Δ, tol)``; ``rho_exact``: the same at tol 0. Undefined at ``tol`` (ρ NaN, or Δ
    degenerate within ``tol``) but defined with exact ties (ρ a number and Δ not exactly degenerate): the sample's
    ranks differ only by rounding noise. The other undefined samples are undefined for other reasons (a constant
    score vector, a NaN, Δ exactly equal in all layers but one)."""
    undefined = rho.isnan() | degenerate_effects(delta, tol)
    exact = rho_exact.isnan() | degenerate_effects(delta)
    return undefined & ~exact


def stacked_scores(scores: Sequence[Tensor], delta: Tensor) -> Tensor:
    """The M methods' (B, L) scores as one (M, B, L) float64 tensor for ``faithfulness_rows`` (exact: every float
    widens to float64); M may be 0 (Δ's own rows are still wanted)."""
    if not scores:
        return delta.new_zeros((0, *delta.shape), dtype=torch.float64)
    return torch.stack([a.double() for a in scores])


class Faithfulness(NamedTuple):
    """One batch's faithfulness numbers (``faithfulness_rows``): per method (M, B), then what Δ alone gives (B,)."""

    rho: Tensor  # Spearman ρ of each method's scores against Δ at the tie tolerance
    tie_undefined: Tensor  # undefined only because of the tie tolerance (``tie_undefined``)
    d1: Tensor  # Deletion@1
    degenerate: Tensor  # Δ varies in at most one layer at the tie tolerance (``degenerate_effects(Δ, tol)``)
    exactly_degenerate: Tensor  # the same with exact ties (``degenerate_effects(Δ)``)
    oracle: Tensor  # Deletion@1's best: max_i Δ_i
    random: Tensor  # Deletion@1's random expectation: mean_i Δ_i


def faithfulness_rows(scores: Tensor, delta: Tensor, tol: float = 0.0) -> Faithfulness:
    """Every method's per-sample faithfulness at once, and what Δ's rows alone say (``Faithfulness``).

    ``scores``: the M methods' (B, L) scores stacked, (M, B, L), M ≥ 0; ``delta``: the batch's effects Δ (B, L). The
    same numbers as ``spearman_rows(a, Δ, tol)``, ``tie_undefined``, ``deletion_at_1(a, Δ, tol)`` method by method and
    ``degenerate_effects(Δ, tol)``, ``degenerate_effects(Δ)``: every row is computed alone, so the methods' rows and
    Δ's are stacked and go through one ``tie_levels``, one ``ranks_and_ties`` (at the tolerance and exact) and one
    ``rank_correlation``, a few kernels for the whole batch instead of a few per method and per question."""
    a, d = scores.double(), delta.double()
    m = len(a)
    tied = tie_levels(torch.cat([a, d.unsqueeze(0)]), tol)  # [a's levels, Δ's levels]
    has_nan = a.isnan().any(-1) | d.isnan().any(-1)
    if tol > 0:  # the ranks at the tolerance and the exact ones in one call: (2, M + 1, B, L)
        ranks, same = (t.view(2, m + 1, *d.shape) for t in ranks_and_ties(torch.cat([tied, a, d.unsqueeze(0)])))
        rho, exact = rank_correlation(ranks[:, :m], ranks[:, m:], has_nan)
        same_at_tol, same_exact = same[0, m], same[1, m]
    else:
        ranks, same = ranks_and_ties(tied)
        rho = exact = rank_correlation(ranks[:m], ranks[m:], has_nan)
        same_at_tol = same_exact = same[m]
    exactly_degenerate = varies_in_at_most_one(same_exact)
    # Δ's groups at the tolerance are those of its own precision (float32 gaps compared with tol, as the audit has
    # always flagged them), ρ's those of float64: one call more where the two can differ
    if tol <= 0 or delta.dtype == d.dtype:
        degenerate = varies_in_at_most_one(same_at_tol)
    else:
        degenerate = degenerate_effects(delta, tol)
    undefined = (rho.isnan() | degenerate) & ~(exact.isnan() | exactly_degenerate)  # as tie_undefined
    d1 = top_group_mean(tied[:m], d)
    return Faithfulness(rho, undefined, d1, degenerate, exactly_degenerate, d.max(-1).values, d.mean(-1))


def chance_level(labels: Tensor, num_classes: int) -> float:
    """The accuracy a constant guess reaches on these labels: the larger of 1/C and the share of the
    most frequent class (a model at chance level has learnt nothing worth attributing)."""
    if len(labels) == 0:
        return float("nan")
    majority = torch.bincount(labels.long(), minlength=num_classes).max().item() / len(labels)
    return max(1.0 / num_classes, majority)


def near_chance(accuracy_: float, chance: float, n: int, z: float = 2.0) -> bool:
    """Whether ``accuracy_`` on ``n`` samples is within noise of ``chance``: at most ``z`` binomial
    standard errors, sqrt(p(1 − p)/n) at p = chance, above it (or below it)."""
    if n <= 0 or accuracy_ != accuracy_ or chance != chance:
        return False
    return accuracy_ <= chance + z * (chance * (1 - chance) / n) ** 0.5


def deletion_at_1(a: Tensor, delta: Tensor, tol: float = 0.0) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row (Deletion@1, oracle, random expectation), each (B,).

    Deletion@1 = Δ at argmax_i a_i; where several layers share the top score it is the
    mean Δ over them (the expectation under random tie-breaking). Oracle = max_i Δ_i,
    random = mean_i Δ_i. ``tol``: scores within ``tol`` of each other are tied (``tie_levels``),
    so the top is the top tie group.
    """
    a, delta = a.double(), delta.double()
    return top_group_mean(tie_levels(a, tol), delta), delta.max(-1).values, delta.mean(-1)


def top_group_mean(a_tied: Tensor, delta: Tensor) -> Tensor:
    """Deletion@1 from scores already snapped to their tie levels (``tie_levels``): the mean Δ (float64) over the
    layers of the top score (``delta`` may broadcast against ``a_tied``)."""
    top = a_tied == a_tied.max(-1, keepdim=True).values
    return (delta * top).sum(-1) / top.sum(-1)


def normalised_deletion(d1: float, oracle: float, random: float) -> float:
    """(D@1 − random) / (oracle − random), on means over samples; NaN when oracle = random.

    Computed on the means (not per sample) so that samples where every layer has the same
    effect (oracle = random) do not divide by zero, and so that it reads as the share of the
    achievable gain over random that the method realises on this data set.
    """
    gap = oracle - random
    return (d1 - random) / gap if abs(gap) > 1e-12 else float("nan")


def nan_summary(values: Tensor) -> tuple[float, float, int, int]:
    """(mean, std, n defined, n undefined) over the non-NaN entries; std with ddof = 0."""
    values = values.double()
    ok = ~values.isnan()
    n, undefined = int(ok.sum()), int((~ok).sum())
    if n == 0:
        return float("nan"), float("nan"), 0, undefined
    v = values[ok]
    return v.mean().item(), v.std(correction=0).item(), n, undefined


# Below this many samples a float64 mean or std is one serial pass on the CPU whatever the threads (ATen's grain size
# of its parallel reductions): then a row of a table reduces exactly as the 1-D tensor does (``row_summaries``).
SERIAL_BELOW = 32768


def row_means(table: Tensor) -> list[float]:
    """The mean of each row of an (M, N) float64 table on the CPU: ``row.mean().item()`` row by row, the same bits (a
    row of a contiguous table sums as the 1-D tensor does, below ``SERIAL_BELOW``), in one kernel instead of M."""
    if table.shape[-1] == 0:
        return [float("nan")] * len(table)
    if table.shape[-1] >= SERIAL_BELOW or table.device.type != "cpu":
        return [row.mean().item() for row in table]
    return table.contiguous().mean(-1).tolist()


def nan_summaries(table: Tensor) -> list[tuple[float, float, int, int]]:
    """``nan_summary`` of each row of an (M, N) table, the same numbers bit for bit, in one set of kernels where
    every row is defined on the same samples (the usual case: ρ is undefined where Δ is degenerate, whatever the
    method), else row by row. The std as ATen computes a 1-D tensor's (the mean, then the squared deviations added
    left to right: a cumulative sum's last column), below ``SERIAL_BELOW`` defined samples."""
    table = table.double()
    ok = ~table.isnan()
    shared = ok[0] if len(table) else ok
    n = int(shared.sum()) if len(table) else 0
    if len(table) < 2 or not 0 < n < SERIAL_BELOW or table.device.type != "cpu" or not bool((ok == shared).all()):
        return [nan_summary(row) for row in table]
    values = table[:, shared]
    mean = values.mean(-1)
    deviation = values - mean.unsqueeze(-1)
    squares = (deviation * deviation).cumsum(-1)[:, -1].tolist()  # (a tensor over a number multiplies by 1/n)
    undefined = table.shape[-1] - n
    return [(m, math.sqrt(s / n), n, undefined) for m, s in zip(mean.tolist(), squares)]


# --------------------------------------------------------------------------- deeper metrics (docs/metrics.md)

# Flags (docs/metrics.md): IG whose attributions miss more than 5 % of the effect they explain
# (raise --steps), and a method whose ranking keeps ρ > 0.5 with itself on a re-initialised head.
COMPLETENESS_FLAG = 0.95  # completeness below this is flagged
RANDOMISATION_FLAG = 0.5  # randomisation (1 − mean ρ) below this is flagged


def _check_reference(n_layers: int, reference, ablation: str) -> None:
    if ablation == "mean" and reference is None:
        raise LayaError("--ablation mean needs the reference r̄ (mean training features) from the checkpoint")
    if ablation != "mask" and reference is not None and len(reference) != n_layers:
        raise LayaError(f"the reference has {len(reference)} layers but the features have {n_layers}")


@torch.no_grad()
def ablated_probability(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    removed: Tensor,
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
) -> Tensor:
    """p_ŷ with the layers where ``removed`` is true removed, per row.

    ``removed``: (B, L) booleans -> (B,); or (K, B, L), K variants of the batch evaluated in one
    head pass of K·B rows -> (K, B). The removal is the LOLO one (``mean``: r_i := r̄_i,
    ``zero``: r_i := 0, ``mask``: α_i := 0 and the rest renormalised; all layers masked leaves
    α = 0, so the head predicts from its bias).
    """
    feats = list(feats)
    _check_reference(len(feats), reference, ablation)
    single = removed.dim() == 2
    removed = removed.to(feats[0].device, torch.bool)
    if single:
        removed = removed.unsqueeze(0)
    k, batch = removed.shape[0], removed.shape[1]
    flat = removed.reshape(k * batch, -1)
    tiled = [f.unsqueeze(0).expand(k, *f.shape).reshape(k * batch, *f.shape[1:]) for f in feats]
    target = target.repeat(k)
    if ablation == "mask":
        p = target_probability(head(tiled, alpha_mask=(~flat).float()).logits, target)
    else:
        mixed = []
        for i, r in enumerate(tiled):
            fill = torch.zeros_like(r) if ablation == "zero" else reference[i].to(r).expand_as(r)
            mixed.append(torch.where(flat[:, i].view(-1, *[1] * (r.dim() - 1)), fill, r))
        p = target_probability(head(mixed).logits, target)
    p = p.view(k, batch)
    return p[0] if single else p


def rank_layers(scores: Tensor, tie_keys: Tensor | None = None) -> Tensor:
    """(B, L) layer indices, the highest score first.

    Ties are broken by ``tie_keys`` (B, L), e.g. seeded uniform draws: among tied layers the one
    with the smaller key comes first (a random order when the keys are random). Without keys,
    ties keep the layer order.
    """
    if tie_keys is None:
        return torch.sort(scores, dim=-1, descending=True, stable=True).indices
    shuffle = tie_keys.argsort(dim=-1)
    order = torch.sort(scores.gather(-1, shuffle), dim=-1, descending=True, stable=True).indices
    return shuffle.gather(-1, order)


def top_k_masks(order: Tensor) -> Tensor:
    """(L, B, L) booleans: [k − 1, b] marks the top-k layers of row b of ``order`` (B, L), k = 1 … L."""
    n_layers = order.shape[-1]
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(n_layers, device=order.device).expand_as(order))  # rank of each layer
    k = torch.arange(n_layers, device=order.device).view(-1, 1, 1)
    return rank.unsqueeze(0) <= k


@torch.no_grad()
def deletion_curve(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    order: Tensor,
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
    base: Tensor | None = None,
) -> Tensor:
    """D_k(x) = p_ŷ(x) − p_ŷ(x with its top-k layers removed), k = 1 … L: (B, L).

    ``order``: (B, L) layer indices, most important first (``rank_layers``); the removal is
    cumulative and the same as LOLO's. One head pass of L·B rows. ``base``: p_ŷ(x) if already
    computed.
    """
    if base is None:
        base = target_probability(head(list(feats)).logits, target)
    return base.unsqueeze(1) - ablated_probability(head, feats, target, top_k_masks(order), reference, ablation).T


@torch.no_grad()
def insertion_curve(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    order: Tensor,
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
) -> Tensor:
    """I_k(x) = p_ŷ(x with only its top-k layers kept, the others removed), k = 1 … L: (B, L).

    One head pass of L·B rows; I_L(x) = p_ŷ(x) up to rounding (nothing removed).
    """
    return ablated_probability(head, feats, target, ~top_k_masks(order), reference, ablation).T


@torch.no_grad()
def curves_sharing_passes(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    order: Tensor,
    known: dict[str, Tensor],
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
) -> dict[str, Tensor]:
    """``deletion_curve`` and ``insertion_curve`` (B, L) of one ranking, reusing what an audit already has.

    ``known``: ``base`` p_ŷ(x) and ``delta`` (LOLO's Δ, B × L) give D_1 = Δ at the top layer; for the
    insertion curve (asked for by ``keep`` in ``known``: ``keep_only_probability``) I_1 = K at the top layer
    and I_L = p_ŷ(x). The other points, D_2 … D_L and I_2 … I_{L−1}, take one head pass of (2L − 3)·B rows
    instead of 2L·B. Equal to the two functions up to float rounding (their passes batch other rows).
    """
    base, top = known["base"], order[:, :1]
    masks = top_k_masks(order)  # (L, B, L): [k − 1] = the top-k layers
    insertion = "keep" in known
    removed = torch.cat([masks[1:], ~masks[1:-1]]) if insertion else masks[1:]
    p = (
        ablated_probability(head, feats, target, removed, reference, ablation).T
        if len(removed)
        else base.new_zeros(len(base), 0)
    )
    n_del = len(masks) - 1
    out = {"deletion_curve": torch.cat([known["delta"].to(base).gather(1, top), base.unsqueeze(1) - p[:, :n_del]], 1)}
    if insertion:
        first = known["keep"].to(base).gather(1, top)
        out["insertion_curve"] = torch.cat([first, p[:, n_del:], base.unsqueeze(1)], 1)[:, : order.shape[1]]
    return out


@torch.no_grad()
def keep_only_probability(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    reference: Sequence[Tensor] | None = None,
    ablation: str = "mean",
) -> Tensor:
    """K_i(x) = p_ŷ(x with only layer i kept, every other layer removed): (B, L). One pass of L·B rows.

    Sufficiency@1 of a method is K at its top layer (``deletion_at_1(a, K)``: ties averaged),
    with oracle max_i K_i and random expectation mean_i K_i.
    """
    n_layers, batch = len(feats), len(target)
    removed = ~torch.eye(n_layers, dtype=torch.bool).unsqueeze(1).expand(n_layers, batch, n_layers)
    return ablated_probability(head, feats, target, removed, reference, ablation).T


def aopc(curve: Tensor) -> Tensor:
    """Area over the perturbation curve per row (Samek et al., 2017): Σ_{k=0}^{L} D_k / (L + 1), D_0 = 0.

    ``curve``: the (B, L) deletion curve D_1 … D_L. In float64; NaN where a row holds a NaN.
    """
    return curve.double().sum(-1) / (curve.shape[-1] + 1)


def completeness(abs_error: Tensor, abs_effect: Tensor) -> tuple[float, float, float]:
    """(completeness, mean error, mean effect) of Integrated Gradients over samples.

    ``abs_error``: |Σ_i ig_i(x) − (p_ŷ(x) − p_ŷ(r̄))| per sample (Captum's convergence delta,
    in absolute value); ``abs_effect``: |p_ŷ(x) − p_ŷ(r̄)|. completeness = 1 − mean error / mean
    effect (1 = the attributions add up to the effect exactly), a ratio of means so that samples
    where x and r̄ give the same p_ŷ do not divide by zero; NaN when the mean effect is 0.
    """
    if not len(abs_error):
        return float("nan"), float("nan"), float("nan")
    err, eff = abs_error.double().mean().item(), abs_effect.double().mean().item()
    return (1 - err / eff if eff > 1e-12 else float("nan")), err, eff
