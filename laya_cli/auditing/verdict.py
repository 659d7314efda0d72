"""The audit's verdict in words (docs/metrics.md, "The verdict"): how faithful α is on the question it was trained on,
next to the best other method measured and what that method costs, and what follows for the reader — said before the
tables and kept in the JSON (``verdict``). Pure functions of the audit JSON's dicts (no torch), so the report, the
model card and the API read the same sentences.

A method that computes the effect itself another way is a **reference**, not a competitor (``REFERENCES``): IG
integrates from the removal's own value (head scope, every removal but mask; network scope always), so by
completeness its layer scores add up to the effects Δ it is scored against. Its faithfulness says how well the audit's
effects agree with themselves computed along a path (a check of the audit), not that α lost to a rival; it is left out
of the competitors and of the paired differences from laya.
"""

from __future__ import annotations

import math

OWN = "laya"
NAMES = {"laya": "α", "ig": "IG", "gradxact": "Grad×Act", "atp": "AtP", "saliency": "saliency", "contrib": "contrib",
         "global": "global α"}  # fmt: skip
# What each method costs per audited sample, beside the forward pass that predicts (docs/metrics.md, "Methods").
COSTS = {
    "laya": "free (read from the forward pass)",
    "contrib": "free (read from the forward pass)",
    "global": "free (one average over the data)",
    "gradxact": "one backward pass",
    "saliency": "one backward pass",
    "atp": "a forward and a backward pass",
    "ig": "{steps} forward and backward passes",
}
AGREEMENT_CHECK = 0.9  # a reference that ranks the effects below this: the audit's effects deserve a look


def is_reference(method: str, scope: str, head_removal: str | None) -> bool:
    """Whether ``method`` computes the effect itself at ``scope``: IG from the removal's value (at head scope under
    mask its baseline is r̄, not the removal: a competitor there)."""
    return method == "ig" and (scope == "network" or head_removal != "mask")


def mark_references(result):
    """Set ``reference`` on the MethodScores of ``result`` (an AuditResult) that compute the effect itself; returns
    ``result``."""
    removal = (result.settings or {}).get("ablation")
    for name, scores in result.methods.items():
        scores.reference = is_reference(name, "head", removal)
    for name, scores in (result.network.methods if result.network is not None else {}).items():
        scores.reference = is_reference(name, "network", removal)
    return result


def cost(method: str, row: dict) -> str:
    """What ``method`` costs per sample (IG: its mean adaptive steps where recorded)."""
    steps = (row.get("ig_steps") or {}).get("mean")
    return COSTS.get(method, "its own passes").format(steps=f"{steps:.0f}" if _finite(steps) else "its")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _faith(row: dict) -> float | None:
    value = row.get("faithfulness")
    return value if row.get("available", True) and _finite(value) else None


def _with_ci(row: dict) -> str:
    """A faithfulness with its interval where the audit computed one: ``0.283 [0.196, 0.364]``."""
    ci = (row.get("ci") or {}).get("faithfulness") or {}
    low, high = ci.get("ci_low"), ci.get("ci_high")
    interval = f" [{low:.3f}, {high:.3f}]" if _finite(low) and _finite(high) else ""
    return f"{row['faithfulness']:.3f}{interval}"


def _difference(row: dict) -> tuple[float | None, float | None, float | None]:
    """(method − laya, its interval's bounds) of faithfulness where the audit paired them; Nones otherwise."""
    vs = (row.get("vs_laya") or {}).get("faithfulness") or {}
    d, low, high = vs.get("difference"), vs.get("ci_low"), vs.get("ci_high")
    return (d if _finite(d) else None), (low if _finite(low) else None), (high if _finite(high) else None)


