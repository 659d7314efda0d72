"""Faults and limits (issue 66): each case the issue lists, run as a real ``laya`` process, with its exit code, the
lines it wrote on stderr and what it left behind: the before/after table of the issue's closing note.

    python -m benchmarks.faults [--only TEXT ...] [--json FILE] [--laya DIR] [--before FILE.json ...]

``--laya DIR``: the checkout whose ``laya_cli`` is run (default: this one), e.g. a copy of main before a change for
the "before" column: ``git archive BASE | tar -x -C /tmp/before`` then ``--laya /tmp/before --json before.json``;
``--before before.json`` then prints this run beside it.

Every case runs in a folder of its own; "left" lists what the run created there (hidden files too: the temp files
and folders of a write that did not finish), and on the full or read-only disk it used. The fixtures are made
once, in a temp folder: a digits checkpoint (``laya train``, 2 epochs), the tiny causal language model of
``synthetic.make_lm_folder`` with its corpus and a language model's checkpoint trained on it, a 1 MiB tmpfs filled
to the last block (the full disk) and a read-only tmpfs; the mounts need root, and a case that needs one is listed
as skipped without it. Kills are SIGKILL at a point the case waits for (a temp folder appearing, a time).

The table prints: case | exit | stderr lines | the first ``error:`` line (else the traceback's last line) | left.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

HUGE = "99999999999999999999999"  # past int64
DIGITS = ["--dataset", "digits", "--epochs", "1", "--d-star", "16", "--score-hidden", "16"]
LM = ["--task", "lm", "--block-size", "16", "--batch-size", "8", "--epochs", "1", "--eval-tokens", "300",
      "--lens", "none", "--align", "0", "--exit-aware", "0"]  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]
LAYA = [ROOT]  # the checkout whose laya_cli runs (--laya)
CHECKPOINT_READERS = [  # every command that reads a checkpoint c.pt (the flipped-byte cases)
    ("audit", ["audit", "c.pt", "--samples", "20"]),
    ("export", ["export", "c.pt", "--samples", "20", "--out", "exp"]),
    ("depth", ["depth", "c.pt", "--samples", "20"]),
    ("diff", ["diff", "c.pt", "{ckpt}", "--samples", "20"]),
]


@dataclass
class Outcome:
    case: str
    exit: str
    lines: int
    first: str
    left: str


@dataclass
class Fixtures:
    root: Path
    ckpt: Path = None
    lm: Path = None
    lm_ckpt: Path = None
    full: Path | None = None
    ro: Path | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Case:
    name: str
    args: list = field(default_factory=list)  # "{ckpt}", "{lm}", "{lm_ckpt}", "{full}", "{ro}" filled in
    env: dict = field(default_factory=dict)
    prepare: Callable | None = None  # (case folder, fixtures): files the run reads
    runner: Callable | None = None  # (case folder, fixtures) -> Outcome fields: a kill, two writers
    needs: tuple[str, ...] = ()  # "full", "ro"
    timeout: float = 300
    leave: int = 0  # bytes the full disk keeps free (room for a tracker's events, not for a checkpoint's copy)


# --------------------------------------------------------------------------- running laya


def laya(args, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    child = {**os.environ, "LAYA_OFFLINE": "1", "PYTHONPATH": str(LAYA[0]), **(env or {})}
    try:
        return subprocess.run([sys.executable, "-m", "laya_cli", *map(str, args)], cwd=cwd, env=child,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(e.cmd, f"timeout {timeout:.0f} s", "", err)


def popen(args, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    child = {**os.environ, "LAYA_OFFLINE": "1", "PYTHONPATH": str(LAYA[0]), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "laya_cli", *map(str, args)], cwd=cwd, env=child,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def stderr_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def first_line(err: str, width: int = 110) -> str:
    lines = stderr_lines(err)
    errors = [line for line in lines if line.startswith("error:")]
    traceback_end = [line for line in lines if not line.startswith((" ", "internal error"))]
    pick = errors[0] if errors else (traceback_end[-1] if "Traceback" in err and traceback_end else "")
    return pick if len(pick) <= width else pick[: width - 1] + "…"


def listing(folder: Path, before: set[str], skip=("ballast",)) -> list[str]:
    if not folder.is_dir():
        return []
    out = []
    for p in sorted(folder.iterdir()):
        if p.name in before or p.name in skip:
            continue
        out.append(p.name + ("/" if p.is_dir() else ""))
    return out


def fill(folder: Path, leave: int = 0) -> None:
    """Use every free block of ``folder``'s file system but ``leave`` bytes."""
    for p in folder.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    with open(folder / "ballast", "wb", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, free - leave))
            while not leave:
                f.write(b"\0" * 4096)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise


