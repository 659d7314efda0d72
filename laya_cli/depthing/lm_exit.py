"""Early exit per token (``laya depth`` on a ``--task lm`` checkpoint): how many layers each next token needs.

At depth k the LAYA head sees layers 1..k and the training mean r̄_i in place of every layer above k (those are
not computed yet); its α over that input, ``alpha_mass`` = Σ_{i≤k} α_i, is the share of attention on the layers it
has, and its prediction is α masked above k and renormalised — the same definitions as for classifiers
(docs/depth.md). Policies stop a token at the first depth whose score is above a threshold
(``early_exit.exit_depth``):

- ``alpha_mass``   LAYA's α mass on the layers computed so far; the prediction: LAYA truncated at k;
- ``p_max``        CALM-style confidence: the largest next-token probability of LAYA truncated at k;
- ``tuned_p_max``  CALM-style on the tuned lens: its largest probability at layer k; the prediction: the tuned lens
                   at k (at the last layer, the model itself).

The oracle stops each token at the first depth whose truncated LAYA prediction (argmax) is the full head's.
Layer computations saved = 1 − mean exit depth / L. Cross-entropy is in bits per token; its increase is given
relative to the policy's own prediction at full depth (``ce_increase``) and relative to the model's own prediction
on the same positions (``ce_over_model``). The goals read the second: a head that gave up cross-entropy at full
depth (an aligned one) cannot spend it again on the exit. The states a token skips are not recomputed for the
tokens after it (their attention reads the full model's states), so these are upper bounds on what an exit in
generation keeps — the same caveat as CALM's state propagation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ..model.lm_heads import BITS, LayaLM, chunks, cross_entropy, truncated_states
from ..runtime.errors import LayaError
from .analysis import DepthResult
from .early_exit import exit_depth, minimal_sufficient_depth, take_depth

POLICIES = ("alpha_mass", "p_max", "tuned_p_max")


@dataclass
class ExitTables:
    """(N, L) per token and depth k+1: each policy's prediction's cross-entropy (nats) and argmax, its score."""

    ce: dict[str, Tensor]
    argmax: Tensor  # LAYA truncated at k (the oracle's and both LAYA policies' prediction)
    scores: dict[str, Tensor]
    model_ce: Tensor  # (N,) the model's own cross-entropy (nats)
    alpha: Tensor | None = None  # (N, L) the full head's α (the uniform-α flag)
    model_hit: Tensor | None = None  # (N,) whether the model's own top token is the next one (the chance flag)
    targets: Tensor | None = None  # (N,) the next tokens


@torch.no_grad()
def truncated_laya(model: LayaLM, hs: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(logits, α mass) of the LAYA head at depth k: layers above k replaced by r̄, α masked above k."""
    depths = torch.full((len(hs),), k, device=hs.device)
    seen, _ = truncated_states(hs, torch.stack(list(model.reference)).to(hs.device), depths)
    z = model.laya.embed(seen)
    alpha = model.laya.attention(z)
    mass = alpha[:, :k].sum(-1)
    kept = alpha[:, :k] / mass.unsqueeze(-1).clamp_min(1e-12)
    return model.laya.readout((kept.unsqueeze(-1) * z[:, :k]).sum(1)), mass


@torch.no_grad()
def exit_tables(model: LayaLM, token_batches: Iterator[tuple[Tensor, Tensor]], max_tokens: int) -> ExitTables:
    """The tables on up to ``max_tokens`` held-out positions (``token_batches``: (hs, targets) per batch)."""
    keys = ("laya_ce", "tuned_ce", "argmax", *POLICIES, "model_ce", "alpha", "model_hit", "targets")
    rows: dict[str, list[Tensor]] = {k: [] for k in keys}
    n = 0
    for hs, targets in token_batches:
        for part in chunks(len(targets), model.laya.readout.vocabulary):
            _rows_of(model, hs[part], targets[part], rows)
        n += len(targets)
        if n >= max_tokens:
            break
    if n == 0:
        raise LayaError("the held-out text is shorter than one block: no position to measure")
    cat = {k: torch.cat(v)[:max_tokens] for k, v in rows.items()}
    ce = {"alpha_mass": cat["laya_ce"], "p_max": cat["laya_ce"], "tuned_p_max": cat["tuned_ce"]}
    return ExitTables(ce, cat["argmax"], {p: cat[p] for p in POLICIES}, cat["model_ce"][:, 0], cat["alpha"],
                      cat["model_hit"][:, 0], cat["targets"][:, 0])  # fmt: skip


