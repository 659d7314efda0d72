"""``laya audit``: parse, run the audit job (``auditing.job``), judge the gates (``gates.outcome``), write their
files (``gates.outputs``), render the tables and the verdict line; exit 1 when a gate failed."""

from __future__ import annotations

import time
from functools import partial

import typer

from ..auditing.settings import AuditScopeSettings, AuditSettings
from ..data.settings import EvalDataSettings
from ..gates.settings import AuditOutputs, GateSettings
from ..model.settings import LoadSettings
from ..runtime import progress
from ..runtime.environment import RunSettings
from .common import (
    EXIT_GATE_FAILED,
    console,
    err_console,
    escape,
    note,
    trust_arch,
    warn,
    wide_console,
)
from .declared import with_settings
from .options import ModelPath


@with_settings(
    files=AuditOutputs,
    what=AuditScopeSettings,
    settings=AuditSettings,
    data=EvalDataSettings,
    load=LoadSettings,
    run=RunSettings,
    gates=GateSettings,
)
def audit(
    model: ModelPath,
    *,
    files: AuditOutputs,
    what: AuditScopeSettings,
    settings: AuditSettings,
    data: EvalDataSettings,
    load: LoadSettings,
    run: RunSettings,
    gates: GateSettings,
):
    """Audit how faithfully layer attributions (LAYA's own α, Captum's) explain each prediction."""
    from ..auditing.names import parse_methods
    from ..auditing.question import ask_checkpoints_question
    from ..auditing.settings import compare_for, network_methods
    from ..exporting.tasks import audit_checkpoint
    from ..gates.outcome import GateRequest
    from ..model.checkpoint import read_checkpoint
    from ..runtime.device import resolved

    started = time.perf_counter()
    with progress.enabled(not files.quiet):
        trust_arch(load.arch)
        run = run.with_batches(batch_size=settings.batch_size, internal_batch_size=settings.internal_batch_size)
        parse_methods(compare_for(what.compare, what.scope))  # a bad method or device: said before the file is read
        settings = resolved(settings)
        # the default: the question α was trained on (new settings objects: the given ones are frozen)
        ckpt = read_checkpoint(model)  # once: its question, then the model rebuilt from it
        question, what, settings = ask_checkpoints_question(ckpt, what, settings)
        methods = parse_methods(compare_for(what.compare, what.scope))
        asked = GateRequest.asked(gates, methods, what.scope)
        settings = resolved(settings, metrics=(*settings.metrics, *asked.metric_groups))  # a gate's groups too
        asked = asked.on_bound(gates.gate_on, settings)
        files.check_writable()
        network = network_methods(methods, what.compare is not None)  # IG, a reference there, only when named
        check = partial(asked.check_planned, settings, methods)
        result = audit_checkpoint(model, methods, settings, what.scope, data, load, check, run, network, ckpt=ckpt)
    result.settings["fail_under"] = [str(t) for t in asked.thresholds]
    result.question = question.to_dict()
    doc = result.to_dict()
    outcome = asked.judge(result, doc)
    render(result, doc, outcome, settings.metrics, files, time.perf_counter() - started)
    exit_for(outcome.verdict, gates.inconclusive_exit)


def exit_for(verdict, inconclusive_exit: int) -> None:
    """Exit 1 when a gate check failed; ``--inconclusive-exit`` (1 by default) when, with none failed, a
    ``--gate-on bound`` check's interval straddled its bar (docs/ci.md)."""
    if verdict.failures:
        raise typer.Exit(EXIT_GATE_FAILED)
    if verdict.inconclusive and inconclusive_exit:
        raise typer.Exit(inconclusive_exit)


def render(result, doc: dict, outcome, columns, files: AuditOutputs, seconds: float) -> None:
    """The tables (unless quiet), the files asked for (rank 0; ``--no-per-sample``: the JSON without its
    ``per_sample`` block, which the gates have already read), the failed checks and the verdict line."""
    from ..gates.outputs import write_audit_files
    from ..report.audit import verdict_line, verdict_lines
    from ..runtime import distributed
    from ..runtime.tracking.events import log_audit
    from .command import current_run

    quiet = files.quiet

    compared, run, verdict = outcome.compared, current_run(), verdict_line(outcome.verdict, result.n_samples)
    doc["options"] = run.record  # the resolved options: defaults, --config, flags (docs/integrations.md)
    if not files.per_sample:
        doc.pop("per_sample", None)
    text = markdown_text(result, outcome, columns, compared, doc)
    warning = None
    if distributed.is_main():  # under torchrun only rank 0 writes; first: a file that cannot be is the only line
        warning = write_audit_files(files, doc, text, outcome, seconds)
    if not quiet:
        for line in verdict_lines(doc):  # the question, the verdict in words and the flags: before the tables
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        print_tables(result, columns, compared)
    if warning is not None:
        warn(warning)
    if not quiet:
        print_gates(outcome)
    log_audit(run.track(f"audit {doc['settings'].get('model')}"), doc, outcome.verdict.passed, verdict, files.paths)
    console.print(verdict, highlight=False, soft_wrap=True, markup=False)


