"""Every model type transformers ships, through laya's whole pipeline: ``python -m benchmarks.zoo --sweep --source hf
--all [--only a,b] [--json FILE] [--markdown FILE] [--timeout S]``.

The types are ``AutoModel``'s (``MODEL_MAPPING_NAMES``). Each is built from its own default config, shrunk
generically (``shrink``: layers, widths, heads, feed-forward sizes, experts, vocabulary, image size; sub-configs
too) with ``AutoModel.from_config``, saved with ``save_pretrained`` and run as a user would:
``laya train --backbone hf:DIR`` on a few synthetic samples (token texts or drawn images) for one epoch, then
``laya audit --scope both`` (default settings, IG refinement included), ``laya export`` and
``laya depth --truncate``. Each model runs in a forked child with a timeout, so a hang or a crash is one row.

A row is **pass** (every step exit 0), **refused** (a step exits 2 with a one-line reason), **crash** (exit 3, a
timeout, a dead child) or **out of scope**: a type that cannot be built from a config offline, or whose model takes
neither ``input_ids`` nor ``pixel_values`` (audio, time series, multimodal inputs without a text or vision tower
laya reduces to). Failures are grouped by reason.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import random
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_PARAMS = 30_000_000  # a shrunk model the sweep runs on CPU in seconds; above it the row says the shrink fell short
NO_SIZE = 64  # the image side of a model whose config names none (a CNN: any side)
LAYERS, HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB, IMAGE, PATCH = 3, 32, 2, 16, 64, 512, 32, 8
INT_RULES = {  # config attribute -> a small value (only ints are touched)
    **dict.fromkeys(
        (
            "num_hidden_layers",
            "num_layers",
            "n_layer",
            "n_layers",
            "num_encoder_layers",
            "num_decoder_layers",
            "encoder_layers",
            "decoder_layers",
            "num_text_layers",
            "num_vision_layers",
        ),
        LAYERS,
    ),
    **dict.fromkeys(
        ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "embedding_size", "word_embed_proj_dim"), HIDDEN
    ),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads"), HEADS
    ),
    **dict.fromkeys(("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"), HEADS),
    **dict.fromkeys(("mamba_n_heads",), HEADS),
    **dict.fromkeys(("rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim"), 8),
    **dict.fromkeys(("v_head_dim", "kv_lora_rank", "q_lora_rank"), HEAD_DIM),
    **dict.fromkeys(("vocab_size_per_layer_input",), VOCAB),
    **dict.fromkeys(("hidden_size_per_layer_input",), 16),
    **dict.fromkeys(("head_dim", "kv_channels", "d_kv", "attention_head_dim"), HEAD_DIM),
    **dict.fromkeys(
        (
            "intermediate_size",
            "ffn_dim",
            "d_ff",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "n_inner",
            "ffn_hidden_size",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_intermediate_size",
        ),
        FFN,
    ),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_k", "num_selected_experts"), 2),
    "image_size": IMAGE,
}
FLOAT_RULES = {"width_coefficient": 0.25, "depth_coefficient": 0.25, "width_multiplier": 0.25}
DERIVED = {"num_layers", "hidden_size", "num_hidden_layers"}  # what a staged config computes from its stages
WIDTH_LISTS = ("hidden_sizes", "embed_dims", "dims", "channels", "hidden_dims", "neck_hidden_sizes")
LIST_RULES = {"depths": 1, "num_heads": HEADS, "encoder_depths": 1, "decoder_depths": 1}  # per-stage lists


@dataclass
class Row:
    model_type: str
    status: str = ""  # pass | refused | crash | out of scope
    stage: str = ""  # build | train | audit | export | depth
    reason: str = ""
    kind: str = ""  # text | vision
    shrink: str = ""  # how far the config was shrunk: full | layers | none
    seconds: float = 0.0
    steps: dict = field(default_factory=dict)  # step -> exit code


class OutOfScope(Exception):
    pass


# --------------------------------------------------------------------------- configs


def _special_ids(d: dict) -> list[int]:
    ids = []
    for key, value in d.items():
        if re.search(r"_(token_id|token_index|id)$", key) and isinstance(value, int) and value >= 0:
            ids.append(value)
        elif key.endswith("_token_id") and isinstance(value, list):
            ids += [v for v in value if isinstance(v, int)]
    return ids


def _ints(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, int) for v in value)


def shrink_dict(d: dict, full: bool = True) -> dict:
    """A config's ``to_dict()`` made small in place (sub-configs too): fewer layers and a smaller image always; with
    ``full``, narrower too (widths, heads, feed-forward, experts, per-stage lists, vocabulary — never below the
    special token ids)."""
    for value in d.values():
        if isinstance(value, dict) and "model_type" in value:
            shrink_dict(value, full)
    staged = isinstance(d.get("depths"), (list, tuple))  # Swin-like: layers and width follow from the stages
    for key, small in INT_RULES.items():
        value, is_layers = d.get(key), small == LAYERS and "layer" in key
        if staged and key in DERIVED or not (full or is_layers or key == "image_size"):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > small:
            d[key] = small
    if full:
        _shrink_widths(d)
    rope = d.get("rope_parameters") or d.get("rope_scaling")
    head_dim = d.get("head_dim")
    if not isinstance(head_dim, int) and isinstance(d.get("hidden_size"), int) and d.get("num_attention_heads"):
        head_dim = d["hidden_size"] // d["num_attention_heads"]
    if isinstance(rope, dict) and _ints(rope.get("mrope_section")) and isinstance(head_dim, int):
        half, k = head_dim // 2, len(rope["mrope_section"])  # sections of the rotary half, summing to it
        rope["mrope_section"] = [half // k + (half % k if i == 0 else 0) for i in range(k)]
    if isinstance(d.get("qk_rope_head_dim"), int) and "head_dim" in d:  # multi-head latent attention: rotary dims
        d["head_dim"] = d["qk_rope_head_dim"]
        d["qk_head_dim"] = d["qk_rope_head_dim"] + d.get("qk_nope_head_dim", 0)
    if _ints(d.get("image_size")) and len(d["image_size"]) == 2 and min(d["image_size"]) > 64:
        d["image_size"] = [64, 64]
    layers = d.get("num_hidden_layers")
    if isinstance(d.get("layer_types"), list) and isinstance(layers, int):
        d["layer_types"] = d["layer_types"][:layers]
    return d


def _shrink_widths(d: dict) -> None:
    for key, small in LIST_RULES.items():
        if _ints(d.get(key)):
            d[key] = [min(v, small) for v in d[key]]
    for key, small in FLOAT_RULES.items():  # EfficientNet-style scaling coefficients
        if isinstance(d.get(key), float) and d[key] > small:
            d[key] = small
    for key in WIDTH_LISTS:  # per-stage widths: scaled so the first is 32 (GroupNorm's 32 groups still divide)
        if _ints(d.get(key)) and d[key][0] > 32:
            factor = d[key][0] // 32
            d[key] = [max(8, v // factor) for v in d[key]]
    if isinstance(d.get("patch_size"), int) and d["patch_size"] > PATCH:
        d["patch_size"] = PATCH
    vocab = d.get("vocab_size")
    if isinstance(vocab, int) and vocab > VOCAB:
        d["vocab_size"] = max([VOCAB, *(i + 1 for i in _special_ids(d) if i < vocab)])


def _changed(old: dict, new: dict) -> dict:
    """What ``new`` changes of ``old``; a changed sub-config whole; the stages a backbone outputs reset (a staged
    config with fewer layers computes them again)."""
    out = {k: v for k, v in new.items() if old.get(k) != v}
    layers = out.get("num_hidden_layers")
    if isinstance(layers, int) and not isinstance(new.get("depths"), list):  # a backbone's stages: one per layer
        if _ints(old.get("out_indices")):
            out["out_indices"] = [min(i, layers) for i in old["out_indices"][-1:]]
        if isinstance(old.get("out_features"), list) and old["out_features"]:
            out["out_features"] = [f"stage{layers}"]
    return out


def shrink(config, full: bool = True):
    """A small copy of ``config``: its type built again with the shrunk values (``shrink_dict``) as arguments, so
    what it derives from them (stage names, per-layer lists) follows."""
    import copy

    import transformers

    old = config.to_dict()
    changes = _changed(old, shrink_dict(copy.deepcopy(old), full))
    return transformers.AutoConfig.for_model(config.model_type, **changes)


def _input_kind(model) -> str:
    """text | vision: the input of what laya taps (its reduction of the model: the base model, an encoder–decoder's
    encoder, a dual model's vision tower); OutOfScope when that takes neither tokens nor images."""
    from laya_cli.backbones.hf import _base_model, is_text
    from laya_cli.runtime.errors import LayaError

    try:
        tapped = _base_model(model, model.config.model_type)
    except LayaError as e:
        raise OutOfScope(str(e).replace(f"hf:{model.config.model_type} ", "")) from None
    return "text" if is_text(tapped) else "vision"


def build_folder(model_type: str, folder: Path) -> tuple[str, str]:
    """Build the smallest config of ``model_type`` that ``AutoModel`` builds, save it to ``folder``: (kind,
    shrink). OutOfScope when no config builds offline or the model takes neither tokens nor images."""
    import torch
    import transformers

    try:
        base = transformers.AutoConfig.for_model(model_type)
    except Exception as e:
        raise OutOfScope(f"no config offline: {_line(e)}") from None
    error, built = None, None
    for how in ("full", "layers", "none"):
        try:
            config = shrink(base, full=how == "full") if how != "none" else base
            with torch.device("meta"):  # counted before anything is allocated
                params = sum(p.numel() for p in transformers.AutoModel.from_config(config).parameters())
            if params > MAX_PARAMS:
                error = OutOfScope(
                    f"the generic shrink leaves {params / 1e6:.0f} M parameters (the sweep's limit: "
                    f"{MAX_PARAMS / 1e6:.0f} M)"
                )
                continue
            torch.manual_seed(0)
            model = transformers.AutoModel.from_config(config)
        except Exception as e:
            error = e
            continue
        kind = _input_kind(model)
        built = built or (model, kind, how)
        if _runs(model, kind) and _reloads(transformers, model, folder):  # a shrink that breaks the model is ours
            return kind, how
    if built is None and isinstance(error, OutOfScope):
        raise error
    if built is None:
        raise OutOfScope(f"AutoModel cannot build it from its config: {_line(error)}")
    model, kind, how = built
    model.save_pretrained(folder)
    return kind, how


def _reloads(transformers, model, folder: Path) -> bool:
    """Saved to ``folder``, whether ``AutoModel.from_pretrained`` loads it back (the config round-trips)."""
    try:
        model.save_pretrained(folder)
        transformers.AutoModel.from_pretrained(folder)
        return True
    except Exception:
        return False


def _runs(model, kind: str) -> bool:
    """Whether what laya taps runs on laya's own probe batch (a shrink that breaks the model is the sweep's)."""
    from laya_cli.backbones.hf import _base_model, _probe_inputs, probe_call

    try:
        tapped = _base_model(model, model.config.model_type).eval()
        probe_call(tapped, {**_probe_inputs(tapped), "output_hidden_states": True})
        return True
    except Exception:
        return False


def _line(e: BaseException | None) -> str:
    text = str(e).strip().splitlines() if e is not None else []
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


# --------------------------------------------------------------------------- data and the pipeline

WORDS = {
    "sport": "ball goal team match score player".split(),
    "food": "bread cheese apple soup rice pasta".split(),
    "tech": "computer code network chip data server".split(),
}


def write_texts(root: Path, train: int = 24, test: int = 12) -> Path:
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("test", test)):
        with open(root / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            for i in range(n):
                topic = list(WORDS)[i % 3]
                w.writerow([" ".join(rng.choices(WORDS[topic], k=5) + ["the", "a"]), topic])
    return root


def _image_side(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    for c in (config, config.get("vision_config") or {}):
        size = c.get("image_size")
        size = size[0] if isinstance(size, list) and size else size
        if isinstance(size, int):
            return size
    return NO_SIZE


def pipeline_steps(folder: Path, kind: str, data: Path, work: Path) -> list[tuple[str, list[str]]]:
    ckpt, small = work / "m.pt", work / "small.pt"
    if kind == "text":
        dataset = ["--dataset", f"csv:{data / 'text'}", "--max-length", "16"]
    else:
        side = _image_side(folder)
        images = data / f"images{side}"
        if not images.exists():
            from benchmarks.synthetic import make_image_folder

            make_image_folder(images, per_class=6, size=side)
        dataset = ["--dataset", f"folder:{images}", "--input-size", str(side)]
    common = ["--device", "cpu", "-q"]
    return [
        (
            "train",
            ["train", "--backbone", f"hf:{folder}", *dataset, "--epochs", "1", "--batch-size", "8"]
            + ["--out", str(ckpt), *common],
        ),
        ("audit", ["audit", str(ckpt), "--scope", "both", *common]),
        ("export", ["export", str(ckpt), "--out", str(work / "export"), "--no-plots", "--overwrite", *common]),
        ("depth", ["depth", str(ckpt), "--truncate", "2", "--out", str(small), "--device", "cpu"]),
    ]


def _reason(output: str, code: int) -> str:
    """The one line a step said: a refusal's message; a crash's exception line (before laya's 'internal error')."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    if code == 3:
        tb = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*", ln)]
        return tb[-1][:200] if tb else (lines[-1][:200] if lines else "")
    errs = [ln for ln in lines if ln.lower().startswith(("error", "usage error"))]
    return (errs[-1] if errs else (lines[-1] if lines else ""))[:200]


def run_model(model_type: str, data: Path, work: Path) -> Row:
    """One type end to end, in this process (``sweep_all`` forks one per type)."""
    from typer.testing import CliRunner

    from laya_cli.cli.group import app

    row, start = Row(model_type), time.perf_counter()
    try:
        row.kind, row.shrink = build_folder(model_type, work / "model")
    except OutOfScope as e:
        row.status, row.stage, row.reason = "out of scope", "build", str(e)
        return row
    os.environ["LAYA_CACHE_DIR"] = str(work / "cache")
    for stage, args in pipeline_steps(work / "model", row.kind, data, work):
        if stage == "depth":  # --truncate 2, or 1 for a model of one tap (RT-DETR's encoder)
            args[args.index("--truncate") + 1] = str(min(2, _taps(work / "m.pt")))
        res = CliRunner().invoke(app, args)
        row.steps[stage] = res.exit_code
        if res.exit_code != 0:
            row.stage, row.reason = stage, _reason(res.output, res.exit_code)
            row.status = "refused" if res.exit_code == 2 else "crash"
            break
    else:
        row.status = "pass"
    row.seconds = time.perf_counter() - start
    return row


def _taps(ckpt: Path) -> int:
    import torch

    return len(torch.load(ckpt, weights_only=True)["backbone"]["formats"])


def _child(model_type: str, data: Path, work: Path, out: Path) -> None:
    import warnings

    import transformers

    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        row = run_model(model_type, data, work)
    except BaseException as e:  # noqa: BLE001 - the sweep's own failure is a row too
        row = Row(model_type, "crash", "sweep", _line(e))
    out.write_text(json.dumps(asdict(row)))


def run_isolated(model_type: str, data: Path, timeout: float) -> Row:
    """``run_model`` in a forked child: a hang past ``timeout`` or a dead child is a crash row."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"laya-hf-{model_type[:20]}-") as tmp:
        work, out = Path(tmp), Path(tmp) / "row.json"
        proc = multiprocessing.get_context("fork").Process(target=_child, args=(model_type, data, work, out))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            row = Row(model_type, "crash", "timeout", f"no result within {timeout:.0f} s")
        elif out.is_file():
            row = Row(**json.loads(out.read_text()))
        else:
            row = Row(model_type, "crash", "child", f"the child died (exit {proc.exitcode})")
    row.seconds = time.perf_counter() - start
    return row


# --------------------------------------------------------------------------- the sweep


def model_types(only=()) -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    types = sorted(MODEL_MAPPING_NAMES)
    return [t for t in types if t in only] if only else types


def warm_up() -> None:
    """Import once, before the forks, what every child would import again: transformers' modeling machinery (a
    first model costs seconds, the next ones a tenth of one) and laya's jobs."""
    import importlib

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    transformers.AutoModel.from_config(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16))
    for name in ("cli.group", "training", "auditing", "exporting", "depthing", "report"):
        importlib.import_module(f"laya_cli.{name}")


def sweep_all(
    only=(), timeout: float = 120.0, say=print, json_file: str | None = None, rerun: str | None = None
) -> list[Row]:
    """Every type (or ``only`` those), one forked child each; with ``rerun``, the rows of that earlier ``--json``
    that passed are kept as they are and only the others run again."""
    warm_up()

    types = model_types(only)
    kept = {r["model_type"]: Row(**r) for r in json.loads(Path(rerun).read_text())} if rerun else {}
    kept = {t: r for t, r in kept.items() if r.status == "pass" and t in types}
    say(f"transformers model types: {len(types)}, {len(types) - len(kept)} to run ({len(kept)} passed in {rerun})")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="laya-hf-data-") as tmp:
        data = Path(tmp)
        write_texts(data / "text")
        for i, t in enumerate(types, 1):
            row = kept.get(t) or run_isolated(t, data, timeout)
            rows.append(row)
            what = row.status + (f" at {row.stage}: {row.reason[:110]}" if row.status != "pass" else "")
            say(f"  [{i}/{len(types)}] {t:36s} {row.kind:6s} {row.seconds:6.1f}s  {what}")
            if json_file:
                Path(json_file).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return rows