def _rows_of(model: LayaLM, hs: Tensor, y: Tensor, rows: dict[str, list[Tensor]]) -> None:
    L = hs.shape[1]
    cols: dict[str, list[Tensor]] = {k: [] for k in rows}
    for k in range(1, L + 1):
        logits, mass = truncated_laya(model, hs, k)
        probs = F.softmax(logits.float(), -1)
        tuned = model.tuned.layer_logits(hs, k - 1).float()
        cols["laya_ce"].append(cross_entropy(logits, y))
        cols["argmax"].append(probs.argmax(-1))
        cols["alpha_mass"].append(mass.float())
        cols["p_max"].append(probs.amax(-1))
        cols["tuned_ce"].append(cross_entropy(tuned, y))
        cols["tuned_p_max"].append(F.softmax(tuned, -1).amax(-1))
    own = model.laya.readout(hs[:, -1])  # the model's own logits (lm_heads: its readout of the last layer)
    cols["model_ce"].append(cross_entropy(own, y))
    cols["model_hit"].append(own.argmax(-1) == y)
    cols["targets"].append(y)
    rows["alpha"].append(model.laya.attention(model.laya.embed(hs)).float().cpu())  # (B, L): already one per layer
    for key, col in cols.items():
        if col:
            rows[key].append(torch.stack(col, dim=1).cpu())


@dataclass
class TokenExitPoint:
    policy: str
    threshold: float | None  # None: the oracle
    ce_bits: float
    ce_increase: float  # relative to the policy's prediction at full depth: 0.01 = 1 %
    mean_layers: float
    saving: float  # 1 − mean_layers / L
    ce_over_model: float  # relative to the model's own prediction on the same positions

    def to_dict(self) -> dict:
        return asdict(self)


def _relative(got: float, reference: float) -> float:
    return got / reference - 1 if reference > 0 else 0.0


def _point(policy: str, threshold, ce: Tensor, depth: Tensor, model_ce: float) -> TokenExitPoint:
    L = ce.shape[1]
    full, got = float(ce[:, -1].double().mean()), float(take_depth(ce, depth).double().mean())
    layers = float(depth.double().mean() + 1)
    increase, over_model = _relative(got, full), _relative(got, model_ce)
    return TokenExitPoint(policy, threshold, got * BITS, increase, layers, 1 - layers / L, over_model)


def exit_sweep(tables: ExitTables, thresholds: Sequence[float]) -> list[TokenExitPoint]:
    """Every policy at every threshold, then the oracle."""
    model_ce = float(tables.model_ce.double().mean())
    points = [
        _point(policy, float(t), tables.ce[policy], exit_depth(tables.scores[policy], t), model_ce)
        for policy in POLICIES
        for t in thresholds
    ]
    oracle = minimal_sufficient_depth(tables.argmax)
    return points + [_point("oracle", None, tables.ce["alpha_mass"], oracle, model_ce)]


def best_within(
    points: Sequence[TokenExitPoint], policy: str, tolerance: float, against: str = "ce_increase"
) -> TokenExitPoint | None:
    """The policy's point that saves most with a cross-entropy increase of at most ``tolerance`` (0.01 = 1 %),
    ``against`` its own full-depth prediction (``ce_increase``) or the model's (``ce_over_model``)."""
    ok = [p for p in points if p.policy == policy and getattr(p, against) <= tolerance + 1e-12]
    return max(ok, key=lambda p: (p.saving, -getattr(p, against))) if ok else None


@dataclass(repr=False)
class TokenExitResult(DepthResult):
    """A language model's early exit per token (``DepthResult`` of kind ``"tokens"``)."""

    kind: ClassVar[str] = "tokens"
    tokens: int
    layers: list[str]
    model_ce_bits: float
    laya_ce_bits: float
    points: list[TokenExitPoint]
    best: dict[str, dict | None]  # per policy: its point within 1 % of its own full-depth cross-entropy
    best_vs_model: dict[str, dict | None]  # per policy: its point within 1 % of the model's (the goals read these)
    oracle: dict
    goals: dict
    settings: dict = field(default_factory=dict)  # what the job read: the model, thresholds, tokens
    lens_note: str | None = None  # a checkpoint trained without the tuned lens: what tuned_p_max reads then
    # the model's next-token accuracy on these positions and the chance level it is held against (next_token_chance)
    next_token: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the flags these tokens earn (auditing/flags.py), first

    def to_dict(self) -> dict:
        d = asdict(self)
        d["points"] = [p.to_dict() for p in self.points]
        if d["lens_note"] is None:
            del d["lens_note"]
        return d

    def table(self) -> tuple[list[dict], list[str]]:
        return [p.to_dict() for p in self.points], ["policy", "threshold"]


