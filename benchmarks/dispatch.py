"""Operations and host synchronisations per phase, against the model's own forward, counted on the CPU (issue 73).

    python -m benchmarks.dispatch [--case vit,cnn,bert,gpt2] [--images 32] [--positions 64] [--json FILE] [--quick]

Every ATen operation laya dispatches is one kernel launch on a GPU; where laya's own work is small next to the
model's, the launches, not the arithmetic, set its time there (docs/results/dispatch.md). So each phase is run
once under a ``TorchDispatchMode`` that counts what it dispatches, beside the model's own forward on the same
inputs; the ratio is what a GPU pays in launches, whatever the machine this runs on. Of them, views (``view``,
``t``, ``expand``, ``detach``, …: aliases of their input, ``OpOverload.is_view``) launch no kernel, only the
dispatcher's host work: the ``launches`` column counts the operations less the views, the closer prediction of a
GPU's kernel launches (the targets are judged on operations, as the issue counts them).

Host synchronisations are counted in three kinds: scalar reads (``aten._local_scalar_dense``: ``.item()``,
``float(t)``, ``if t``), data-dependent shapes (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``:
the host waits for the device to size the result), and host copies (calls of ``.cpu()``, ``.tolist()``,
``.numpy()``). On the CPU every such call is counted, including those on a tensor already on the host (free on a
GPU too), so the counts are an upper bound of a GPU run's synchronisations.

Cases (random weights, no download, one batch):
  vit   timm ``vit_tiny_patch16_224`` tapped at its 12 blocks (CLS token), ``--images`` 224×224 images;
  cnn   timm ``resnet18`` tapped at its 8 residual blocks, ``--images`` 64×64 images;
  bert  a 4-layer BERT built from its config (width 64), ``--images`` texts of 32 tokens (mean pool);
  gpt2  a 4-layer GPT-2 built from its config (width 64, vocabulary 2,048), blocks of 32 tokens; its LAYA head and
        tuned lens trained for one epoch (``train_lm``) on made-up sentences, then ``--positions`` positions audited.

Phases (the classifier cases): ``forward`` (the plain model with its own classifier), ``extraction`` (laya's taps,
``model.features``), ``train step`` (one ``training.loop`` step of the head: forward, cross-entropy, backward,
Adam), ``head audit`` (``laya audit``'s default at head scope on the extracted features: laya, ig, gradxact,
random, their metrics and intervals), ``network audit`` (the same at network scope, ``--ablation bypass``; the first
in the process, as ``laya audit`` runs it: with the once-per-model work, the backbone's chain traced and checked),
``network audit, a batch more`` (an audit of three batches less one of two, both after the first: what each further
batch of a long audit costs) and ``network estimate (this machine)`` (the line's estimate before a network-scope
audit, ``auditing/estimate.py``: a one-batch audit with it less without it). The network audits are counted without
the estimate: what it runs depends on the time it measures (on a loaded CPU, a probe a GPU would skip), so with it
the counts would depend on the machine's load; its own row is this machine's.
GPT-2: ``forward`` (the model with its hidden states over the training batch), ``extraction`` (``token_states``),
``train step`` (``training.lm.train_step``, the default lens) and ``per-token audit`` (``token_audit_job`` at head
scope: laya, ig, gradxact, random). Ratios: each phase's operations over the forward's; the per-token audit per
position over the forward per token.

Targets (issue 73): the default audit ≤ 4× the forward's operations (head scope, and network scope: a frozen
timm/torchvision model's default question); a language model's training step
≤ 3×; the per-token audit ≤ 3× per position. ``--quick``: 4 images / 8 positions, the cnn case at 32 px
(the code path checked in seconds: its ratios say little).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SCALAR_READS = {"_local_scalar_dense"}
SIZED_BY_DATA = {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "_unique"}
HOST_COPIES = ("cpu", "tolist", "numpy")
AUDIT_GOAL, LM_GOAL = 4.0, 3.0


class Tally:
    """What one phase dispatched: operations by name, and host synchronisations by kind."""

    def __init__(self):
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self.views: Counter = Counter()  # of ``ops``, the views (aliases of their input: no kernel on a GPU)

    @property
    def n_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def n_launches(self) -> int:
        """Operations less views: what a GPU launches kernels for (an upper bound: allocations such as ``empty``
        and copies to the host are counted too)."""
        return self.n_ops - sum(self.views.values())

    @property
    def n_syncs(self) -> int:
        return sum(self.syncs.values())

    def to_dict(self, top: int = 8) -> dict:
        return {"ops": self.n_ops, "launches": self.n_launches, "syncs": self.n_syncs, "sync_kinds": dict(self.syncs),
                "top": dict(self.ops.most_common(top))}  # fmt: skip


class _Counting(TorchDispatchMode):
    def __init__(self, tally: Tally):
        super().__init__()
        self.tally = tally

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.tally.ops[name] += 1
        if func.is_view:
            self.tally.views[name] += 1
        if name in SCALAR_READS:
            self.tally.syncs["scalar read"] += 1
        elif name in SIZED_BY_DATA or (name == "index" and _bool_index(args)):
            self.tally.syncs["data-dependent shape"] += 1
        return func(*args, **(kwargs or {}))


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


@contextlib.contextmanager
def _host_copies(tally: Tally):
    """Count ``Tensor.cpu`` / ``tolist`` / ``numpy`` calls (no ATen operation on a CPU tensor: patched for the
    phase, restored after)."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_COPIES}

    def counted(name):
        original = saved[name]

        def method(self, *args, **kwargs):
            tally.syncs["host copy"] += 1
            return original(self, *args, **kwargs)

        return method

    try:
        for name in HOST_COPIES:
            setattr(torch.Tensor, name, counted(name))
        yield
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)


