"""The one question a checkpoint's α answers (docs/metrics.md, "The question α was trained on"): which effects α was
trained to rank — the head's own (``head``: removing a layer at the head's inputs, direct effects), the network's
(``network``: removing a block inside the backbone, total effects) or both — and how a layer is removed there
(``mean``, ``bypass``, …). Recorded at training (the checkpoint's ``question``), derived from the stored training
settings for an older checkpoint, else assumed (head, mean) and said so. The default ``laya audit`` scores α on it, an
unqualified gate checks it, and ``laya info``, the audit, report.html and the model card say it in one sentence.
Pure functions of dicts: no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .settings import NETWORK_SCOPES

RECORDED = "recorded"  # written at training
DERIVED = "derived"  # from the checkpoint's stored training settings (a checkpoint from before the record)
ASSUMED = "assumed"  # nothing says: the head's direct effects with mean removal, as laya audited before
UNALIGNED = "unaligned"  # no alignment term: α learnt only to predict; the head scope is where it is read

# How each removal reads in a sentence (docs/metrics.md, "Removing a layer").
REMOVAL_WORDS = {
    "mean": "replaced by its training mean",
    "zero": "set to zero",
    "mask": "given weight 0",
    "bypass": "skipped (its output := its input)",
    "mean-update": "replaced by its input plus its mean update",
}
SCOPE_WORDS = {
    "head": "at the head's inputs (the head's direct effects)",
    "network": "inside the network, later layers seeing the change (total effects)",
    "both": "at the head's inputs and inside the network (direct and total effects)",
}

SOURCE_WORDS = {
    DERIVED: " (derived from the stored training settings)",
    ASSUMED: " (assumed: the checkpoint records neither the question nor its training settings)",
}


@dataclass(frozen=True)
class Question:
    """What α was trained to follow: ``scope`` (head, network or both, as ``laya audit --scope``), ``removal`` (an
    ``--ablation`` name: the network scope's where the scope has one) and ``source`` (how it is known)."""

    scope: str
    removal: str
    source: str = RECORDED

    def record(self) -> dict:
        """What a checkpoint stores (``question``)."""
        return {"scope": self.scope, "removal": self.removal, "source": self.source}  # unaligned stays said

    def to_dict(self) -> dict:
        """What ``laya info --json`` and the audit JSON carry: the record, how it is known and the sentence."""
        return {**asdict(self), "sentence": self.sentence()}

    def sentence(self) -> str:
        """The one sentence ``laya info``, the audit, report.html and the model card say."""
        where, how = SCOPE_WORDS.get(self.scope, self.scope), REMOVAL_WORDS.get(self.removal, self.removal)
        ranked = f"how much removing each layer {where} moves the prediction, a layer removed being {how}"
        if self.source == UNALIGNED:
            return (
                f"α was trained only to predict (no alignment term), so it is scored on {ranked} "
                f"(laya audit --scope {self.scope} --ablation {self.removal}, the default)"
            )
        said = SOURCE_WORDS.get(self.source, "")
        return f"α was trained to rank layers by {ranked}{said}; laya audit scores it on that question by default"


def question_of_training(config: dict, task: str = "classify") -> Question:
    """The question a training run's resolved settings (a checkpoint's ``train_config``) trained α on: its alignment
    target and removal (``align_removal`` as resolved: bypass or mean; a language model's blocks are bypassed); no
    term: the head's direct effects by mean removal, said as unaligned."""
    if not config.get("align"):
        return Question("head", "mean", UNALIGNED)
    target = config.get("align_target") or "head"
    if target not in NETWORK_SCOPES:
        return Question("head", "mean", RECORDED)
    removal = config.get("align_removal") or "auto"
    if removal == "auto":  # recorded unresolved: a language model's layers are bypassed, a classifier's took mean
        removal = "bypass" if task == "lm" else "mean"
    return Question(target, removal, RECORDED)


def checkpoint_question(ckpt: dict) -> Question:
    """The question of a checkpoint: its record, else derived from its ``train_config``, else assumed (head, mean)."""
    recorded = ckpt.get("question")
    if isinstance(recorded, dict) and recorded.get("scope") and recorded.get("removal"):
        return Question(recorded["scope"], recorded["removal"], recorded.get("source", RECORDED))
    config = ckpt.get("train_config") or {}
    if "align" not in config:
        return Question("head", "mean", ASSUMED)
    derived = question_of_training(config, "lm" if ckpt.get("task") == "lm" else "classify")
    return derived if derived.source == UNALIGNED else Question(derived.scope, derived.removal, DERIVED)


def audit_scope_and_removal(question: Question, scope: str | None, ablation: str | None) -> tuple[str, str]:
    """What ``laya audit`` runs: the scope and removal given, the question's where not given. A scope given alone
    keeps the question's removal where that scope removes inside the network, else mean (as before)."""
    if ablation:  # a head-only removal (mask) asks the head scope unless a scope is given
        return scope or ("head" if ablation.lower() == "mask" else question.scope), ablation
    scope = scope or question.scope
    if scope == question.scope or (scope in NETWORK_SCOPES and question.scope in NETWORK_SCOPES):
        return scope, question.removal
    return scope, "mean"


def given_or_changed(obj, name: str, default) -> bool:
    """Whether a caller set option ``name`` of ``obj``: spelled on the command line (``declare.mark_given``), or set
    to another value than its default (a ``--config`` file)."""
    from ..runtime.declare import GIVEN

    return name in getattr(obj, GIVEN, frozenset()) or getattr(obj, name) != default


def ask_checkpoints_question(ckpt: dict, what, settings) -> tuple[Question, object, object]:
    """``laya audit``'s scope and removal: the question of the checkpoint ``ckpt`` (as read; ``checkpoint_question``)
    where ``what.scope`` and ``settings.ablation`` were not set (``audit_scope_and_removal``): the question, which the
    result carries (its sentence is the audit's header), and ``what`` and ``settings`` asking it (new objects:
    settings are frozen)."""
    from ..runtime.declare import evolve

    question = checkpoint_question(ckpt)
    scope = what.scope if given_or_changed(what, "scope", "head") else None
    ablation = settings.ablation if given_or_changed(settings, "ablation", "mean") else None
    scope, ablation = audit_scope_and_removal(question, scope, ablation)
    return question, evolve(what, scope=scope), evolve(settings, ablation=ablation)


def ask_models_question(ckpt: dict | None, settings: dict) -> dict:
    """``laya_cli.audit``'s keywords asking what ``laya audit`` of the model's checkpoint asks: a ``scope`` or
    ``ablation`` left None (the API's default) takes the checkpoint's question (``audit_scope_and_removal``); one
    given wins. A model without a training record (``ckpt`` empty) is asked the assumed question (head, mean)."""
    question = checkpoint_question(ckpt or {})
    scope, ablation = audit_scope_and_removal(question, settings.get("scope"), settings.get("ablation"))
    return {**settings, "scope": scope, "ablation": ablation}


def with_question(result, ckpt: dict | None):
    """``result`` (an AuditResult) carrying the question of the checkpoint its model came from (``laya_cli.audit``:
    said in its JSON, its verdict and its card); as it is for a model without one."""
    if ckpt:
        result.question = checkpoint_question(ckpt).to_dict()
    return result
