"""One ``Task`` per kind of model, chosen once: a classifier (``ClassifierTask``: ``LayaModel``) and a causal language
model's heads (``LanguageModelTask``: ``LayaLM``, ``--task lm``), each with the same activities — train (``fit`` from
the Python API), bench, audit, depth, export, diff — and one result type per activity (``AuditResult``,
``DiffResult``, …). ``task_for`` chooses the task from a checkpoint, a model, a training request or a task's name,
through the ``TASKS`` registry; the jobs below (what ``laya train/bench/audit/depth/export/diff`` run on files), the
Python API (``laya_cli.api``) and the command line's rendering all ask it, and no other module tests the task.

Each task's activities are its stages' jobs (a classifier's in ``auditing.job``, ``depthing.job``,
``exporting.job``, ``auditing.diff.job``, ``training.job``/``bench``; a language model's in the ``lm`` modules of the
same stages): the task only says which. Why in ``exporting``: a task calls every stage, and ``exporting`` is the
topmost stage, the one allowed to import the others (docs/architecture.md).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import ClassVar

from ..auditing.diff.compare import DiffResult
from ..auditing.diff.job import check_comparable, check_diff, compare_models, diff_classifier_checkpoints
from ..auditing.diff.lm import diff_lm_checkpoints
from ..auditing.job import audit_classifier_checkpoint, audit_job
from ..auditing.lm import TOKENS_AUDITED, audit_lm_checkpoint, token_audit_job
from ..auditing.results import AuditResult
from ..auditing.settings import Removal
from ..data.settings import EvalDataSettings
from ..depthing.job import LM_EXIT_TOKENS, depth_classifier_checkpoint, depth_job, lm_depth_checkpoint, token_depth
from ..features.attach import Tapped, attach
from ..model.checkpoint import checkpoint_task, read_checkpoint
from ..model.evaldata import EvalData, load_eval_data, loader_eval_data
from ..model.heads import HEADS
from ..model.laya_model import LayaModel, model_from_checkpoint
from ..model.lm_heads import LayaLM, lm_from_checkpoint
from ..model.settings import HeadSettings, LoadSettings
from ..runtime.declare import build, refuse_other_task
from ..runtime.device import resolved
from ..runtime.errors import LayaError, match_choice
from ..training.bench import run_bench
from ..training.bench_lm import run_lm_bench
from ..training.job import fit_loaders
from ..training.job import train as train_classifier
from ..training.lm import train_lm
from ..training.settings import LMSettings, TrainingSettings, TrainJobSettings, check_alpha_options
from .folder import check_format, check_out_dir, export_data
from .job import export_classifier_checkpoint
from .lm import TOKENS_EXPORTED, compute_token_export, default_token_format, export_lm_checkpoint, write_token_export


class Task:
    """What every task does, by the same names; ``name`` is the checkpoint's ``task`` (``--task``), ``model`` the
    class its checkpoints rebuild. Each method is the job of that activity for this task."""

    name: ClassVar[str]
    model: ClassVar[type]
    depth_curve: ClassVar[bool]  # whether ``laya depth`` draws a truncation curve (--plot)

    def refuse_others(self, *given) -> None:
        """The settings of the other task, set away from their defaults, refused in one line."""
        for settings in given:
            refuse_other_task(settings, self.name)

    def load(self, ckpt: dict, load: LoadSettings | None = None, backbone=None):
        raise NotImplementedError

    def fit(self, model, train_loader, settings: dict, options: dict):
        """``laya_cli.fit``: ``settings`` by option name, ``options`` the API's own arguments (loaders, head…)."""
        raise NotImplementedError

    def train(self, req, on_epoch=None) -> dict:
        raise NotImplementedError

    def bench(self, bench, on_run=None):
        raise NotImplementedError

    def audit_checkpoint(
        self, path, ckpt, methods, settings, scope, data, load, check_planned, run=None, network_methods=None
    ) -> AuditResult:
        raise NotImplementedError

    def audit(self, model, loader, methods, settings, scope, samples, network_methods=None) -> AuditResult:
        raise NotImplementedError

    def depth_checkpoint(self, path, ckpt, settings, data, load, out, run=None, overwrite=False):
        raise NotImplementedError

    def depth(self, model, loader, settings, samples):
        raise NotImplementedError

    def export_checkpoint(self, path, ckpt, out, settings, data, load, overwrite, memory):
        raise NotImplementedError

    def export(self, model, loader, out, settings, samples, overwrite):
        raise NotImplementedError

    def diff_checkpoints(self, paths, ckpts, settings, data, load, on_classes, use_cache) -> DiffResult:
        raise NotImplementedError

    def diff(self, models, loader, settings, samples) -> DiffResult:
        raise NotImplementedError


