"""torchrun data parallelism: sharding and gathering, and whole commands under 2 processes (gloo, CPU).

The torchrun tests run the real CLI in subprocesses (``python -m torch.distributed.run
--standalone``, which picks a free port) and compare with a one-process run of the same
command. Both sides run with OMP_NUM_THREADS=1 — torchrun's own default for its workers — so
that a different BLAS thread count does not add its own float rounding to the comparison.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import assert_close_tree, child_env, invoke, run_laya

from laya_cli.runtime import distributed as D
from laya_cli.runtime.memory import MEMORY_KEYS

# --------------------------------------------------------------------------- sharding (no process group)


@pytest.mark.parametrize("n", [0, 1, 5, 7, 256, 359, 1000])
@pytest.mark.parametrize("align", [1, 3, 50, 256])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shards_cover_range_in_order_in_whole_blocks(n, align, world):
    bounds = [D.shard_bounds(n, align, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (_, b), (c, _) in zip(bounds, bounds[1:]):
        assert b == c  # contiguous, in rank order
    for start, stop in bounds:
        assert start <= stop
        assert start == n or start % align == 0  # every shard starts on a batch boundary
        assert stop == n or stop % align == 0
    sizes = [b - a for a, b in bounds]
    blocks = [math.ceil(s / align) for s in sizes]
    assert max(blocks) - min(blocks) <= 1  # as even as whole blocks allow
    idx = torch.cat([D.shard_indices(n, align, rank_=r, world=world) for r in range(world)])
    assert torch.equal(idx, torch.arange(n))


def test_strided_shards_interleave():
    parts = [D.shard_indices(10, strided=True, rank_=r, world=3) for r in range(3)]
    assert [p.tolist() for p in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_without_torchrun_everything_is_a_no_op(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert D.init_from_env() is False
    assert (D.rank(), D.world_size(), D.is_main(), D.active()) == (0, 1, True, False)
    x = torch.arange(6).view(3, 2)
    assert D.gather_rows(x, 3) is x
    assert D.all_true(True) and not D.all_true(False)
    assert D.all_sum([1, 2.5]) == [1.0, 2.5]
    assert D.broadcast_object({"a": 1}) == {"a": 1}
    assert D.shard_bounds(10, 4) == (0, 10)
    D.barrier()
    D.cleanup()


def test_rows_without_torchrun_concatenate_the_batches():
    from laya_cli.auditing.plan import Rows

    rows = Rows(5).add_state("x", width=2).add_state("flag", torch.bool).add_state("total", width=2, reduce="sum")
    for part in torch.arange(10, dtype=torch.float64).view(5, 2).split(2):
        rows.append({"x": part, "flag": part[:, 0] > 3}, total=part.sum(0, keepdim=True))
    got = rows.gather()
    assert torch.equal(got["x"], torch.arange(10, dtype=torch.float64).view(5, 2))
    assert got["flag"].tolist() == [False, False, True, True, True]
    assert got["total"].tolist() == [20.0, 25.0]
    empty = Rows(0).add_state("x", torch.float32, 3).add_state("i", torch.long).gather()  # no batch: still tensors
    assert empty["x"].shape == (0, 3) and empty["x"].dtype == torch.float32 and empty["i"].dtype == torch.long


# --------------------------------------------------------------------------- gather (real gloo group)


def _group_main(rank: int, world: int, init_file: str, check: str):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        globals()[check](rank, world)
    finally:
        dist.destroy_process_group()


def _run_group(check: str, world: int = 3):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            _group_main, args=(world, os.path.join(tmp, "init"), check), nprocs=world, start_method="spawn"
        )


def _check_gather(rank: int, world: int):
    assert D.active() and D.rank() == rank and D.world_size() == world
    for n, align in ((10, 1), (7, 3), (2, 1), (5, 256)):  # uneven, and with empty shards
        lo, hi = D.shard_bounds(n, align)
        full = torch.arange(n * 4, dtype=torch.float64).view(n, 4)
        ints = torch.arange(n) * 10
        flags = torch.arange(n) % 2 == 0
        got = D.gather_rows([full[lo:hi], ints[lo:hi], flags[lo:hi]], n)
        assert torch.equal(got[0], full) and got[0].dtype == torch.float64
        assert torch.equal(got[1], ints)
        assert torch.equal(got[2], flags) and got[2].dtype == torch.bool
        one = D.gather_rows(full[lo:hi], n, dst=0)
        assert torch.equal(one, full) if rank == 0 else one is None
        idx = D.shard_indices(n, strided=True)
        assert torch.equal(D.gather_rows(ints[idx], n, strided=True), ints)
    assert D.all_true(True) and not D.all_true(rank != 1)
    assert D.all_sum([1.0, rank]) == [world, sum(range(world))]
    assert D.broadcast_object(f"from {rank}") == "from 0"
    # user errors: printed by rank 0; by another rank only when rank 0 did not fail the same way
    assert D.should_report_error("bad --samples") == (rank == 0)
    D.barrier()
    assert D.should_report_error(f"dataset missing on rank {rank}", wait_s=0.5) is True


def test_gather_rows_reassembles_uneven_shards_in_order():
    _run_group("_check_gather", world=3)


def _check_rows(rank: int, world: int):
    """The audit scaffold's Rows: states declared alike on every rank come back in sample order (with uneven and
    empty shards), sums add in batch order; Shard's generators replay the draws of the earlier ranks' batches."""
    from laya_cli.auditing.methods import random_scores
    from laya_cli.auditing.plan import Rows, Shard

    for n, bs in ((10, 3), (5, 4), (2, 1)):  # (5, 4): 2 batches over 3 ranks, one shard empty
        shard, full = Shard(n, bs), torch.arange(n * 3, dtype=torch.float64).view(n, 3)
        rows = Rows(n).add_state("x", width=3).add_state("i", torch.long).add_state("flag", torch.bool)
        rows.add_state("total", width=3, reduce="sum").add_state("draws", width=3)
        g = shard.generator(7, n_layers=3)
        for first, _ in shard.walk(range(shard.n_batches), "rows"):
            part = full[first : first + bs]
            rows.append(x=part, i=part[:, 0].long(), flag=part[:, 0] % 2 == 0, total=part.sum(0, keepdim=True))
            rows.append(draws=random_scores(len(part), 3, g).double())
        got = rows.gather()
        assert torch.equal(got["x"], full) and torch.equal(got["i"], full[:, 0].long())
        assert torch.equal(got["flag"], full[:, 0] % 2 == 0) and got["flag"].dtype == torch.bool
        one, total = torch.Generator().manual_seed(7), None
        for part in full.split(bs):  # one process: the batches in order
            total = part.sum(0) if total is None else total + part.sum(0)
        assert torch.equal(got["total"], total)
        draws = [random_scores(len(part), 3, one).double() for part in full.split(bs)]
        assert torch.equal(got["draws"], torch.cat(draws))


def test_rows_gather_every_rank_in_sample_order():
    _run_group("_check_rows", world=3)


def _check_audit_in_group(rank: int, world: int):
    """The library (no CLI): run_audit over sharded batches equals a one-process run on every rank."""
    from helpers import make_head_and_features

    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.laya_model import LayaModel

    head, feats, ref = make_head_and_features(batch=23)
    data = LayerFeatures(feats, torch.arange(23) % 5)
    model = LayaModel(None, head, None, "laya", [str(c) for c in range(5)], ref)
    settings = AuditSettings(batch_size=4, steps=4, by_class=True)  # 6 batches over the ranks, uneven last
    sharded = run_audit(model, data, parse_methods("all"), settings).to_dict()
    D.barrier()
    from laya_cli.runtime import distributed as dist_mod

    # the same audit with the process group hidden: one process
    real = dist_mod.active
    dist_mod.active = lambda: False
    try:
        single = run_audit(model, data, parse_methods("all"), settings).to_dict()
    finally:
        dist_mod.active = real
    assert sharded == single


def test_run_audit_sharded_equals_single_process():
    _run_group("_check_audit_in_group", world=2)


# --------------------------------------------------------------------------- the CLI under torchrun


def laya(*args, procs: int = 1, expect: int = 0) -> subprocess.CompletedProcess:
    """``laya ARGS`` in a fresh process, or under ``torchrun --nproc-per-node procs``; exits ``expect``."""
    env = child_env(OMP_NUM_THREADS="1", LAYA_DIST_TIMEOUT="120", PYTHONUNBUFFERED="1")
    r = run_laya(*args, env=env, timeout=600, procs=procs)
    assert r.returncode == expect, r.stdout + r.stderr
    return r


def _same_options(a: dict, b: dict) -> dict:
    """``a`` with the options ``b`` recorded, once they differ only in the JSON file each run wrote."""
    assert {**a["options"]["values"], "json_out": None} == {**b["options"]["values"], "json_out": None}
    return {**a, "options": b["options"]}


def audit_alike_in_one_and_two_processes(args: list, tmp_path: Path, expect: int) -> tuple[dict, str]:
    """``laya ARGS --json`` in one process and under torchrun with two: the same JSON (floats to 1e-6;
    observed: bit-identical) and the same stdout, printed once. Returns the JSON and the stdout."""
    one = laya(*args, "--json", tmp_path / "one.json", expect=expect)
    two = laya(*args, "--json", tmp_path / "two.json", procs=2, expect=expect)
    a, b = (
        {k: v for k, v in json.loads((tmp_path / f).read_text()).items() if k not in MEMORY_KEYS}
        for f in ("one.json", "two.json")
    )
    assert_close_tree(_same_options(a, b), b, 1e-6)  # the memory keys are measurements of each process
    assert two.stdout == one.stdout
    return a, one.stdout


# --align 0: the plain DDP step (the built-in mlp's default term, which runs under torchrun too, is
# test_torchrun_aligned_training_matches_one_process's)
# --exit-aware 0: a classifier's runs in one process only, so under torchrun the mlp's default of 1 is off
# (training/defaults.py); one process is pinned to the same
TRAIN = ["train", "--dataset", "digits", "--epochs", "3", "--patience", "3", "--seed", "0", "--align", "0",
         "--exit-aware", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def two_trainings(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    (root / "one").mkdir()
    (root / "two").mkdir()
    one = laya(*TRAIN, "--out", root / "one" / "model.pt")
    two = laya(*TRAIN, "--out", root / "two" / "model.pt", procs=2)
    return root, one, two


def test_torchrun_training_matches_one_process(two_trainings):
    """End-to-end (mlp + laya head) with DDP: same global batches, gradients averaged over ranks."""
    root, one, two = two_trainings
    # one checkpoint, no training state or temp file left behind
    assert sorted(p.name for p in (root / "two").iterdir()) == ["model.pt"]
    a = torch.load(root / "one" / "model.pt", weights_only=True)
    b = torch.load(root / "two" / "model.pt", weights_only=True)
    for k, w in a["head"]["weights"].items():
        # float summation order only (each rank sums half the batch; observed max |Δ| ≈ 1e-7)
        torch.testing.assert_close(b["head"]["weights"][k], w, rtol=0, atol=1e-5, msg=k)
    for k, w in a["backbone"]["weights"].items():
        torch.testing.assert_close(b["backbone"]["weights"][k], w, rtol=0, atol=1e-4, msg=k)
    collapse_a, collapse_b = a["metrics"].pop("alpha_collapse"), b["metrics"].pop("alpha_collapse")
    assert a["metrics"] == b["metrics"]
    assert_close_tree(collapse_a, collapse_b, 1e-5)  # α from weights equal up to summation order
    assert [r["val_accuracy"] for r in a["history"]] == [r["val_accuracy"] for r in b["history"]]
    # printed once: 3 epoch lines and one result line, as with one process
    for r in (one, two):
        assert r.stdout.count("test accuracy") == 1, r.stdout
        assert sum(line.startswith("epoch") for line in r.stdout.splitlines()) == 3, r.stdout


def _assert_same_training(a: dict, b: dict, what: str) -> None:
    """Two checkpoints of one training, in one process and in two: the weights equal up to float summation order
    (observed: |Δ| ≤ 1e-6), the same metrics, α and validation history (the validation pass is sharded, so rank 1
    predicts with its own replica: a replica out of sync would change it)."""
    for part, atol in (("head", 1e-5), ("backbone", 1e-4)):
        for k, w in a[part]["weights"].items():
            torch.testing.assert_close(b[part]["weights"][k], w, rtol=0, atol=atol, msg=f"{what}: {part} {k}")
    collapse_a, collapse_b = a["metrics"].pop("alpha_collapse"), b["metrics"].pop("alpha_collapse")
    assert a["metrics"] == b["metrics"], what
    assert_close_tree(collapse_a, collapse_b, 1e-5)
    assert [r["val_accuracy"] for r in a["history"]] == [r["val_accuracy"] for r in b["history"]], what


ALIGNED = ["train", "--dataset", "digits", "--patience", "3", "--seed", "0", "--exit-aware", "0", "-q"]  # as TRAIN


@pytest.mark.parametrize(
    "what, args",
    [
        # the built-in mlp's default: --align 0.3 --align-target both (the network term + the head's own)
        ("both", [*ALIGNED, "--epochs", "3"]),
        pytest.param(  # 1295 training rows: batches 647 + 647 + 1, rank 1's share of the last one empty
            "head",
            [*ALIGNED, "--epochs", "2", "--align", "1", "--align-target", "head", "--batch-size", "647"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_torchrun_aligned_training_matches_one_process(what, args, two_trainings, tmp_path):
    """--align under torchrun (issue 47): the term on each rank's share, in the same DDP backward as the
    cross-entropy, scaled to the global batch (its pairs counted over the ranks), its running state (the head
    target's EMA r̄, the network target's running tap mean, both under ``both``) the same on every rank: the model
    one process trains.
    A frozen backbone: test_torchrun_frozen_network_alignment_runs; a store: ..._align_on_features_read_from_a_store."""
    root, _, _ = two_trainings
    laya(*args, "--out", tmp_path / "one.pt")
    r = laya(*args, "--out", tmp_path / "two.pt", procs=2)
    assert r.stdout.count("test accuracy") == 1, r.stdout
    a, b = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("one", "two"))
    assert (b["train_config"]["align"], b["train_config"]["align_target"]) == ({"both": 0.3}.get(what, 1.0), what)
    if what == "both":  # the term trained: the head differs from the plain training's (same options, --align 0)
        plain = torch.load(root / "one" / "model.pt", weights_only=True)
        moved = max((a["head"]["weights"][k] - w).abs().max().item() for k, w in plain["head"]["weights"].items())
        assert moved > 1e-3, moved
    _assert_same_training(a, b, what)


@pytest.mark.slow
def test_torchrun_frozen_network_alignment_runs(tmp_path):
    """A frozen backbone with --align (every rank trains the same head on all the features, as without the term):
    the network target's cached removals under torchrun, the same head as one process."""
    args = ["train", "--dataset", "digits", "--frozen", "--epochs", "1", "--seed", "0", "--no-cache", "-q"]
    args += ["--align", "1", "--align-target", "network"]
    laya(*args, "--out", tmp_path / "one.pt")
    laya(*args, "--out", tmp_path / "two.pt", procs=2)
    a, b = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("one", "two"))
    assert (b["train_config"]["align"], b["train_config"]["align_target"]) == (1.0, "network")
    for k, w in a["head"]["weights"].items():
        assert torch.equal(b["head"]["weights"][k], w), k  # replicated head training: bit-identical