def fill_in(text: str, fx: Fixtures, here: Path) -> str:
    return text.format(ckpt=fx.ckpt, lm=fx.lm, lm_ckpt=fx.lm_ckpt, full=fx.full, ro=fx.ro, here=here)


def run_case(case: Case, fx: Fixtures, where: Path, index: int) -> Outcome:
    missing = [n for n in case.needs if getattr(fx, n) is None]
    if missing:
        return Outcome(case.name, "skipped", 0, f"needs a {'/'.join(missing)} mount (root)", "")
    here = where / f"case-{index:02d}"
    here.mkdir()
    if "full" in case.needs:
        fill(fx.full, case.leave)
    if case.prepare is not None:
        case.prepare(here, fx)
    before = {p.name for p in here.iterdir()}
    if case.runner is not None:
        exit_, lines, first, left = case.runner(here, fx, before)
        return Outcome(case.name, exit_, lines, first, left)
    args = [fill_in(str(a), fx, here) for a in case.args]
    env = {k: fill_in(v, fx, here) for k, v in case.env.items()}
    proc = laya(args, here, env, case.timeout)
    left = listing(here, before)
    for mount in ("full", "ro"):
        if mount in case.needs:
            left += [f"{mount}:{name}" for name in listing(getattr(fx, mount), set())]
    return Outcome(case.name, str(proc.returncode), len(stderr_lines(proc.stderr)), first_line(proc.stderr),
                   " ".join(left) or "nothing")  # fmt: skip


# --------------------------------------------------------------------------- fixtures


def make_fixtures(root: Path) -> Fixtures:
    sys.path.insert(0, str(ROOT))
    from benchmarks.synthetic import make_lm_folder, sentences

    fx = Fixtures(root)
    fx.ckpt = root / "m.pt"
    proc = laya(["train", *DIGITS, "--epochs", "2", "--out", fx.ckpt, "-q"], root)
    assert proc.returncode == 0, proc.stderr
    fx.lm = make_lm_folder(root / "lm", sentences(600), 500)
    fx.lm_ckpt = root / "lm.pt"
    proc = laya(["train", *lm_args(fx), "--out", fx.lm_ckpt, "-q"], root)
    assert proc.returncode == 0, proc.stderr
    if os.geteuid() == 0:
        for name, opts in (("full", "size=1M"), ("ro", "size=1M,ro")):
            mnt = root / name
            mnt.mkdir()
            if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True).returncode:
                fx.notes.append(f"could not mount a tmpfs at {mnt}")
            else:
                setattr(fx, name, mnt)
    return fx


def unmount(fx: Fixtures) -> None:
    for mnt in (fx.full, fx.ro):
        if mnt is not None:
            subprocess.run(["umount", str(mnt)], capture_output=True)


def lm_args(fx: Fixtures) -> list[str]:
    return [*LM, "--backbone", f"hf:{fx.lm / 'model'}", "--dataset", f"text:{fx.lm / 'corpus'}"]


# --------------------------------------------------------------------------- files the cases read


