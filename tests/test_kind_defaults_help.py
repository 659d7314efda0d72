"""``laya train --help`` says what each kind of model trains with: the default texts of --align, --align-target,
--align-loss, --align-removal, --exit-aware and --reads are written from the table the training job resolves
(backbones/defaults.py). For every kind in that table, and for kinds that are not in it, the value the job resolves
is the one the help text gives that kind."""

from __future__ import annotations

import pytest

from laya_cli.backbones.defaults import KIND_DEFAULTS, REMOVAL_SAYS, KindDefault
from laya_cli.model.settings import HeadSettings
from laya_cli.runtime.declare import declared
from laya_cli.training.defaults import resolved_alignment, resolved_lm_head
from laya_cli.training.settings import TrainingSettings

# A backbone name of each kind (a hub model's kind is its family).
NAMES = {"hf": "hf:bert-base-uncased", "timm": "timm:efficientnet_lite0", "torchvision": "torchvision:resnet18"}
# Kinds the table does not list (trained end to end or frozen): the help's "elsewhere".
UNLISTED = [("mlp", False), ("cnn", True), ("cnn", False), ("timm:resnet18", True), ("hf:bert-base-uncased", True)]


# Where each option's help starts saying the kinds' values.
MARKERS = {
    "align": "network-alignment.md (",
    "align_target": "Default: the kind of model's (",
    "align_loss": "Default: the kind of model's (",
    "align_removal": "is given: ",
    "exit_aware": "docs/lm.md: ",
}


def _help(field: str, cls=TrainingSettings) -> str:
    return next(d.option.help for d in declared(cls) if d.field == field)


def _said(field: str, kind: KindDefault | None) -> str:
    """The value ``field``'s help gives ``kind`` (None: a kind the table does not list): the words before `` for ``
    in the clause naming it, else before `` elsewhere``."""
    clauses = _help(field).split(MARKERS[field], 1)[1].split("; ")
    named = [c for c in clauses if kind is not None and " for " in c and kind.says in c.split(" for ", 1)[1]]
    if named:
        return named[0].split(" for ", 1)[0]
    return next(c for c in clauses if " elsewhere" in c).split(" elsewhere")[0]


def _resolved(backbone: str, end_to_end: bool, pool: str | None = None) -> TrainingSettings:
    return resolved_alignment(TrainingSettings().validate(), backbone, end_to_end, "laya", pool=pool)


KINDS = [pytest.param(k, id=f"{k.kind}-{'end-to-end' if k.end_to_end else 'frozen'}") for k in KIND_DEFAULTS]


@pytest.mark.parametrize("kind", KINDS)
def test_align_and_its_target_are_what_the_help_says_for_every_kind(kind):
    got = _resolved(NAMES.get(kind.kind, kind.kind), kind.end_to_end)
    assert got.align > 0 and got.align_source == "default"  # every listed kind has a term
    assert _said("align", kind) == f"{got.align:g} with --align-target {got.align_target}"
    assert _said("align_target", kind) == got.align_target
    assert _said("exit_aware", kind) == f"{got.exit_aware:g}"
    assert _said("align_removal", kind) == got.align_removal
    if got.align_removal != "auto":  # the term's condition is said with the kinds that have it
        assert REMOVAL_SAYS[got.align_removal] in next(
            d.option.help for d in declared(TrainingSettings) if d.field == "align_removal"
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pool", ["mean", "cls", "last"])
def test_align_loss_is_what_the_help_says_for_every_kind_and_pooling(kind, pool):
    got = _resolved(NAMES.get(kind.kind, kind.kind), kind.end_to_end, pool=pool)
    by_pool = dict(
        part.split(" with --pool ")[::-1] for part in _said("align_loss", kind).split(", ") if " with " in part
    )
    assert got.align_loss == by_pool.get(pool, _said("align_loss", None))


@pytest.mark.parametrize("backbone, end_to_end", UNLISTED)
def test_a_kind_the_table_does_not_list_gets_what_the_help_says_elsewhere(backbone, end_to_end):
    got = _resolved(backbone, end_to_end, pool="mean")
    assert f"{got.align:g}" == _said("align", None) == "0"
    assert got.align_target == _said("align_target", None)
    assert got.align_loss == _said("align_loss", None)
    assert f"{got.exit_aware:g}" == _said("exit_aware", None)
    assert got.align_removal == _said("align_removal", None)


def test_reads_is_what_the_help_says_for_a_language_model():
    assert f"Default: {resolved_lm_head(HeadSettings()).reads} " in _help("reads", HeadSettings)


def test_the_help_names_every_kind_that_has_a_term():
    """The case the table was moved for: a frozen timm CNN tapped at its blocks trains with the network term, and
    --align's help says so (it said 0 there)."""
    text = _help("align")
    for kind in KIND_DEFAULTS:
        assert kind.says in text
    assert _resolved("timm:efficientnet_lite0", False).align == 1.0
    assert "a frozen timm model" in text and "--taps blocks" in text