def count(fn) -> Tally:
    """Run ``fn()`` once and count what it dispatches."""
    tally = Tally()
    with _host_copies(tally), _Counting(tally):
        fn()
    return tally


# --------------------------------------------------------------------------- the classifier cases


def image_case(name: str, side: int, n: int):
    """(plain timm model, LayaModel, uint8 images): ``benchmarks.audit_floor``'s build (frozen, random weights)."""
    from .audit_floor import build

    return build(name, side, n)


def text_case(n: int, work: Path, length: int = 32):
    """(plain BERT, LayaModel over its frozen layers, token batch (n, 2, length)): a BERT built from its config."""
    import transformers

    from laya_cli.backbones.build import BackboneSpec, build_backbone
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel

    config = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(work / "bert")
    spec = BackboneSpec(f"hf:{work / 'bert'}", pool="mean", max_length=length)
    backbone = build_backbone(spec).eval()
    plain = transformers.AutoModel.from_pretrained(work / "bert").eval()
    for p in (*backbone.parameters(), *plain.parameters()):
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 1000, (n, length), generator=g)
    tokens = torch.stack([ids, torch.ones_like(ids)], dim=1)
    with torch.no_grad():
        feats = backbone(tokens)
    head = build_head("laya", [f.shape[-1] for f in feats], 3).eval()
    model = LayaModel(backbone, head, spec, "laya", ["a", "b", "c"], [f.mean(0) for f in feats])
    model.checkpoint = {"tap_reference": None}
    return plain, model, tokens


@torch.no_grad()
def plain_forward(plain, model, x) -> None:
    from laya_cli.features.extraction import to_float_images

    if x.dtype == torch.uint8:
        plain(model.backbone.adapter(to_float_images(x)))
    else:
        plain(input_ids=x[:, 0], attention_mask=x[:, 1])


