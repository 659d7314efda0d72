"""Faults and limits (issue 66): every failure is one line, nothing is half-left, nothing is silently corrupted.

A diverged run keeps no result (a language model's training, a bench) and a checkpoint whose heads hold NaN is
refused by every command; a checkpoint carries a digest of its contents, checked on load; a tracker that cannot
start is one line before any work, one that fails later never costs the checkpoint (exit 4); the temps of a killed
run are removed by the next run on the same output, and two runs on one output cannot both win. The hostile
values of every option and variable are tests/test_hostile.py's sweep; ``benchmarks/faults.py`` prints the
issue's table of cases before and after.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import assert_user_error, child_env, fill, invoke, make_lm_folder, sentences

from benchmarks.synthetic import flip_head_byte
from laya_cli.model.checkpoint import read_checkpoint, save_checkpoint
from laya_cli.model.integrity import content_digest

DIGITS = ["--dataset", "digits", "--epochs", "1", "--d-star", "16", "--score-hidden", "16", "-q"]
LM = ["--task", "lm", "--block-size", "16", "--batch-size", "8", "--epochs", "1", "--eval-tokens", "300",
      "--lens", "none", "--align", "0", "--exit-aware", "0", "-q"]  # fmt: skip
# Every command that reads a checkpoint, with what it needs besides it
READERS = {
    "audit": ["--samples", "20", "--compare", "", "-q"],
    "depth": ["--samples", "20", "--time-repeats", "0"],
    "export": ["--samples", "20", "--no-plots", "--out", "{tmp}/exp", "-q"],
    "diff": ["{other}", "--samples", "20", "--permutations", "10"],
    "info": [],
}


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm"), sentences(600), 500)


def lm_train(lm_dir: Path, out: Path, *extra) -> list:
    return ["train", *LM, "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
            "--out", out, *extra]  # fmt: skip


@pytest.fixture(scope="module")
def lm_ckpt(lm_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lmckpt") / "lm.pt"
    r = invoke(*lm_train(lm_dir, out))
    assert r.exit_code == 0, r.output
    return out


def reader_args(command: str, ckpt: Path, tmp: Path, other: Path) -> list:
    extra = [a.format(tmp=tmp, other=other) for a in READERS[command]]
    return [command, ckpt, *extra]


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def nan_copy(src: Path, dst: Path, keep_digest: bool = False) -> Path:
    """``src`` with its head's weights NaN, written as laya itself writes a checkpoint (with a digest) or as a
    laya from before the digest would have."""
    ckpt = torch.load(src, weights_only=True)
    for t in ckpt["head"]["weights"].values():
        if t.is_floating_point():
            t.fill_(float("nan"))
    if keep_digest:
        save_checkpoint({k: v for k, v in ckpt.items() if k not in ("format", "format_version", "versions")}, dst)
    else:
        ckpt.pop("digest")
        torch.save(ckpt, dst)
    return dst


# --------------------------------------------------------------------------- no result from a diverged run


@pytest.mark.parametrize(
    "option, value",
    [("--lr", "1e29"), pytest.param("--exit-aware", "1e308", marks=pytest.mark.slow),
     pytest.param("--align", "1e308", marks=pytest.mark.slow)],
)  # fmt: skip
def test_a_diverged_language_model_is_one_line_and_writes_nothing(lm_dir, tmp_path, option, value):
    out = tmp_path / "o.pt"
    r = invoke(*lm_train(lm_dir, out, option, value))
    assert_user_error(r, "training diverged", "NaN or Inf", f"{option} {float(value):g}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_bench_that_diverges_leaves_no_folder(tmp_path):
    r = invoke("bench", *DIGITS, "--heads", "last", "--seeds", "1", "--lr", "1e29", "--out", tmp_path / "b")
    assert r.exit_code == 2 and "training diverged" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_bench_that_fails_keeps_the_runs_of_a_folder_it_did_not_make(tmp_path):
    folder = tmp_path / "b" / "digits-mlp"
    folder.mkdir(parents=True)
    (folder / "mine.txt").write_text("a file of the user's")
    r = invoke("bench", *DIGITS, "--heads", "last", "--seeds", "1", "--lr", "1e29", "--out", tmp_path / "b")
    assert r.exit_code == 2, r.output
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]


@pytest.mark.parametrize("command", list(READERS))
def test_a_classifier_whose_head_holds_nan_is_refused_by_every_command(digits_ckpt, tmp_path, command):
    bad = nan_copy(digits_ckpt, tmp_path / "nan.pt", keep_digest=command in ("audit", "info"))
    r = invoke(*reader_args(command, bad, tmp_path, digits_ckpt))
    assert r.exit_code == 2, r.output
    assert f"{bad}: the head's weights hold NaN or Inf" in " ".join(r.output.split()), r.output
    assert [line for line in r.output.splitlines() if line.startswith("error:")] == [r.output.splitlines()[-1]]
    assert not (tmp_path / "exp").exists()


def test_a_language_model_whose_head_holds_nan_is_refused(lm_ckpt, tmp_path):
    bad = nan_copy(lm_ckpt, tmp_path / "nan.pt", keep_digest=True)
    assert_user_error(invoke("audit", bad, "-q"), str(bad), "the head's weights hold NaN or Inf")


# --------------------------------------------------------------------------- integrity


@pytest.mark.parametrize("command", list(READERS))
def test_one_byte_flipped_in_the_head_is_refused_naming_the_file(digits_ckpt, tmp_path, command):
    bad = flip_head_byte(digits_ckpt, tmp_path / "flipped.pt")
    assert torch.load(bad, weights_only=True)["head"]["kind"] == "laya"  # torch reads it as if it were fine
    r = invoke(*reader_args(command, bad, tmp_path, digits_ckpt))
    assert_user_error(r, f"{bad} is corrupted", "do not match the digest")
    assert not (tmp_path / "exp").exists()


def test_a_checkpoint_without_a_digest_is_read_with_a_note(digits_ckpt, tmp_path):
    old = tmp_path / "old.pt"
    ckpt = torch.load(digits_ckpt, weights_only=True)
    ckpt.pop("digest")
    torch.save(ckpt, old)
    r = invoke("audit", old, "--samples", "20", "--compare", "")
    assert r.exit_code == 0, r.output
    assert f"note: {old} carries no digest" in " ".join(r.output.split())
    assert read_checkpoint(old)["head"]["kind"] == "laya"


def test_the_digest_reads_every_tensor_byte_and_setting(digits_ckpt):
    ckpt = torch.load(digits_ckpt, weights_only=True)
    assert ckpt["digest"]["sha256"] == content_digest(ckpt)  # what was written is what is read
    changed = {"a byte of a tensor": lambda c: c["reference"][0].view(torch.uint8)[3].add_(1),
               "a setting": lambda c: c["train_config"].update(lr=c["train_config"]["lr"] * 2),
               "a list for a tuple": lambda c: c.update(layers=tuple(c["layers"])),
               "a dtype, same bytes": lambda c: c["reference"].__setitem__(0, c["reference"][0].view(torch.int32)),
               "a new entry": lambda c: c.update(extra=None)}  # fmt: skip
    for what, change in changed.items():
        c = torch.load(digits_ckpt, weights_only=True)
        change(c)
        assert content_digest(c) != ckpt["digest"]["sha256"], what


def test_a_checkpoint_read_changed_and_saved_carries_its_new_digest(digits_ckpt, tmp_path):
    ckpt = read_checkpoint(digits_ckpt)
    ckpt["metrics"] = {**ckpt["metrics"], "note": "edited by its owner"}
    save_checkpoint({k: v for k, v in ckpt.items() if k not in ("format", "format_version", "versions")},
                    tmp_path / "e.pt")  # fmt: skip
    assert read_checkpoint(tmp_path / "e.pt")["metrics"]["note"] == "edited by its owner"


# --------------------------------------------------------------------------- limits and the other task


def test_a_huge_seed_is_one_line_naming_it_and_its_length(digits_ckpt, tmp_path):
    r = invoke("audit", digits_ckpt, "--seed", "9" * 400)
    assert_user_error(r, "--seed must be at most 4,294,967,295", "a 400-digit number")


def test_a_bench_whose_last_seed_passes_the_largest_is_refused_before_its_folder(tmp_path):
    r = invoke("bench", *DIGITS, "--seeds", "3", "--base-seed", str(2**32 - 2), "--out", tmp_path / "b")
    assert_user_error(r, "--base-seed 4294967294 with --seeds 3")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("given", [["--lens", "tuned"], ["--objective", "kl"], ["--lens-tokens", "256"]])
def test_a_language_model_option_given_at_its_default_is_refused_on_a_classifier(tmp_path, given):
    r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt", *given)
    assert_user_error(r, f"{given[0]} only applies to language models (--task lm)")


def test_a_language_model_option_in_a_config_files_top_level_is_not_refused(tmp_path):
    """A file's top level may serve a whole pipeline, both tasks: only the command line's flags are refused."""
    (tmp_path / "c.toml").write_text('lens = "tuned"\n')
    r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt", "--config", tmp_path / "c.toml")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("content", [b"caf\xe9 au lait\n" * 40, bytes(range(256)) * 40], ids=["latin1", "binary"])
def test_a_text_corpus_that_is_not_utf8_is_one_line(lm_dir, tmp_path, content):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.txt").write_bytes((lm_dir / "corpus" / "train.txt").read_bytes()[:3000] + content)
    (tmp_path / "corpus" / "test.txt").write_bytes((lm_dir / "corpus" / "test.txt").read_bytes())
    args = lm_train(lm_dir, tmp_path / "o.pt")
    args[args.index(f"text:{lm_dir / 'corpus'}")] = f"text:{tmp_path / 'corpus'}"
    r = invoke(*args)
    assert_user_error(r, "corpus/train.txt")
    assert not (tmp_path / "o.pt").exists()


# --------------------------------------------------------------------------- trackers


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the socket is: nothing listens there


@pytest.mark.parametrize("where", ["flag", "env"])
@pytest.mark.parametrize("target", ["mlflow:nosuch://x", "mlflow:http://127.0.0.1:PORT", "tensorboard:FILE/tb"])
def test_a_tracker_that_cannot_start_is_one_line_before_any_work(tmp_path, target, where):
    pytest.importorskip(target.partition(":")[0])
    (tmp_path / "file").write_text("a file, not a folder")
    target = target.replace("PORT", str(closed_port())).replace("FILE", str(tmp_path / "file"))
    flag, env = (["--log-to", target], {}) if where == "flag" else ([], {"LAYA_LOG_TO": target})
    r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt", *flag, env=env)
    assert_user_error(r, "--log-to" if target.startswith("mlflow") else "TensorBoard folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("disk", ["read_only_dir", "full_disk"])
def test_a_tensorboard_folder_that_cannot_be_written_is_one_line_before_any_work(tmp_path, request, disk):
    pytest.importorskip("tensorboard")
    mnt = request.getfixturevalue(disk)
    if disk == "full_disk":
        fill(mnt)
    r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt", "--log-to", f"tensorboard:{mnt}/tb")
    assert_user_error(r, f"cannot write the TensorBoard folder (--log-to tensorboard) {mnt}/tb")
    assert not (tmp_path / "o.pt").exists() and sorted(p.name for p in mnt.iterdir()) in ([], ["ballast"])


@pytest.mark.parametrize("failing", ["artifact", "metrics", "finish"])
def test_a_tracker_that_fails_during_the_run_keeps_the_checkpoint_and_exits_4(tmp_path, monkeypatch, failing):
    pytest.importorskip("tensorboard")
    from laya_cli.runtime.tracking.to_tensorboard import TensorBoardTracker

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(TensorBoardTracker, failing, full)
    out = tmp_path / "o.pt"
    r = invoke("train", *DIGITS, "--out", out, "--log-to", f"tensorboard:{tmp_path / 'tb'}")
    assert r.exit_code == 4, r.output
    said = " ".join(r.output.split())
    assert "warning: --log-to tensorboard did not log" in said and "No space left on device" in said, said
    assert "Traceback" not in r.output and "error:" not in r.output
    assert read_checkpoint(out)["head"]["kind"] == "laya"  # the checkpoint is whole


def test_a_failed_gate_keeps_exit_1_when_the_tracker_failed_too(digits_ckpt, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from laya_cli.runtime.tracking.to_tensorboard import TensorBoardTracker

    monkeypatch.setattr(TensorBoardTracker, "metrics", lambda *a, **k: (_ for _ in ()).throw(OSError("gone")))
    r = invoke("audit", digits_ckpt, "--samples", "20", "--compare", "", "--fail-under", "faithfulness=1.01",
               "--log-to", f"tensorboard:{tmp_path / 'tb'}", "--json", tmp_path / "a.json")  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "did not log" in r.output and (tmp_path / "a.json").is_file()


def test_a_tensorboard_copy_that_does_not_fit_is_not_left_half_written(tmp_path, full_disk):
    pytest.importorskip("tensorboard")
    fill(full_disk, leave=96 * 1024)  # room for the events, not for a copy of the checkpoint
    out = tmp_path / "o.pt"
    r = invoke("train", *DIGITS, "--out", out, "--log-to", f"tensorboard:{full_disk}/tb")
    assert r.exit_code == 4 and "the file o.pt" in r.output, r.output
    copies = list(full_disk.glob("tb/*/artifacts/*")) + list(full_disk.glob("tb/*/artifacts/.*"))
    assert copies == [] and read_checkpoint(out)["head"]["kind"] == "laya"


# --------------------------------------------------------------------------- nothing half-left


def gone_pid() -> int:
    """The PID of a process that has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_the_temps_of_a_killed_run_are_removed_by_the_next_run_on_the_same_output(digits_ckpt, tmp_path):
    dead = gone_pid()
    debris = [f".o.pt.laya-{dead}-abc123.tmp", ".o.pt.k2j3h4g5.tmp", ".o.pt.laya-lock", f".exp.laya-{dead}-x1y2z3",
              ".exp.laya-q8w7e6r5", f".exp.laya-{dead}-old-a1b2c3"]  # fmt: skip
    for name in debris:
        (tmp_path / name).mkdir() if "exp" in name else (tmp_path / name).write_bytes(b"half")
    (tmp_path / f".exp.laya-{dead}-x1y2z3" / "half.csv").write_text("1,2\n")
    r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt")
    assert r.exit_code == 0, r.output
    r = invoke("export", digits_ckpt, "--samples", "20", "--no-plots", "--out", tmp_path / "exp", "-q")
    assert r.exit_code == 0, r.output
    assert hidden(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["exp", "o.pt"]


def test_the_temps_of_a_run_still_running_are_left_alone(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        temp = tmp_path / f".o.pt.laya-{sleeper.pid}-abc123.tmp"
        temp.write_bytes(b"being written")
        r = invoke("train", *DIGITS, "--out", tmp_path / "o.pt")
        assert r.exit_code == 0, r.output
        assert temp.read_bytes() == b"being written"
    finally:
        sleeper.kill()
        sleeper.wait()


HOLD = """
import sys, time
from laya_cli.runtime.fileio import claim, claims
with claims():
    claim(sys.argv[1])
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("command", ["train", "export", "audit"])
def test_a_second_run_on_an_output_being_written_refuses_in_one_line(digits_ckpt, tmp_path, command):
    target = tmp_path / {"train": "o.pt", "export": "exp", "audit": "a.json"}[command]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], stdout=subprocess.PIPE, text=True,
                              env=child_env())  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        args = {"train": ["train", *DIGITS, "--out", target],
                "export": ["export", digits_ckpt, "--samples", "20", "--no-plots", "--out", target, "-q"],
                "audit": ["audit", digits_ckpt, "--samples", "20", "--compare", "", "--json", target],
                }[command]  # fmt: skip
        assert_user_error(invoke(*args), f"{target} is being written by another laya run (pid {holder.pid})")
        assert not target.exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # a holder killed: the system releases its lock
        holder.wait()
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert target.exists() and hidden(tmp_path) == []  # its lock file was the next run's to remove


def test_a_bench_folder_being_written_refuses_a_second_bench(tmp_path):
    folder = tmp_path / "b" / "digits-mlp"
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                              env=child_env())  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        r = invoke("bench", *DIGITS, "--heads", "last", "--seeds", "1", "--out", tmp_path / "b")
        assert_user_error(r, f"{folder} is being written by another laya run")
    finally:
        holder.kill()
        holder.wait()


def test_depth_json_and_bench_on_a_full_disk_are_one_line_and_leave_nothing(digits_ckpt, tmp_path, full_disk):
    fill(full_disk)
    r = invoke("depth", digits_ckpt, "--samples", "20", "--time-repeats", "0", "--json", full_disk / "d.json")
    assert_user_error(r, f"cannot write {full_disk / 'd.json'}", "No space left on device")
    r = invoke("bench", *DIGITS, "--heads", "last", "--seeds", "1", "--out", full_disk / "b")
    assert r.exit_code == 2 and "No space left on device" in r.output, r.output
    assert [line for line in r.output.splitlines() if line.startswith("error:")] != []
    assert sorted(p.name for p in full_disk.iterdir()) == ["ballast"]


@pytest.mark.parametrize("command", ["train", "export", "audit"])
def test_outputs_in_a_read_only_folder_are_one_line(digits_ckpt, read_only_dir, command):
    args = {"train": ["train", *DIGITS, "--out", read_only_dir / "o.pt"],
            "export": ["export", digits_ckpt, "--samples", "20", "--out", read_only_dir / "exp", "-q"],
            "audit": ["audit", digits_ckpt, "--samples", "20", "--json", read_only_dir / "a.json"],
            }[command]  # fmt: skip
    assert_user_error(invoke(*args), "cannot write", "Read-only file system")


# --------------------------------------------------------------------------- kills at random points (slow)


def kill_at(args: list, delay: float, cwd: Path) -> int | None:
    """``laya ARGS`` as a process, SIGKILLed after ``delay`` seconds; its exit code when it ended before."""
    proc = subprocess.Popen([sys.executable, "-m", "laya_cli", *map(str, args)], cwd=cwd, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        return proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None


def whole_or_absent(out: Path) -> None:
    """The output of a killed run: absent, or whole (a checkpoint that reads, an export with its summary)."""
    if out.suffix == ".pt":
        assert not out.exists() or read_checkpoint(out)["head"]["kind"] == "laya"
    else:
        assert not out.exists() or (out / "summary.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["train", "lm train", "export"])
def test_sigkill_at_random_points_leaves_the_output_whole_or_absent_and_the_rerun_clean(
    digits_ckpt, lm_dir, tmp_path, kind
):
    out = tmp_path / ("exp" if kind == "export" else "o.pt")
    args = {"train": ["train", *DIGITS, "--epochs", "4", "--out", out],
            "lm train": lm_train(lm_dir, out, "--epochs", "2"),
            "export": ["export", digits_ckpt, "--samples", "300", "--out", out, "-q"]}[kind]  # fmt: skip
    start = time.perf_counter()
    assert kill_at(args, 600, tmp_path) == 0  # how long a whole run takes: the kills land within it
    whole = time.perf_counter() - start
    rng = random.Random(66)
    for _ in range(4):
        shutil.rmtree(out) if out.is_dir() else out.unlink(missing_ok=True)
        (tmp_path / "o.pt.state").unlink(missing_ok=True)
        delay = rng.uniform(0.3, whole)
        ended = kill_at(args, delay, tmp_path)
        whole_or_absent(out)
        rerun = [*args, *(["--restart"] if kind == "train" else []), *(["--overwrite"] if out.exists() else [])]
        assert kill_at(rerun, 600, tmp_path) == 0, f"the rerun after a kill at {delay:.1f} s (ended: {ended})"
        whole_or_absent(out)
        assert out.exists() and hidden(tmp_path) == [], f"after a kill at {delay:.1f} s: {hidden(tmp_path)}"


@pytest.mark.slow
def test_two_trainings_on_one_output_at_once_cannot_both_win(tmp_path):
    out = tmp_path / "same.pt"
    procs = [subprocess.Popen([sys.executable, "-m", "laya_cli", "train", *DIGITS, "--epochs", "4", "--seed", str(s),
                               "--out", str(out)], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for s in (1, 2)]  # fmt: skip
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "is being written by another laya run" in refused and len(refused.strip().splitlines()) == 1
    assert read_checkpoint(out)["head"]["kind"] == "laya" and hidden(tmp_path) == []


def test_a_claim_is_held_inside_a_command_only_and_its_lock_file_goes_with_it(tmp_path):
    from laya_cli.runtime.fileio import claim, claims

    claim(tmp_path / "free.pt")  # the Python API: nothing is locked
    assert hidden(tmp_path) == []
    with claims():
        claim(tmp_path / "o.pt")
        claim(tmp_path / "o.pt")  # again: this process holds it already
        assert hidden(tmp_path) == [".o.pt.laya-lock"]
    assert hidden(tmp_path) == []