def flipped(here: Path, fx: Fixtures) -> None:
    """The digits checkpoint with one byte in its middle flipped."""
    data = bytearray(fx.ckpt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (here / "c.pt").write_bytes(bytes(data))


def flipped_head(here: Path, fx: Fixtures) -> None:
    """The digits checkpoint with one byte flipped in the middle of its head's largest weight tensor."""
    from benchmarks.synthetic import flip_head_byte

    flip_head_byte(fx.ckpt, here / "c.pt")


def nan_head(source: str) -> Callable:
    """A checkpoint whose head weights are NaN, written as laya's own save would (torch.save of the dict)."""

    def prepare(here: Path, fx: Fixtures) -> None:
        import torch

        ckpt = torch.load(getattr(fx, source), weights_only=True)
        for t in ckpt["head"]["weights"].values():
            if t.is_floating_point():
                t.fill_(float("nan"))
        ckpt.pop("digest", None)  # as a file from before the digest was written
        torch.save(ckpt, here / "c.pt")

    return prepare


def not_utf8_corpus(here: Path, fx: Fixtures) -> None:
    (here / "corpus").mkdir()
    text = (fx.lm / "corpus" / "train.txt").read_bytes()
    (here / "corpus" / "train.txt").write_bytes(text[:2000] + b"caf\xe9 au lait\n" + text[2000:])
    shutil.copy(fx.lm / "corpus" / "test.txt", here / "corpus" / "test.txt")


def binary_corpus(here: Path, fx: Fixtures) -> None:
    (here / "corpus").mkdir()
    (here / "corpus" / "train.txt").write_bytes(os.urandom(20_000))
    shutil.copy(fx.lm / "corpus" / "test.txt", here / "corpus" / "test.txt")


def not_utf8_config(here: Path, fx: Fixtures) -> None:
    (here / "c.toml").write_bytes(b"# caf\xe9\nepochs = 1\n")


def a_file(here: Path, fx: Fixtures) -> None:
    (here / "file").write_text("a file, not a folder\n")


# --------------------------------------------------------------------------- kills and two writers


def kill_export(here: Path, fx: Fixtures, before: set[str]):
    """``laya export`` killed (SIGKILL) once its temp folder exists, then run again (with --overwrite)."""
    args = ["export", fx.ckpt, "--samples", "200", "--out", "exp", "-q"]
    proc, killed = popen(args, here), False
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.name.startswith(".exp.laya-") and "probe" not in p.name for p in here.iterdir()):
            proc.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.02)
    proc.wait()
    after_kill = " ".join(listing(here, before)) or "nothing"
    again = laya([*args, "--overwrite"], here)
    left = " ".join(listing(here, before)) or "nothing"
    what = "killed" if killed else f"not killed (exit {proc.returncode})"
    return (f"{what}; rerun {again.returncode}", len(stderr_lines(again.stderr)), first_line(again.stderr),
            f"after the kill: {after_kill}; after the rerun: {left}")  # fmt: skip


def kill_lm_train(here: Path, fx: Fixtures, before: set[str]):
    """``laya train --task lm`` killed (SIGKILL) 6 s in, before its checkpoint is written, then run again."""
    args = ["train", *lm_args(fx), "--epochs", "3", "--out", "o.pt", "-q"]
    proc = popen(args, here)
    time.sleep(6)
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    after_kill = " ".join(listing(here, before)) or "nothing"
    again = laya(args, here)
    left = " ".join(listing(here, before)) or "nothing"
    what = "finished before the kill" if finished else "killed"
    return (f"{what}; rerun {again.returncode}", len(stderr_lines(again.stderr)), first_line(again.stderr),
            f"after the kill: {after_kill}; after the rerun: {left}")  # fmt: skip