def train_stepper(model, feats, labels):
    """One step of the head's training (``training.loop``'s, no alignment term: forward, loss, backward, Adam) on a
    copy of the head, after one step untimed (Adam's state is made at its first step, once per run)."""
    import copy

    from laya_cli.training.loop import _step

    head = copy.deepcopy(model.head).train()
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-4, foreach=True)  # torch's default on a GPU
    step = lambda: _step(head, optimizer, [f.clone() for f in feats], labels, "cpu", None)  # noqa: E731
    step()
    return step


def scoped_audit(model, data, scope: str, n: int, estimate: bool = False) -> None:
    """``laya audit``'s default at ``scope`` in batches of ``n``; the network scope's estimate (``estimate``: the line
    said before a long audit, ``auditing/estimate.py``) left out unless asked, since what it runs depends on the time
    it measures (on a loaded CPU a probe a GPU would skip), so the counts would depend on the machine's load."""
    from laya_cli.auditing import job
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings, compare_for

    settings = AuditSettings(ablation="bypass" if scope == "network" else "mean", batch_size=n).validate()
    saved = job.audit_eta
    if not estimate:
        job.audit_eta = lambda *args, **kwargs: None
    try:
        job.run_scoped_audit(model, data, parse_methods(compare_for(None, scope)), settings, scope)
    finally:
        job.audit_eta = saved


def classifier_phases(plain, model, x) -> dict[str, Tally]:
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.evaldata import EvalData

    from .audit_floor import eval_data

    n = len(x)
    if x.dtype == torch.uint8:
        data = eval_data(model, x)
    else:
        feats = LayerFeatures(model.features(x), torch.zeros(n, dtype=torch.long))
        data = EvalData(feats, x, torch.arange(n), "random")
    labels = torch.arange(n) % len(model.classes)
    feats = [f.clone() for f in data.features.feats]
    for warm in (lambda: plain_forward(plain, model, x), lambda: scoped_audit(model, data, "head", n)):
        warm()  # first calls' lazy set-up (imports, caches) is no part of a phase
    out = {
        "forward": count(lambda: plain_forward(plain, model, x)),
        "extraction": count(lambda: model.features(x)),
        "train step": count(train_stepper(model, feats, labels)),
        "head audit": count(lambda: scoped_audit(model, data, "head", n)),
        "network audit": count(lambda: scoped_audit(model, data, "network", n)),  # as `laya audit` runs it: first
    }
    two, three = _repeated(model, data, x, 2), _repeated(model, data, x, 3)
    out["network audit, a batch more"] = batch_more(model, two, three, n)
    out["network estimate (this machine)"] = estimate_alone(model, data, n)
    return out


def _difference(more: Tally, less: Tally) -> Tally:
    diff = Tally()
    diff.ops, diff.syncs, diff.views = Counter(more.ops), Counter(more.syncs), Counter(more.views)
    diff.ops.subtract(less.ops)
    diff.syncs.subtract(less.syncs)
    diff.views.subtract(less.views)
    return diff


def estimate_alone(model, data, n: int) -> Tally:
    """What the estimate adds to a one-batch network audit on this machine: the audit with it less without it. Its
    work depends on the time it measures (a probe where the audit may be near the 3-minute line), so this row is this
    machine's, not a GPU's: where a GPU's passes are short, one forward."""
    with_it = count(lambda: scoped_audit(model, data, "network", n, estimate=True))
    return _difference(with_it, count(lambda: scoped_audit(model, data, "network", n)))


def _repeated(model, data, x, times: int):
    """The audit's data ``times`` over (the same inputs again): ``times`` batches of ``len(x)``."""
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.evaldata import EvalData

    from .audit_floor import eval_data

    xs = torch.cat([x] * times)
    if x.dtype == torch.uint8:
        return eval_data(model, xs)
    feats = [torch.cat([f] * times) for f in data.features.feats]
    return EvalData(LayerFeatures(feats, torch.zeros(len(xs), dtype=torch.long)), xs, torch.arange(len(xs)), "random")