def test_torchrun_audit_matches_one_process(two_trainings, tmp_path):
    root, _, _ = two_trainings
    model = root / "one" / "model.pt"
    # A gate that fails (exit 1 on every rank) must still leave rank 0's JSON behind.
    args = [
        "audit",
        model,
        "--compare",
        "all",
        "--by-class",
        "--batch-size",
        "100",
        "-q",
        "--fail-under",
        "random:faithfulness=0.99",
    ]
    doc, stdout = audit_alike_in_one_and_two_processes(args, tmp_path, expect=1)
    assert doc["n_samples"] == 359
    assert stdout.count("laya audit: FAIL") == 1 and stdout.count("random: faithfulness") == 1  # -q: the verdict
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "two.json"]


def test_torchrun_network_scope_audit_matches_one_process(two_trainings, tmp_path):
    """--scope both under torchrun: the network loop is sharded in whole batches and gathered back."""
    root, _, _ = two_trainings
    # A network-scope gate that fails (exit 1 on every rank): -q prints its verdict line once.
    args = [
        "audit",
        root / "one" / "model.pt",
        "--scope",
        "both",
        "--compare",
        "all",
        "--samples",
        "90",
        "--steps",
        "4",
        "--batch-size",
        "30",
        "-q",
        "--fail-under",
        "network:random:faithfulness=0.99",
    ]
    doc, stdout = audit_alike_in_one_and_two_processes(args, tmp_path, expect=1)
    assert doc["network"]["scopes"]["layers"] and doc["n_samples"] == 90
    assert stdout.count("laya audit: FAIL") == 1 and stdout.count("network:random: faithfulness") == 1


