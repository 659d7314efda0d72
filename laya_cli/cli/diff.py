"""``laya diff A.pt B.pt``: what changed between two versions of a model on the same samples (the job:
``exporting.tasks.diff_checkpoints``); exit 1 when ``--fail-if-changed`` names a class (or ``any``) that changed.
Like the other commands it takes ``--config``, ``-v`` and ``--log-to`` (``LayaCommand``, command.py) and ``-q``."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from ..auditing.diff.settings import DiffSettings
from ..data.settings import EvalDataSettings
from ..model.settings import LoadSettings
from ..runtime import progress
from .common import EXIT_GATE_FAILED, err_console, escape, print_tables, trust_arch, write_outputs
from .declared import Use, with_settings
from .options import JsonOut, MarkdownOut, Quiet, Replace

ModelA = Annotated[Path, typer.Argument(help="The first checkpoint (the baseline, A).", show_default=False)]
ModelB = Annotated[Path, typer.Argument(help="The second checkpoint (the candidate, B).", show_default=False)]
FailIfChanged = Annotated[
    str | None,
    typer.Option(metavar="CLASS|any", help="Exit 1 when this class (or any class) changed its layer usage."),
]


@with_settings(settings=DiffSettings, data=Use(EvalDataSettings), load=LoadSettings)
def diff(
    model_a: ModelA,
    model_b: ModelB,
    fail_if_changed: FailIfChanged = None,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    quiet: Quiet = False,
    overwrite: Replace = False,
    *,
    settings: DiffSettings,
    data: EvalDataSettings,
    load: LoadSettings,
):
    """Compare two versions of a model: per class and layer the change of α, LOLO Δ and contrib, with tests; of a
    language model: per token, the change of each method's faithfulness and Deletion@1, with paired intervals."""
    from ..auditing.diff.job import check_gate
    from ..exporting.tasks import diff_checkpoints
    from ..report.diff import diff_markdown, diff_rich_tables, lm_diff_markdown, lm_diff_rich_tables
    from ..runtime.device import resolved
    from ..runtime.fileio import check_new_outputs

    trust_arch(load.arch)
    settings = resolved(settings)
    check_new_outputs({"--json": json_out, "--markdown": markdown}, overwrite)
    with progress.enabled(not quiet):
        result = diff_checkpoints(model_a, model_b, settings, data, load, partial(check_gate_of, fail_if_changed))
    paths, files = (model_a, model_b), (json_out, markdown)
    if result.kind == "tokens":  # two language models: per method, layer and position, no class to gate
        return render(result.to_dict(), lm_diff_rich_tables, lm_diff_markdown, paths, quiet, files)
    render(result.to_dict(), diff_rich_tables, diff_markdown, paths, quiet, files)
    gate = check_gate(fail_if_changed, list(result.classes))
    hit = result.changed if gate == "any" else [c for c in result.changed if c == gate] if gate else []
    if hit:
        err_console.print(f"[bold red]fail-if-changed:[/] layer usage changed significantly: {escape(', '.join(hit))}")
        raise typer.Exit(EXIT_GATE_FAILED)


def check_gate_of(fail_if_changed: str | None, classes: list[str]) -> None:
    """``--fail-if-changed``, before any work: a class of the models, or any (a language model's diff has none)."""
    from ..auditing.diff.job import check_gate
    from ..runtime.errors import LayaError

    if fail_if_changed is not None and not classes:
        raise LayaError("--fail-if-changed names a class: a language model's diff is per token, not per class")
    check_gate(fail_if_changed, classes)


def render(doc: dict, tables, markdown, paths, quiet: bool, files) -> None:
    """A diff's document: its tables (unless quiet), the JSON and Markdown asked for, the tracker's run."""
    from ..runtime.fileio import strict_json
    from ..runtime.tracking.events import log_diff
    from .command import current_run

    run = current_run()
    doc["options"] = run.record  # the resolved options: defaults, --config, flags (docs/integrations.md)
    write_outputs(files[0], lambda: strict_json(doc), files[1], lambda: markdown(doc))  # first: a full disk's line
    print_tables([] if quiet else tables(doc))  # a log or a pipe gets the per-layer table whole
    log_diff(run.track(f"diff {paths[0]} {paths[1]}"), doc, list(files))
