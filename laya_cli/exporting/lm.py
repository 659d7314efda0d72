"""``laya export`` on a ``--task lm`` checkpoint: the LAYA head's α at every held-out position, as a table, a
picture and a text explorer.

What gets written (documented in docs/lm.md, "Export: per-token α and the text explorer"):

  DIR/tokens.{parquet,csv}      one row per held-out position: block, position, token, token_text, next_token,
                                next_text, predicted, predicted_text, p_predicted, p_next, alpha[<layer>]…,
                                dominant_layer (1-based argmax of α)
  DIR/plots/alpha_heatmap.png   tokens × layers α of the first block (its first ``HEATMAP_TOKENS`` tokens)
  DIR/summary.json              the export marker, task "lm", counts, mean α per layer, the file list
  DIR/report.html               self-contained: the header, the heat map, the text explorer (report/lm_explorer.py)

The positions are the first ``samples`` of the held-out text, block after block (the last block read may be cut),
as ``laya audit`` takes them; predictions and p are the LAYA head's (the model's readout of Σ α_i T_i h_i).
Written like the classifier export: in a temp folder beside DIR, renamed into place at the end.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..features.lm_positions import batches, token_states
from ..model.lm_heads import LayaLM, chunks, lm_from_checkpoint
from ..runtime import fileio, progress
from ..runtime.errors import LayaError, match_choice
from ..runtime.fileio import json_safe, strict_json
from .folder import EXPORT_BATCH, EXPORT_FORMAT, EXPORT_VERSION, Export, check_format, check_out_dir, is_export_dir
from .profiles import alpha_col
from .settings import FORMATS

TOKENS_EXPORTED = 2000  # default --samples for a language model: held-out positions
TOKEN_FILES = {"csv": "tokens.csv", "parquet": "tokens.parquet"}
HEATMAP_FILE = "alpha_heatmap.png"
HEATMAP_TOKENS = 64  # tokens of the first block the heat map shows (a 1,024-token block has no readable labels)


@dataclass(repr=False)
class TokenExport(Export):
    """A language model's export (``Export`` of kind ``"tokens"``): the per-position table and what the report says
    about it."""

    kind: ClassVar[str] = "tokens"

    table: pd.DataFrame
    layers: list[str]
    separator: str  # what goes between two tokens' texts in running text: "" where tokens carry their spaces
    info: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    out: Path | None = None
    files: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.table)

    @property
    def n_blocks(self) -> int:
        return int(self.table["block"].nunique())

    @property
    def alpha(self) -> np.ndarray:
        """(N, L) α per position."""
        return self.table[[alpha_col(n) for n in self.layers]].to_numpy(np.float64)

    @property
    def mean_alpha(self) -> list[float]:
        return self.alpha.mean(0).tolist() if self.n else [float("nan")] * len(self.layers)

    @property
    def accuracy(self) -> float:
        """Top-1 next-token accuracy of the LAYA head over the exported positions."""
        t = self.table
        return float((t["predicted"] == t["next_token"]).mean()) if self.n else float("nan")


def default_token_format() -> str:
    """A language model's per-token table: parquet where pyarrow is installed, else csv."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return "csv"
    return "parquet"


def check_token_format(fmt: str) -> str:
    fmt = match_choice("format", fmt, FORMATS)
    if fmt not in TOKEN_FILES:
        raise LayaError(f"--format {fmt}: a language model's export writes one row per token as csv or parquet")
    return check_format(fmt)


class TokenTexts:
    """Each token id's text, decoded alone from the stored tokenizer (byte-level BPE's "Ġthe" reads " the")."""

    def __init__(self, tokenizer_json: str):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.cache: dict[int, str] = {}
        # a tokenizer without a decoder (the word-level one laya learns) drops the spaces between words
        self.separator = " " if self.tokenizer.decoder is None else ""

    def __call__(self, ids) -> np.ndarray:
        out = []
        for i in np.asarray(ids).tolist():
            if i not in self.cache:
                self.cache[i] = self.text(i)
            out.append(self.cache[i])
        return np.asarray(out, dtype=object)

    def text(self, i: int) -> str:
        """decode([i]); a byte-level token that is part of a character (decoded alone: "\ufffd") as its bytes,
        escaped ("\\xc3")."""
        text = self.tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" not in text:
            return text
        raw, byte_of = self.tokenizer.id_to_token(i) or "", byte_level_bytes()
        if not raw or any(c not in byte_of for c in raw):
            return text
        return bytes(byte_of[c] for c in raw).decode("utf-8", errors="backslashreplace")