@pytest.mark.slow
def test_torchrun_export_matches_one_process(two_trainings, tmp_path):
    root, _, _ = two_trainings
    model = root / "one" / "model.pt"
    laya("export", model, "--out", tmp_path / "e1", "--no-plots", "-q")
    two = laya("export", model, "--out", tmp_path / "e2", "--no-plots", procs=2)
    assert two.stdout.count("exported 359 samples") == 1
    for name in ("samples.csv", "profiles.csv", "global_profile.csv", "attention_shift.csv"):
        assert (tmp_path / "e1" / name).read_bytes() == (tmp_path / "e2" / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1", "e2"]


@pytest.mark.slow
def test_torchrun_frozen_backbone_cache_and_three_ranks(tmp_path):
    """Frozen backbone: sharded extraction into the cache (rank 0 writes), the same head on every
    rank; 3 ranks with uneven and empty audit shards."""
    args = ["train", "--frozen", "--epochs", "3", "--seed", "0", "-q"]
    cache = Path(os.environ["LAYA_CACHE_DIR"]) / "frozen-test"
    os.environ["LAYA_CACHE_DIR"] = str(cache)  # the autouse fixture restores it
    laya(*args, "--out", tmp_path / "two.pt", procs=2)  # cold cache: sharded extraction, rank 0 writes
    assert len(list(cache.glob("*.pt"))) == 3  # train, val, test
    laya(*args, "--out", tmp_path / "one.pt", "--no-cache")  # one process extracts on its own
    a = torch.load(tmp_path / "one.pt", weights_only=True)
    b = torch.load(tmp_path / "two.pt", weights_only=True)
    for x, y in zip(a["reference"], b["reference"]):
        assert torch.equal(x, y)  # the same features, bit for bit
    for k, w in a["head"]["weights"].items():
        assert torch.equal(b["head"]["weights"][k], w), k  # replicated head training: bit-identical
    audit = ["audit", tmp_path / "one.pt", "--compare", "all", "--batch-size", "256", "-q"]
    laya(*audit, "--json", tmp_path / "a1.json")
    laya(*audit, "--json", tmp_path / "a3.json", procs=3)  # 359 rows = 2 batches: rank 2 gets none
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a1.json", "a3.json"))
    assert_close_tree(_same_options(a, b), b, 1e-6)


@pytest.mark.slow
def test_torchrun_align_on_features_read_from_a_store(tmp_path, monkeypatch):
    """A frozen backbone's features in the sharded store (LAYA_IN_MEMORY_MB=0): the head trains with DDP over the
    ranks' shards, and --align's head target in the same backward (a fixed r̄; empty local batches take part)."""
    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "0")
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    args = ["train", "--dataset", "digits", "--frozen", "--epochs", "2", "--seed", "0", "-q"]
    laya(*args, "--align", "0", "--out", tmp_path / "plain.pt", procs=2)
    laya(*args, "--align", "1", "--out", tmp_path / "aligned.pt", procs=2)
    plain, aligned = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("plain", "aligned"))
    assert (aligned["train_config"]["align"], aligned["train_config"]["align_target"]) == (1.0, "head")
    moved = max((aligned["head"]["weights"][k] - w).abs().max().item() for k, w in plain["head"]["weights"].items())
    assert moved > 1e-3, moved  # the term trained (observed: 0.03 with --epochs 3)
    assert aligned["metrics"]["test_accuracy"] == pytest.approx(plain["metrics"]["test_accuracy"], abs=0.05)