class ClassifierTask(Task):
    """A classifier: a head on a tapped backbone's layers (``LayaModel``), its samples from a data set or a loader."""

    name, model, depth_curve = "classify", LayaModel, True

    def load(self, ckpt: dict, load: LoadSettings | None = None, backbone=None) -> LayaModel:
        return model_from_checkpoint(ckpt, backbone)

    def fit(self, tapped, train_loader, settings: dict, options: dict) -> LayaModel:
        head_cfg = build(HeadSettings, settings).validate()
        self.refuse_others(head_cfg, build(LMSettings, settings))
        tapped = tapped if isinstance(tapped, Tapped) else attach(tapped)
        head = match_choice("head", options["head"], HEADS)  # case-insensitive, as on the command line
        val_loader, val_fraction = options["val_loader"], options["val_fraction"]
        if val_loader is None and not 0 < val_fraction < 1:
            raise LayaError(f"val_fraction must be between 0 and 1, got {val_fraction}")
        batch_size = (
            settings["batch_size"] or getattr(train_loader, "batch_size", None) or TrainingSettings().batch_size
        )
        cfg = resolved(build(TrainingSettings, settings, batch_size=batch_size)).validate()
        check_alpha_options(cfg, head)
        loaders = {"train": train_loader, "val": val_loader, "test": options["test_loader"]}
        frozen, classes, cache = options["frozen"], options["classes"], options["cache"]
        return fit_loaders(tapped, loaders, head, head_cfg, cfg, frozen, val_fraction, classes, cache)

    def train(self, req, on_epoch=None) -> dict:
        return train_classifier(req, on_epoch)

    def bench(self, bench, on_run=None):
        return run_bench(bench, on_run)

    def audit_checkpoint(
        self, path, ckpt, methods, settings, scope, data, load, check_planned, run=None, network_methods=None
    ) -> AuditResult:
        return audit_classifier_checkpoint(
            path, ckpt, methods, settings, scope, data, check_planned, run, network_methods
        )

    def audit(self, model, loader, methods, settings, scope, samples, network_methods=None) -> AuditResult:
        _no_samples(samples)
        data = api_samples(model, loader, settings.device, keep_images=scope != "head")  # the network: on images
        return audit_job(model, data, methods, settings, scope, network_methods=network_methods)

    def depth_checkpoint(self, path, ckpt, settings, data, load, out, run=None, overwrite=False):
        return depth_classifier_checkpoint(path, ckpt, settings, data, out, run, overwrite)

    def depth(self, model, loader, settings, samples):
        _no_samples(samples)
        return depth_job(model, api_samples(model, loader, settings.device, keep_images=True), settings)

    def export_checkpoint(self, path, ckpt, out, settings, data, load, overwrite, memory):
        return export_classifier_checkpoint(path, ckpt, out, settings, data, overwrite, memory)

    def export(self, model, loader, out, settings, samples, overwrite):
        _no_samples(samples)
        fmt = settings.format or "csv"
        if out is not None:
            check_format(fmt)
            check_out_dir(out, overwrite)
        keep_images = out is not None and settings.plots and settings.strip > 0
        data = api_samples(model, loader, settings.device, keep_images)()
        info = {"source": "laya_cli.export"}
        return export_data(model, data, out, fmt, settings.plots, settings.strip, overwrite, settings.device, info=info)

    def diff_checkpoints(self, paths, ckpts, settings, data, load, on_classes, use_cache) -> DiffResult:
        return diff_classifier_checkpoints(paths, ckpts, settings, data, on_classes, use_cache)

    def diff(self, models, loader, settings, samples) -> DiffResult:
        _no_samples(samples)
        if settings.scope not in ("head", "network"):
            raise LayaError(f"scope {settings.scope}: a classifiers' diff takes head or network")
        removal = Removal.parse(settings.ablation)
        model_a, model_b = models
        check_comparable(model_a, model_b, "model_a", "model_b")
        check_diff(model_a, model_b, removal, settings.scope)
        images, device = settings.scope != "head", settings.device  # the network runs on images
        data_a, data_b = (loader_eval_data(m, loader, device, images) for m in models)
        return compare_models(model_a, model_b, data_a, data_b, settings, removal, device, settings.scope)


def api_samples(model: LayaModel, loader, device: str, keep_images: bool) -> Callable[[], EvalData]:
    """What a classifier's ``laya_cli.audit``, ``depth`` and ``export`` read, loaded when called (after the checks
    that need no data): ``loader``'s samples, every one in its order (``keep_images``: the images too, for the
    network scope, the per-depth timing or the export's strip); None: the test split of the data set the checkpoint
    was trained on, every sample, as ``laya audit/depth/export MODEL`` read it (a file's images stay lazy)."""
    if loader is not None:
        return partial(loader_eval_data, model, loader, device, keep_images)
    return partial(load_eval_data, model, device=device)  # its own test split (model_dataset: refused for a fit one)