def token_exit_result(tables: ExitTables, layers: list[str], thresholds) -> TokenExitResult:
    """The sweep, each policy's best point within 1 % (of its own full depth, and of the model), and the goals read
    off α's best within 1 % of the model (docs/lm.md)."""
    points = exit_sweep(tables, thresholds)
    best = {p: best_within(points, p, 0.01) for p in POLICIES}
    vs_model = {p: best_within(points, p, 0.01, "ce_over_model") for p in POLICIES}
    oracle = next(p for p in points if p.policy == "oracle")
    saving = vs_model["alpha_mass"].saving if vs_model["alpha_mass"] else 0.0
    goals = {
        "alpha_saves_20pc_within_1pc": saving >= 0.20,
        "alpha_reaches_80pc_of_oracle": oracle.saving > 0 and saving >= 0.8 * oracle.saving,
        "alpha_saving": saving,  # within 1 % of the model's cross-entropy
        "alpha_saving_own": best["alpha_mass"].saving if best["alpha_mass"] else 0.0,  # of its own full depth
        "oracle_saving": oracle.saving,
    }
    laya_ce = float(tables.ce["alpha_mass"][:, -1].double().mean()) * BITS
    model_ce = float(tables.model_ce.double().mean()) * BITS
    result = TokenExitResult(
        len(tables.argmax), layers, model_ce, laya_ce, points,
        {k: (v.to_dict() if v else None) for k, v in best.items()},
        {k: (v.to_dict() if v else None) for k, v in vs_model.items()}, oracle.to_dict(), goals,
    )  # fmt: skip
    result.next_token = next_token_chance(tables.model_hit, tables.targets)
    result.notes = token_flags(tables.alpha, result.next_token)
    return result


def next_token_chance(hits: Tensor | None, targets: Tensor | None) -> dict:
    """The model's next-token accuracy on the positions and its chance level: the share of the most frequent next
    token among them (always predicting it scores that; 1/vocabulary is far below it), the rule the language model's
    audit holds its accuracy against (``head_scope._lm_baseline_warning``). Empty without the tables' columns."""
    if hits is None or targets is None or not len(targets):
        return {}
    counts = torch.bincount(targets.long())
    return {
        "positions": len(targets),
        "model_accuracy": float(hits.double().mean()),
        "most_frequent_token": int(counts.argmax()),
        "most_frequent_share": float(counts.max()) / len(targets),
    }


def token_flags(alpha: Tensor | None, next_token: dict) -> list[str]:
    """The flags a language model's early exit earns, as a classifier's depth shows them (auditing/flags.py): α within
    noise of uniform (the full head's α on these positions), the model within noise of chance (its next-token
    accuracy against the most frequent next token's share)."""
    from ..auditing.collapse import collapse_summary
    from ..auditing.flags import chance_flag, uniform_alpha_flag

    said = next_token or {}
    share = said.get("most_frequent_share")
    chance = chance_flag(said.get("model_accuracy"), said.get("positions"), share, "positions")
    flags = [uniform_alpha_flag(collapse_summary(alpha) if alpha is not None else None), chance]
    return [f for f in flags if f]


def token_exit_job(
    model: LayaLM, dataset: str | None, max_tokens: int, thresholds: Sequence[float], batch_size: int
) -> TokenExitResult:
    """``laya depth`` on a language model: the tables on the held-out text it was trained with (or ``dataset``,
    ``text:PATH``), the sweep, the goals."""
    from ..auditing.lm import held_out_text
    from ..features.lm_positions import batches, token_states

    _, corpus, block = held_out_text(model, dataset)
    from ..runtime.progress import track

    blocks = track(
        batches(model.lm, corpus, "test", block, batch_size),
        "early exit per token",
        unit="batch",
        of=f"of {batch_size} blocks of {block} tokens",
    )
    held_out = (token_states(model.lm, x) for x in blocks)
    tables = exit_tables(model, held_out, max_tokens)
    return token_exit_result(tables, list(model.ckpt["layers"]), thresholds)