def _generic(reason: str) -> str:
    """A reason without the names of models, paths and numbers that make every row's text differ."""
    reason = re.sub(r"hf:\S+", "hf:DIR", reason)
    reason = re.sub(r"/tmp/\S+", "PATH", reason)
    return re.sub(r"\d+", "N", reason)[:140]


def summary(rows: list[Row]) -> list[str]:
    in_scope = [r for r in rows if r.status != "out of scope"]
    n_pass = sum(r.status == "pass" for r in in_scope)
    by = defaultdict(int)
    for r in rows:
        by[r.status] += 1
    pct = 100 * n_pass / len(in_scope) if in_scope else 0.0
    lines = [
        f"{n_pass} of {len(in_scope)} in-scope transformers model types pass train → audit --scope both → export → "
        f"depth --truncate ({pct:.0f} %); refused (exit 2): {by['refused']}; crash: {by['crash']}; "
        f"out of scope: {by['out of scope']} (of {len(rows)} types)"
    ]
    for status in ("crash", "refused", "out of scope"):
        groups = defaultdict(list)
        for r in rows:
            if r.status == status:
                groups[(r.stage, _generic(r.reason))].append(r.model_type)
        if groups:
            lines.append(f"{status}:")
        for (stage, reason), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(
                f"  {len(names):3d} at {stage}: {reason}  [{', '.join(names[:12])}{' …' if len(names) > 12 else ''}]"
            )
    return lines


def markdown(rows: list[Row], seconds: float) -> str:
    head = "| model type | input | result | stage | reason | seconds |\n|---|---|---|---|---|---|\n"
    body = "\n".join(
        f"| `{r.model_type}` | {r.kind or '—'} | {r.status} | {r.stage if r.status != 'pass' else ''} | "
        f"{r.reason.replace('|', '/')[:140]} | {r.seconds:.1f} |"
        for r in rows
    )
    tail = "\n".join(f"- {ln.strip()}" for ln in summary(rows))
    return f"{head}{body}\n\n{tail}\n\nThe whole sweep: {seconds / 60:.1f} min.\n"