class LanguageModelTask(Task):
    """A causal language model's heads per position (``LayaLM``): every held-out position of its text a sample."""

    name, model, depth_curve = "lm", LayaLM, False

    def load(self, ckpt: dict, load: LoadSettings | None = None, backbone=None) -> LayaLM:
        return lm_from_checkpoint(ckpt, load.device_map if load is not None else None)

    def fit(self, model, text, settings: dict, options: dict) -> LayaLM:
        """The request ``laya train --task lm`` builds from the same settings, trained by the same job; nothing is
        written until ``LayaLM.save``."""
        if not isinstance(model, str) or not isinstance(text, str):
            raise LayaError('a language model is named as on the command line: fit("hf:PATH", "text:PATH", task="lm")')
        given = [name for name in ("val_loader", "test_loader", "classes") if options[name] is not None]
        given += [name for name, default in (("head", "laya"), ("frozen", True), ("cache", False))
                  if options[name] != default]  # fmt: skip
        if given:
            raise LayaError(f"{', '.join(given)}: a classifier's (a language model's heads train on its text)")
        values = {k: v for k, v in settings.items() if v is not None or k != "batch_size"}  # None: the paper's 128
        req = build(TrainJobSettings, {**values, "backbone": model, "dataset": text, "task": self.name}, out="")
        req = dataclasses.replace(req, train=resolved(req.train))
        ckpt = self.train(req)
        return lm_from_checkpoint(ckpt, req.lm.device_map).to(req.train.device)

    def train(self, req, on_epoch=None) -> dict:
        return train_lm(copy.deepcopy(req), on_epoch)  # the caller's request is never changed

    def bench(self, bench, on_run=None) -> dict:
        return run_lm_bench(bench.validate(), on_run)

    def audit_checkpoint(
        self, path, ckpt, methods, settings, scope, data, load, check_planned, run=None, network_methods=None
    ) -> AuditResult:  # network_methods: its network scope builds no IG (auditing/registry.py), the one it drops
        return audit_lm_checkpoint(path, ckpt, methods, settings, scope, data, load, check_planned, run)

    def audit(self, model, loader, methods, settings, scope, samples, network_methods=None) -> AuditResult:
        data = _text(loader, samples, TOKENS_AUDITED)
        return token_audit_job(model.to(settings.device), methods, settings, scope, data.dataset, data.samples)

    def depth_checkpoint(self, path, ckpt, settings, data, load, out, run=None, overwrite=False):
        return lm_depth_checkpoint(path, ckpt, settings, data, load)

    def depth(self, model, loader, settings, samples):
        self.refuse_others(settings)
        return token_depth(model, settings, _text(loader, samples, LM_EXIT_TOKENS), "")

    def export_checkpoint(self, path, ckpt, out, settings, data, load, overwrite, memory):
        return export_lm_checkpoint(path, ckpt, out, settings, data, load, overwrite)

    def export(self, model, loader, out, settings, samples, overwrite):
        self.refuse_others(settings)
        data = _text(loader, samples, TOKENS_EXPORTED)
        exp = compute_token_export(model.to(settings.device), data.dataset, data.samples)
        fmt = settings.format or default_token_format()
        return exp if out is None else write_token_export(exp, out, fmt, settings.plots, overwrite)

    def diff_checkpoints(self, paths, ckpts, settings, data, load, on_classes, use_cache) -> DiffResult:
        on_classes([])  # a language model's diff is per token: no class to check
        return DiffResult.of_tokens(diff_lm_checkpoints(ckpts, paths, settings, data, load))

    def diff(self, models, loader, settings, samples) -> DiffResult:
        self.refuse_others(settings)
        data, ckpts = _text(loader, samples, TOKENS_AUDITED), tuple(m.checkpoint for m in models)
        return DiffResult.of_tokens(diff_lm_checkpoints(ckpts, ("model_a", "model_b"), settings, data, LoadSettings()))


TASKS: dict[str, Task] = {task.name: task for task in (ClassifierTask(), LanguageModelTask())}


def task_for(what) -> Task:
    """The one choice of a task: from a checkpoint dict (its ``task``), a task's name (``--task``), or anything
    that carries ``task`` (a ``LayaModel``, a ``LayaLM``, a ``TrainJobSettings``)."""
    name = checkpoint_task(what) if isinstance(what, dict) else what if isinstance(what, str) else what.task
    return TASKS[name]