@pytest.mark.slow
def test_torchrun_frozen_network_alignment_on_a_store(tmp_path, monkeypatch):
    """The frozen network target on a store (LAYA_IN_MEMORY_MB=1: the train split's 4.4 MiB of features in the store,
    its 0.9 MiB cache in memory) under torchrun: the store's DDP batches carry their rows, the term runs on each rank's
    share (a rank with no rows takes part). Not the one-process head (the store's DDP sampling order is another,
    docs/scaling.md), the same recipe; the term trained."""
    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "1")
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    args = ["train", "--dataset", "digits", "--frozen", "--epochs", "2", "--seed", "0", "-q"]
    network = ["--align", "1", "--align-target", "network"]
    laya(*args, "--align", "0", "--out", tmp_path / "plain.pt", procs=2)
    laya(*args, *network, "--out", tmp_path / "one.pt")
    laya(*args, *network, "--out", tmp_path / "two.pt", procs=2)
    plain, one, two = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("plain", "one", "two"))
    assert list((tmp_path / "cache").glob("*.store"))
    assert (two["train_config"]["align"], two["train_config"]["align_target"]) == (1.0, "network")
    moved = max((two["head"]["weights"][k] - w).abs().max().item() for k, w in plain["head"]["weights"].items())
    assert moved > 1e-3, moved
    assert two["metrics"]["test_accuracy"] == pytest.approx(one["metrics"]["test_accuracy"], abs=0.05)