@functools.cache
def byte_level_bytes() -> dict[str, int]:
    """GPT-2's byte-level alphabet read back: the printable character that stands for each byte → that byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shift, table = 0, {}
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + shift)] = b
            shift += 1
    return table


@torch.no_grad()
def head_rows(model: LayaLM, hs: Tensor, targets: Tensor) -> dict[str, Tensor]:
    """α (N, L), the head's prediction, its p and p(next token) at N positions, chunk by chunk of the vocabulary."""
    got: dict[str, list[Tensor]] = {"alpha": [], "predicted": [], "p_predicted": [], "p_next": []}
    for s in chunks(len(hs), model.lm.readout.vocabulary):
        out = model.laya(hs[s])
        probs = torch.softmax(out.logits.double(), -1)
        p, pred = probs.max(-1)
        got["alpha"].append(out.alpha.double().cpu())
        got["predicted"].append(pred.cpu())
        got["p_predicted"].append(p.cpu())
        got["p_next"].append(probs.gather(1, targets[s].to(probs.device).unsqueeze(1)).squeeze(1).cpu())
    return {k: torch.cat(v) for k, v in got.items()}


def token_rows(model: LayaLM, corpus, block: int, samples: int) -> dict[str, Tensor]:
    """Block by block from the start of the held-out text, up to ``samples`` positions: every row's numbers."""
    per_batch = max(1, EXPORT_BATCH // block)
    rows: dict[str, list[Tensor]] = {}
    n = 0
    for x in progress.track(
        batches(model.lm, corpus, "test", block, per_batch),
        "exporting positions",
        unit="batch",
        of=f"of {per_batch} blocks of {block} tokens",
    ):
        hs, targets = token_states(model.lm, x)
        got = head_rows(model, hs, targets)
        got["token"], got["next_token"] = x[:, 0, :-1].reshape(-1).long().cpu(), targets.cpu()
        for k, v in got.items():
            rows.setdefault(k, []).append(v)
        n += len(targets)
        if n >= samples:
            break
    return {k: torch.cat(v)[:samples] for k, v in rows.items()}


def token_table(rows: dict[str, Tensor], layers: list[str], block: int, texts: TokenTexts) -> pd.DataFrame:
    n = len(rows["token"])
    index = np.arange(n)
    alpha = rows["alpha"].numpy()
    cols: dict[str, object] = {
        "block": index // (block - 1),
        "position": index % (block - 1),
        "token": rows["token"].numpy(),
        "token_text": texts(rows["token"]),
        "next_token": rows["next_token"].numpy(),
        "next_text": texts(rows["next_token"]),
        "predicted": rows["predicted"].numpy(),
        "predicted_text": texts(rows["predicted"]),
        "p_predicted": rows["p_predicted"].numpy(),
        "p_next": rows["p_next"].numpy(),
    }
    for i, name in enumerate(layers):
        cols[alpha_col(name)] = alpha[:, i]
    cols["dominant_layer"] = alpha.argmax(1) + 1 if n else np.zeros(0, dtype=np.int64)
    return pd.DataFrame(cols)


def compute_token_export(
    model: LayaLM, dataset: str | None, samples: int, info: dict | None = None, encoding: str | None = None
) -> TokenExport:
    """The held-out positions of ``dataset`` (default: the checkpoint's text) through the LAYA head."""
    from ..auditing.lm import held_out_text

    name, corpus, block = held_out_text(model, dataset, encoding)
    rows = token_rows(model, corpus, block, samples)
    if not rows:
        raise LayaError(f"{name}: the held-out text is shorter than one block of {block} tokens")
    texts = TokenTexts(model.lm.backbone.adapter.text.tokenizer)
    layers = [str(n) for n in model.ckpt["layers"]]
    table = token_table(rows, layers, block, texts)
    section = model.ckpt["backbone"]["spec"]
    base = {"backbone": section.get("name"), "head": "laya", "task": "lm", "layers": layers, "dataset": name,
            "block_size": block, "samples": samples}  # fmt: skip
    exp = TokenExport(table, layers, texts.separator, {**base, **(info or {})})
    exp.info.update({"n_tokens": exp.n, "n_blocks": exp.n_blocks, "accuracy": exp.accuracy})
    return exp


# --------------------------------------------------------------------------- writing


def token_summary(exp: TokenExport, fmt: str) -> dict:
    from .. import __version__

    return json_safe(
        {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_VERSION,
            "laya_version": __version__,
            "task": "lm",
            "model": exp.info,
            "n_tokens": exp.n,
            "n_blocks": exp.n_blocks,
            "accuracy": exp.accuracy,
            "tokens_file": TOKEN_FILES[fmt],
            "columns": list(exp.table.columns),
            "mean_alpha": dict(zip(exp.layers, exp.mean_alpha)),
            "notes": exp.notes,
            "files": exp.files,
        }
    )


def heatmap_rows(exp: TokenExport) -> tuple[np.ndarray, list[str]]:
    """α of the first block's first ``HEATMAP_TOKENS`` tokens and their texts."""
    t = exp.table
    first = (t["block"] == t["block"].iloc[0]).to_numpy() if exp.n else np.zeros(0, bool)
    keep = np.flatnonzero(first)[:HEATMAP_TOKENS]
    return exp.alpha[keep], t["token_text"].to_numpy()[keep].tolist()


def _write_tokens(exp: TokenExport, root: Path, fmt: str, plots: bool) -> list[str]:
    from ..report.figures import plot_token_alpha
    from ..report.lm_explorer import render_token_html

    files = [TOKEN_FILES[fmt]]
    if fmt == "csv":
        exp.table.to_csv(root / files[0], index=False)
    else:
        exp.table.to_parquet(root / files[0], engine="pyarrow", index=False)
    heatmap = None
    if plots and exp.n:
        (root / "plots").mkdir()
        alpha, labels = heatmap_rows(exp)
        heatmap = root / "plots" / HEATMAP_FILE
        title = f"α per token and layer: block 0, its first {len(labels)} tokens"
        plot_token_alpha(alpha, labels, exp.layers, title, heatmap)
        files.append(f"plots/{HEATMAP_FILE}")
    exp.files = files = files + ["summary.json", "report.html"]
    (root / "summary.json").write_text(strict_json(token_summary(exp, fmt)), encoding="utf-8")
    page = render_token_html(explorer_input(exp), heatmap.read_bytes() if heatmap else None, plots)
    (root / "report.html").write_text(page, encoding="utf-8")
    return files


def explorer_input(exp: TokenExport) -> dict:
    """What report/lm_explorer.py renders: plain lists and numbers."""
    t = exp.table
    return {
        "info": exp.info,
        "layers": exp.layers,
        "mean_alpha": exp.mean_alpha,
        "separator": exp.separator,
        "notes": exp.notes,
        "files": exp.files,
        "block": t["block"].tolist(),
        "position": t["position"].tolist(),
        "text": t["token_text"].tolist(),
        "next": t["next_text"].tolist(),
        "pred": t["predicted_text"].tolist(),
        "p_pred": t["p_predicted"].tolist(),
        "p_next": t["p_next"].tolist(),
        "alpha": exp.alpha,
        "dominant": t["dominant_layer"].tolist(),
    }


def write_token_export(
    exp: TokenExport, out: str | Path, fmt: str = "parquet", plots: bool = True, overwrite: bool = False
) -> TokenExport:
    fmt = check_token_format(fmt)
    with fileio.atomic_folder(out, overwrite, is_export_dir, "laya export") as tmp:
        files = _write_tokens(exp, tmp, fmt, plots)
    exp.out, exp.files = Path(out).expanduser(), files
    return exp


def run_token_export(
    model: LayaLM,
    out: str | Path,
    fmt: str = "parquet",
    plots: bool = True,
    dataset: str | None = None,
    samples: int | None = None,
    overwrite: bool = False,
    info: dict | None = None,
    encoding: str | None = None,
) -> TokenExport:
    """The whole ``laya export`` of a language model: validate, compute, write atomically."""
    fmt = check_token_format(fmt)
    check_out_dir(out, overwrite)
    exp = compute_token_export(model, dataset, samples or TOKENS_EXPORTED, info, encoding)
    return write_token_export(exp, out, fmt, plots, overwrite)


def export_lm_checkpoint(path, ckpt: dict, out, settings, data, load, overwrite: bool = False) -> TokenExport:
    """``laya export`` of a language model's checkpoint (``ckpt``, read from ``path``; the task chose it:
    ``tasks``), the model placed by ``load.device_map``."""
    model = lm_from_checkpoint(ckpt, load.device_map).to(settings.device)
    fmt, info = settings.format or default_token_format(), {"checkpoint": str(path)}
    return run_token_export(model, out, fmt, settings.plots, data.dataset, data.samples, overwrite, info, data.encoding)