def print_tables(result, columns, compared: dict | None) -> None:
    """The head scope's tables (none for ``--scope network``), per class, the network scope's, then the notes."""
    from ..report.audit import audit_class_tables, audit_deeper_table, audit_rich_table, vs_laya_rich_table
    from ..report.network import HEAD_TITLE, NETWORK_TITLE, network_caption, network_comparison, scope_tables

    network = result.network  # --scope network|both (auditing/network.py); None: the head scope alone
    if result.methods:  # empty for --scope network
        table = (
            audit_rich_table(result, comparison=compared)
            if network is None
            else audit_rich_table(result, HEAD_TITLE, comparison=compared)
        )
        wide_console([table]).print(table)
        if (deeper := audit_deeper_table(result, columns, comparison=compared)) is not None:
            wide_console([deeper]).print(deeper)
        if (paired := vs_laya_rich_table(result, columns)) is not None:  # --ci: each method − laya, paired
            wide_console([paired]).print(paired)
    for table in audit_class_tables(result):
        console.print(table)
    if network is not None:
        table = audit_rich_table(
            result,
            NETWORK_TITLE,
            network.methods,
            network_caption(result, compared),
            comparison=network_comparison(compared),
            ranking=network.ranking,
        )
        wide_console([table]).print(table)
        for table in scope_tables(result):
            console.print(table)
    if result.by_position:  # a language model's audit (auditing/lm.py)
        from ..report.lm import by_position_table

        console.print(by_position_table(result.by_position))
    for text in result.notes + (network.notes if network is not None else []):
        note(text)


def markdown_text(result, outcome, columns, compared: dict | None, doc: dict | None = None) -> str:
    """The Markdown of ``--markdown`` and the job summary: the question, verdict and flags of ``doc`` first; the
    section of the scope audited carries the gates' misses (the network's when it is audited alone)."""
    from ..report.audit import audit_markdown, verdict_lines
    from ..report.network import HEAD_TITLE, network_markdown

    network = result.network
    gate_shown = outcome.misses if outcome.thresholds else None
    drop_misses = outcome.drop_misses if outcome.drops else None
    text = (
        audit_markdown(
            result,
            gate_shown,
            HEAD_TITLE if network is not None else "laya audit",
            metrics=columns,
            comparison=compared,
            drop_misses=drop_misses,
        )
        if result.methods
        else ""
    )
    if network is not None:  # --scope network: its section carries the gate's outcome
        alone = not result.methods
        text += ("\n" if text else "") + network_markdown(
            result, gate_shown if alone else None, compared, drop_misses if alone else None
        )
    said = "\n>\n".join(f"> {line}" for line in verdict_lines(doc or {}))
    title, _, tables = text.partition("\n")  # under the section's title, before its tables
    return f"{title}\n\n{said}\n{tables}" if said else text


def print_gates(outcome) -> None:
    """Each failed check on stderr, or that every threshold was met and no metric dropped too far."""
    for c in outcome.verdict.failures:
        err_console.print(f"[bold red]{c.gate}:[/] {escape(c.message)}", highlight=False, soft_wrap=True)
    if outcome.thresholds and not outcome.misses:
        err_console.print(f"[green]fail-under: all {len(outcome.thresholds)} threshold(s) met[/]", highlight=False)
    for message in outcome.passed_on_bound:
        err_console.print(f"[green]pass:[/] {escape(message)}", highlight=False, soft_wrap=True)
    for message in outcome.undecided:
        err_console.print(f"[bold yellow]inconclusive:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if outcome.drops and not outcome.drop_misses:
        err_console.print(
            f"[green]max-drop: no metric dropped more than allowed ({outcome.drop_checks} check(s))[/]",
            highlight=False,
        )