# --------------------------------------------------------------------------- devices


@pytest.mark.parametrize("command", ["train", "audit", "export"])
def test_mps_unavailable_is_a_one_line_error(command, tmp_path):
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    target = [] if command == "train" else [str(tmp_path / "model.pt")]
    r = invoke(
        *[command, *target, "--device", "mps", "--out", str(tmp_path / "out")]
        if command != "audit"
        else [command, *target, "--device", "mps"]
    )
    assert r.exit_code == 2 and r.output.startswith("error: --device mps") and "Traceback" not in r.output, r.output
    assert sorted(tmp_path.iterdir()) == []


def test_torchrun_text_model_trains_and_audits_as_one_process(tmp_path):
    """A frozen hf: text backbone under torchrun: sharded token batches, the tokenizer trained once on the
    training split (the same on every rank), the same checkpoint and the same --scope both audit."""
    transformers = pytest.importorskip("transformers")
    from test_text import CONFIGS, write_texts

    torch.manual_seed(0)
    transformers.AutoModel.from_config(CONFIGS["bert"]()).save_pretrained(tmp_path / "bert")
    texts = write_texts(tmp_path / "texts.csv", rows=120)
    args = ["train", "--backbone", f"hf:{tmp_path / 'bert'}", "--dataset", f"csv:{texts}", "--max-length", "12"]
    args += ["--epochs", "2", "--seed", "0", "--batch-size", "32"]
    laya(*args, "--out", tmp_path / "one.pt")
    laya(*args, "--out", tmp_path / "two.pt", procs=2)
    a, b = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("one", "two"))
    assert a["backbone"]["input"] == b["backbone"]["input"]  # the same tokenizer on every rank
    for k, w in a["head"]["weights"].items():
        torch.testing.assert_close(b["head"]["weights"][k], w, rtol=0, atol=1e-5, msg=k)
    audit = ["audit", tmp_path / "one.pt", "--scope", "both", "--compare", "ig", "--steps", "4", "--batch-size", "8"]
    doc, _ = audit_alike_in_one_and_two_processes([*audit, "-q"], tmp_path, expect=0)
    assert doc["network"]["patched"] == "prefix"