def scope_verdict(methods: dict, scope: str, removal: str, ranking: dict | None = None) -> dict:
    """The verdict of one scope's ``methods`` (the JSON's method dicts): ``winner`` (laya, a competitor, or "tie"),
    ``best`` (the best competitor), ``text`` (the sentences) and ``references`` (method -> its agreement)."""
    where = f"at {scope} scope ({removal} removal)"
    if ranking and not ranking.get("determined", True):
        return {"scope": scope, "winner": None, "best": None, "references": {},
                "text": f"{where.capitalize()} the layers' effects are too close to rank: faithfulness says nothing "
                        "here, for α or any method."}  # fmt: skip
    references = {m: _faith(r) for m, r in methods.items() if r.get("reference") and _faith(r) is not None}
    rivals = {m: r for m, r in methods.items() if m not in (OWN, "random") and not r.get("reference") and _faith(r)
              is not None}  # fmt: skip
    own = methods.get(OWN)
    best = max(rivals, key=lambda m: _faith(rivals[m]), default=None)
    out = {"scope": scope, "best": best, "references": references}
    if own is None or _faith(own) is None:
        text = f"{where.capitalize()} this head has no α to score"
        text += f"; the most faithful method measured is {_named(best, rivals[best])}." if best else "."
        return {**out, "winner": best, "text": text + _reference_text(references)}
    alpha = f"{where.capitalize()} α's faithfulness is {_with_ci(own)}"
    if best is None:
        return {**out, "winner": OWN, "text": f"{alpha}; no other method was measured (--compare)."
                + _reference_text(references)}  # fmt: skip
    winner, said = _compare(own, best, rivals[best])
    return {**out, "winner": winner, "text": f"{alpha}; {said}" + _reference_text(references)}


def _named(method: str, row: dict) -> str:
    return f"{NAMES.get(method, method)} ({cost(method, row)}) at {_with_ci(row)}"


def _compare(own: dict, best: str, row: dict) -> tuple[str, str]:
    """(winner, the sentence) of α against the best competitor: by the paired interval of their difference where
    the audit computed one (excludes 0: a winner; straddles it: a tie), else by the point values."""
    d, low, high = _difference(row)
    if d is None:
        d = _faith(row) - _faith(own)
    paired = f" (paired difference {d:+.3f} [{low:+.3f}, {high:+.3f}])" if low is not None and high is not None else ""
    name = NAMES.get(best, best)
    if low is not None and high is not None and low <= 0 <= high:
        return "tie", (
            f"the best other method measured, {_named(best, row)}, is no more faithful{paired}: α is as faithful as "
            "the best method here, and free."
        )
    if d > 0:
        return best, (
            f"the best other method measured, {_named(best, row)}, is more faithful{paired}. For decisions about "
            f"depth on this model (which layers matter, where to cut), prefer {name}; α is free but less faithful here."
        )
    return OWN, (
        f"it is more faithful than the best other method measured, {_named(best, row)}{paired}: use α here, which is "
        "free."
    )


def _reference_text(references: dict) -> str:
    """The references' agreement with the effects: a check of the audit, not a rival."""
    parts = []
    for m, agreement in references.items():
        check = "the effects check out" if agreement >= AGREEMENT_CHECK else "below 0.9: check the audit (--steps)"
        parts.append(f" Reference: {NAMES.get(m, m)}, the effect computed another way, agrees with it at "
                     f"{agreement:.3f} ({check}).")  # fmt: skip
    return "".join(parts)


def audit_verdict(doc: dict) -> dict:
    """The verdict of an audit JSON (``doc``, without its verdict): one ``scope_verdict`` per scope audited, the
    question's scope first, and ``text`` — their sentences joined, what ``laya audit`` says before its tables; for a
    model within noise of chance (a flag or the audit's note), no verdict (``AT_CHANCE``)."""
    settings = doc.get("settings") or {}
    question = doc.get("question") or {}
    network = doc.get("network")
    scopes = []
    if doc.get("methods"):
        scopes.append(scope_verdict(doc["methods"], "head", settings.get("ablation", "mean"), doc.get("ranking")))
    if network:
        removal = network.get("reference") or question.get("removal") or "mean"
        scopes.append(scope_verdict(network.get("methods") or {}, "network", removal, network.get("ranking")))
    if question.get("scope") == "network":
        scopes.sort(key=lambda v: v["scope"] != "network")
    if any("noise of chance" in line for line in [*(doc.get("notes") or []), *(doc.get("flags") or [])]):
        return {"scopes": scopes, "text": AT_CHANCE}  # the numbers are kept, not judged
    return {"scopes": scopes, "text": " ".join(v["text"] for v in scopes)}


# A model within noise of chance (auditing/flags.py): which method ranks its layers best says nothing of how it decides.
AT_CHANCE = (
    "No verdict: the model is within noise of chance, so every method here explains guesses; the numbers below are "
    "shown, not judged (train the model first)."
)