def batch_more(model, two, three, n: int) -> Tally:
    """What one more batch adds to a network-scope audit: an audit of three batches of ``n`` less one of two, both
    after the first (``network audit``), so that neither carries the once-per-model work (the backbone's chain traced
    and checked, ``can_continue``) and both make the same estimate (a multi-batch audit's: its whole first batch
    probed and kept), and the difference is a batch's own work (and what the summaries add for its samples)."""
    return _difference(count(lambda: scoped_audit(model, three, "network", n)),
                       count(lambda: scoped_audit(model, two, "network", n)))  # fmt: skip


# --------------------------------------------------------------------------- the language-model case


def lm_case(work: Path, quick: bool):
    """(model folder, trained LayaLM checkpoint path, corpus folder): a tiny GPT-2 and its heads, one epoch."""
    from benchmarks.synthetic import sentences

    from .lm_cost import build_model, train_seconds, write_corpus

    texts = sentences(120 if quick else 300)
    corpus = write_corpus(work, texts[: len(texts) * 9 // 10], texts[len(texts) * 9 // 10 :])
    model_dir = build_model(work, texts, 4, 64, 2048, 32)
    args = argparse.Namespace(block_size=32, batch=4 if quick else 8, eval_tokens=64)
    train_seconds(model_dir, corpus, work / "lm.pt", args, None)
    return model_dir, work / "lm.pt", corpus


def lm_phases(work: Path, positions: int, quick: bool) -> tuple[dict[str, Tally], dict]:
    from transformers import AutoModelForCausalLM

    from laya_cli.auditing.lm import token_audit_job, token_data
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.lm_positions import token_states
    from laya_cli.model.checkpoint import read_checkpoint
    from laya_cli.model.lm_heads import lm_from_checkpoint
    from laya_cli.training.lm import train_step as lm_step

    from .lm_cost import language_model, read_blocks

    model_dir, ckpt, corpus = lm_case(work, quick)
    model = lm_from_checkpoint(read_checkpoint(ckpt))
    blocks = read_blocks(language_model(model_dir), corpus, 32, 4 if quick else 8, 1337, 64)
    x = blocks[0]
    causal = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    data = token_data(model, None, positions, 8)
    settings = AuditSettings(batch_size=positions).validate()
    methods = ["laya", "ig", "gradxact", "random"]
    params = {id(p): p for m in (model.laya, model.tuned) if m is not None for p in m.parameters() if p.requires_grad}
    opt = torch.optim.Adam(list(params.values()), lr=1e-5, foreach=True)  # torch's default on a GPU

    def forward():
        with torch.no_grad():
            causal(input_ids=x[:, 0], attention_mask=x[:, 1], output_hidden_states=True)

    hs, targets = token_states(model.lm, x)

    def step():
        lm_step(model.laya, model.tuned, hs, targets, "kl", opt, 0.0)

    audit = lambda: token_audit_job(model, methods, settings, "head", None, positions, None, data)  # noqa: E731
    forward(), audit()  # warm-up
    counted = {"forward": count(forward), "extraction": count(lambda: token_states(model.lm, x)),
               "per-token audit": count(audit)}  # fmt: skip
    step()  # Adam's state is made at its first step (once per run); the step moves the heads: after the audit
    out = {**{k: counted[k] for k in ("forward", "extraction")}, "train step": count(step),
           "per-token audit": counted["per-token audit"]}  # fmt: skip
    tokens = x[:, 0].numel()
    return out, {"tokens": tokens, "positions": len(data.features), "targets": len(targets)}


# --------------------------------------------------------------------------- the run and its table


CASES = {"vit": ("vit_tiny_patch16_224", 224), "cnn": ("resnet18", 64), "bert": None, "gpt2": None}


def run_case(case: str, images: int, positions: int, quick: bool, work: Path) -> dict:
    sizes = {}
    if case == "gpt2":
        phases, sizes = lm_phases(work, positions, quick)
    elif case == "bert":
        phases = classifier_phases(*text_case(images, work))
    else:
        name, side = CASES[case]
        phases = classifier_phases(*image_case(name, 32 if quick and case == "cnn" else side, images))
    forward = phases["forward"].n_ops
    out = {"case": case, "images": images if case != "gpt2" else None, **sizes, "phases": {}}
    for k, t in phases.items():
        row = {**t.to_dict(), "over_forward": t.n_ops / forward,
               "launches_over_forward": t.n_launches / phases["forward"].n_launches}  # fmt: skip
        if k == "per-token audit":  # per position against the forward per token
            row["per_position_over_forward_per_token"] = (t.n_ops / sizes["positions"]) / (forward / sizes["tokens"])
        out["phases"][k] = row
    return out


def _verdict(ratio: float, goal: float) -> str:
    return f"(goal ≤ {goal:g}×: {'met' if ratio <= goal else 'missed'})"


def _goal(case: str, phase: str, row: dict) -> str:
    ratio = row["over_forward"]
    if phase == "head audit" or phase.startswith("network audit"):
        return f"{ratio:.1f}× {_verdict(ratio, AUDIT_GOAL)}"
    if phase == "train step" and case == "gpt2":
        return f"{ratio:.1f}× {_verdict(ratio, LM_GOAL)}"
    if phase == "per-token audit":
        r = row["per_position_over_forward_per_token"]
        return f"{ratio:.1f}×; per position {r:.1f}× {_verdict(r, LM_GOAL)}"
    return f"{ratio:.2f}×"


def table(results: list[dict]) -> list[str]:
    lines = ["| case | phase | operations | × forward | launches (less views) | host syncs (scalar / shape / copy) "
             "| most dispatched |", "|---|---|---:|---|---:|---|---|"]  # fmt: skip
    for r in results:
        for phase, row in r["phases"].items():
            k = row["sync_kinds"]
            kinds = " / ".join(str(k.get(kind, 0)) for kind in ("scalar read", "data-dependent shape", "host copy"))
            top = ", ".join(f"{name} {c}" for name, c in list(row["top"].items())[:4])
            goal = _goal(r["case"], phase, row)
            launches = f"{row['launches']:,} ({row['launches_over_forward']:.1f}×)"
            lines.append(
                f"| {r['case']} | {phase} | {row['ops']:,} | {goal} | {launches} | {row['syncs']} ({kinds}) | {top} |"
            )
    return lines


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dispatch", description=__doc__.splitlines()[0])
    p.add_argument("--case", default="vit,cnn,bert,gpt2", help="a comma-separated list of vit, cnn, bert, gpt2")
    p.add_argument("--images", type=int, default=32, help="images (texts) per batch: the classifier cases")
    p.add_argument("--positions", type=int, default=64, help="positions audited: the gpt2 case")
    p.add_argument("--quick", action="store_true", help="tiny sizes: the code path in seconds")
    p.add_argument("--json", dest="json_out", default=None, help="write the counts to this file")
    a = p.parse_args(argv)
    a.case = [c.strip() for c in a.case.split(",") if c.strip()]
    bad = [c for c in a.case if c not in CASES]
    if bad or not a.case:
        p.error(f"--case: a comma-separated list of {', '.join(CASES)}")
    if a.quick:
        a.images, a.positions = 4, 8
    return a


def main(argv=None) -> list[dict]:
    from laya_cli.runtime import progress

    from .say import say

    a = parse(argv)
    progress.set_enabled(False)
    torch.manual_seed(0)
    results = []
    with tempfile.TemporaryDirectory(prefix="laya-dispatch-") as tmp:
        for case in a.case:
            results.append(run_case(case, a.images, a.positions, a.quick, Path(tmp) / case))
    for line in table(results):
        say(line)
    if a.json_out:
        from laya_cli.runtime.fileio import atomic_write_text

        atomic_write_text(a.json_out, json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