def two_writers(here: Path, fx: Fixtures, before: set[str]):
    """Two ``laya train --out same.pt`` started together (different seeds)."""
    procs = [popen(["train", *DIGITS, "--epochs", "3", "--seed", str(s), "--out", "same.pt", "-q"], here)
             for s in (1, 2)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    codes = "/".join(str(p.returncode) for p in procs)
    errs = "".join(e for _, e in outs)
    return codes, len(stderr_lines(errs)), first_line(errs), " ".join(listing(here, before)) or "nothing"


# --------------------------------------------------------------------------- the cases


def cases() -> list[Case]:
    lm = "{lm}"
    lm_train = ["train", *LM, "--backbone", f"hf:{lm}/model", "--dataset", f"text:{lm}/corpus", "--out", "o.pt"]
    train = ["train", *DIGITS, "--out", "o.pt"]
    out = [
        # no result from a diverged run
        Case("lm train --lr 1e29", [*lm_train, "--lr", "1e29"]),
        Case("lm train --exit-aware 1e308", [*lm_train, "--exit-aware", "1e308"]),
        Case("lm train --align 1e308", [*lm_train, "--align", "1e308"]),
        Case("classifier train --lr 1e29", [*train, "--lr", "1e29"]),
        Case("bench --lr 1e29", ["bench", *DIGITS, "--heads", "last", "--seeds", "1", "--lr", "1e29", "--out", "b"]),
        Case(
            "audit a language model with NaN head weights",
            ["audit", "c.pt", "--samples", "50"],
            prepare=nan_head("lm_ckpt"),
        ),  # fmt: skip
        Case(
            "audit a classifier with NaN head weights", ["audit", "c.pt", "--samples", "50"], prepare=nan_head("ckpt")
        ),  # fmt: skip
        # numbers past the machine's
        *[
            Case(f"{c} --seed {HUGE}", [*a, "--seed", HUGE])
            for c, a in [
                ("train", train),
                ("audit", ["audit", "{ckpt}", "--samples", "20"]),
                ("depth", ["depth", "{ckpt}", "--samples", "20"]),
                ("export", ["export", "{ckpt}", "--samples", "20", "--out", "exp"]),
                ("diff", ["diff", "{ckpt}", "{ckpt}", "--samples", "20"]),
            ]
        ],  # fmt: skip
        Case("train --epochs 9×400", [*train, "--epochs", "9" * 400]),
        Case("audit --samples 9×400", ["audit", "{ckpt}", "--samples", "9" * 400]),
        Case("audit --bootstrap 1e30", ["audit", "{ckpt}", "--samples", "20", "--bootstrap", str(10**30)]),
        Case(
            f"bench --base-seed {HUGE}",
            ["bench", *DIGITS, "--heads", "last", "--seeds", "1", "--base-seed", HUGE, "--out", "b"],
        ),  # fmt: skip
        Case("train --lr 1e400 (past float64)", [*train, "--lr", "1e400"]),
        # text that is not UTF-8
        Case(
            "lm train on a text: file with a latin-1 byte",
            [*lm_train[:-4], "--dataset", "text:corpus", "--out", "o.pt"],
            prepare=not_utf8_corpus,
        ),  # fmt: skip
        Case(
            "lm train on a binary text: file",
            [*lm_train[:-4], "--dataset", "text:corpus", "--out", "o.pt"],
            prepare=binary_corpus,
        ),  # fmt: skip
        Case("train --config with a non-UTF-8 byte", [*train, "--config", "c.toml"], prepare=not_utf8_config),
        # trackers
        Case("train --log-to mlflow:nosuch://x", [*train, "--log-to", "mlflow:nosuch://x"]),
        Case(
            "train --log-to mlflow at a closed port",
            [*train, "--log-to", "mlflow:http://127.0.0.1:9"],
            env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
        ),  # fmt: skip
        Case(
            "train --log-to tensorboard under a file",
            [*train, "--log-to", "tensorboard:{here}/file/tb"],
            prepare=a_file,
        ),  # fmt: skip
        Case(
            "train --log-to tensorboard in a read-only folder",
            [*train, "--log-to", "tensorboard:{ro}/tb"],
            needs=("ro",),
        ),  # fmt: skip
        Case(
            "train --log-to tensorboard on a full disk", [*train, "--log-to", "tensorboard:{full}/tb"], needs=("full",)
        ),  # fmt: skip
        Case(
            "train --log-to tensorboard on a disk with room for its events, not for the checkpoint's copy",
            [*train, "--log-to", "tensorboard:{full}/tb"],
            needs=("full",),
            leave=64 * 1024,
        ),  # fmt: skip
        Case("LAYA_LOG_TO=mlflow:nosuch://x train", train, env={"LAYA_LOG_TO": "mlflow:nosuch://x"}),
        Case(
            "LAYA_LOG_TO=tensorboard under a file",
            train,
            env={"LAYA_LOG_TO": "tensorboard:{here}/file/tb"},
            prepare=a_file,
        ),  # fmt: skip
        # a corrupted checkpoint
        *[
            Case(f"{c} of a checkpoint with one byte{where} flipped", a, prepare=prepare)
            for where, prepare in [("", flipped), (" of its head", flipped_head)]
            for c, a in CHECKPOINT_READERS
        ],  # fmt: skip
        # a full disk
        Case(
            "depth --json on a full disk",
            ["depth", "{ckpt}", "--samples", "20", "--json", "{full}/d.json"],
            needs=("full",),
        ),  # fmt: skip
        Case("train --out in a read-only folder", [*train[:-1], "{ro}/o.pt"], needs=("ro",)),
        Case(
            "bench --out on a full disk",
            ["bench", *DIGITS, "--heads", "last", "--seeds", "1", "--out", "{full}/b"],
            needs=("full",),
        ),  # fmt: skip
        # after a kill, two writers
        Case("export killed (SIGKILL), then rerun", runner=kill_export),
        Case("lm train killed (SIGKILL) before its write, then rerun", runner=kill_lm_train),
        Case("two train --out same.pt at once", runner=two_writers),
        # values that should be refused
        Case("lm train --lens-tokens -1", [*lm_train, "--lens-tokens", "-1"]),
        Case(
            "LAYA_PROGRESS_INTERVAL=-1 export",
            ["export", "{ckpt}", "--samples", "20", "--out", "exp"],
            env={"LAYA_PROGRESS_INTERVAL": "-1"},
        ),  # fmt: skip
        Case("classifier train --lens tuned", [*train, "--lens", "tuned"]),
        Case("classifier train --reads states", [*train, "--reads", "states"]),
        Case(
            "LAYA_SHARD_MB=abc train --frozen (streamed)",
            [*train, "--frozen"],
            env={"LAYA_SHARD_MB": "abc", "LAYA_IN_MEMORY_MB": "0"},
        ),  # fmt: skip
        Case(
            "LAYA_SHUFFLE_MB=nan train --frozen (streamed)",
            [*train, "--frozen"],
            env={"LAYA_SHUFFLE_MB": "nan", "LAYA_IN_MEMORY_MB": "0"},
        ),  # fmt: skip
        Case("LAYA_IN_MEMORY_MB=abc train --frozen", [*train, "--frozen"], env={"LAYA_IN_MEMORY_MB": "abc"}),
        Case("LAYA_WORKERS=abc train", train, env={"LAYA_WORKERS": "abc"}),
    ]
    return out


# --------------------------------------------------------------------------- the table


def table(rows: list[Outcome]) -> str:
    head = "| case | exit | stderr lines | first line | left |\n|---|---|---|---|---|\n"
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return head + "\n".join(
        f"| {cell(r.case)} | {r.exit} | {r.lines} | {cell(r.first)} | {cell(r.left)} |" for r in rows
    )


def side_by_side(before: list[dict], rows: list[Outcome]) -> str:
    """One row per case: before (from a --json of another run) and now, exit code, stderr lines and what was left."""
    was = {r["case"]: r for r in before}
    head = "| case | before: exit, lines | before: left | now: exit, lines | now: first line | now: left |\n"
    head += "|---|---|---|---|---|---|\n"
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = []
    for r in rows:
        b = was.get(r.case)
        then = (f"{b['exit']}, {b['lines']}", b["left"]) if b else ("not run", "")
        out.append(f"| {cell(r.case)} | {then[0]} | {cell(then[1])} | {r.exit}, {r.lines} | {cell(r.first)} | "
                   f"{cell(r.left)} |")  # fmt: skip
    return head + "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run the cases whose name holds this text (repeatable)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--laya", default=str(ROOT), help="the checkout whose laya_cli is run (default: this one)")
    ap.add_argument("--before", action="append", help="the --json of an earlier run: printed side by side")
    a = ap.parse_args(argv)
    LAYA[0] = Path(a.laya).resolve()
    chosen = [c for c in cases() if a.only is None or any(text in c.name for text in a.only)]
    with tempfile.TemporaryDirectory(prefix="laya-faults-") as tmp:
        root = Path(tmp)
        fx = make_fixtures(root)
        rows = []
        try:
            for index, case in enumerate(chosen):
                start = time.perf_counter()
                rows.append(run_case(case, fx, root, index))
                print(f"{case.name}: exit {rows[-1].exit} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
        finally:
            unmount(fx)
            with contextlib.suppress(OSError):
                shutil.rmtree(root, ignore_errors=True)
    for note in fx.notes:
        print(f"note: {note}", file=sys.stderr)
    before = [r for path in a.before or [] for r in json.loads(Path(path).read_text())]
    print(side_by_side(before, rows) if before else table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