def _text(loader, samples: int | None, default: int) -> EvalDataSettings:
    """A language model's data as the Python API reads it: its held-out text (or ``text:PATH``), ``samples``
    positions (``default`` when None)."""
    if loader is not None and not isinstance(loader, str):
        raise LayaError("a language model reads text: give text:PATH, or None for the text it was trained with")
    if samples is not None and samples < 1:
        raise LayaError(f"samples must be at least 1, got {samples}")
    return EvalDataSettings(samples=samples or default, dataset=loader).validate()


def _no_samples(samples: int | None) -> None:
    if samples is not None:
        raise LayaError("samples: a classifier is read from the loader you give (take a subset there)")


# --------------------------------------------------------------------------- the jobs of the commands, on files


def train(req, on_epoch=None) -> dict:
    """``laya train`` and ``laya_cli.fit`` of a named model: the request's task trains it (``--task``); writes the
    checkpoint and returns it. The caller's request is never changed."""
    return task_for(req).train(req, on_epoch)


def bench(request, on_run=None):
    """``laya bench``: its training template's task runs every run (a classifier's ``BenchResult``, a language
    model's JSON document)."""
    return task_for(request.validate().train).bench(request, on_run)


def audit_checkpoint(
    path,
    methods: Sequence[str],
    settings,
    scope: str,
    data: EvalDataSettings,
    load: LoadSettings,
    check_planned: Callable = lambda samples, model: None,
    run=None,
    network_methods: Sequence[str] | None = None,
    ckpt: dict | None = None,
) -> AuditResult:
    """``laya audit``'s job on a checkpoint file, whichever its task: a classifier audited on its test split (or
    ``data``'s), a language model on ``data.samples`` held-out positions. The settings of the other task are refused
    in one line first; ``check_planned(samples, model)``: what the caller checks against the model before any work
    (the gates' baseline); ``run`` (``RunSettings``): the memory the batches are planned within, the precision and
    the feature cache (None: the batches as given, the defaults); ``network_methods``: those a classifier's network
    scope computes (``auditing.settings.network_methods``; None: ``methods``); ``ckpt``: the file as the caller
    already read it (``read_checkpoint(path)``; None: read here). Read once: the model is rebuilt from this dict."""
    ckpt = read_checkpoint(path) if ckpt is None else ckpt
    task = task_for(ckpt)
    task.refuse_others(data, load)
    return task.audit_checkpoint(path, ckpt, methods, settings, scope, data, load, check_planned, run, network_methods)


def depth_checkpoint(
    path,
    settings,
    data: EvalDataSettings,
    load: LoadSettings,
    out=None,
    on_task=lambda task: None,
    run=None,
    overwrite=False,
):
    """``laya depth``'s job on a checkpoint file, whichever its task: a classifier's analysis, truncated or thinned
    checkpoint on its test split (or ``data``'s), a language model's early exit per token on its held-out text. The
    settings of the other task are refused in one line first, and ``on_task(task)`` checks what the caller asks of
    that task (a plot of a classifier's curve). ``run`` (``RunSettings``): the memory and the feature cache;
    ``overwrite``: replace an existing ``out``."""
    ckpt = read_checkpoint(path)
    task = task_for(ckpt)
    task.refuse_others(settings, data, load)
    on_task(task)
    return task.depth_checkpoint(path, ckpt, settings, data, load, out, run, overwrite)


def export_checkpoint(
    path, out: str | Path, settings, data: EvalDataSettings, load: LoadSettings, overwrite: bool = False, memory=None
):
    """Export the checkpoint at ``path``, whichever its task, to the folder ``out`` (written atomically;
    ``overwrite``: replace a previous export there); the settings of the other task refused in one line first."""
    ckpt = read_checkpoint(path)
    task = task_for(ckpt)
    task.refuse_others(settings, data, load)
    return task.export_checkpoint(path, ckpt, out, settings, data, load, overwrite, memory)


def diff_checkpoints(
    path_a,
    path_b,
    settings,
    data: EvalDataSettings,
    load: LoadSettings,
    on_classes=lambda classes: None,
    use_cache=True,
) -> DiffResult:
    """``laya diff``'s job on two checkpoint files of one task: two classifiers compared class by class, two
    language models token by token. One of each is refused, then the settings of the other task, in one line;
    ``on_classes(classes)``: what the caller checks against a classifier's classes before any work
    (``--fail-if-changed``; a language model's: none)."""
    paths, ckpts = (str(path_a), str(path_b)), (read_checkpoint(path_a), read_checkpoint(path_b))
    task, other = (task_for(c) for c in ckpts)
    if task is not other:
        lm, clf = paths if task.name == "lm" else paths[::-1]
        raise LayaError(f"laya diff compares two language models or two classifiers: {lm} is a language model's "
                        f"checkpoint (laya train --task lm), {clf} a classifier's")  # fmt: skip
    task.refuse_others(settings, data, load)
    return task.diff_checkpoints(paths, ckpts, settings, data, load, on_classes, use_cache)
