"""Output files and folders that are whole or absent: write to a temp beside the target, then rename.

Every fault the operating system reports while writing (a full disk, a read-only mount, a
permission, a folder removed mid-run) becomes one ``LayaError`` line naming the file and the
reason; the temp is removed, so nothing half-written is ever left behind. Files keep the mode
the umask gives (not the temp file's 0600).

A temp is named ``.NAME.laya-PID-…`` after its output and the process writing it: a run killed before it could
remove its temps (SIGKILL, a power cut) leaves them, and the next write of the same output removes every one whose
process is gone (``remove_stale``). Within a command, the outputs it writes are claimed (``claim``: an exclusive
``flock`` on ``.NAME.laya-lock`` beside each, held until the command ends), so two runs on one output cannot both
win: the second refuses in one line. ``made_folders`` removes the folders a failed run made (``laya bench``'s).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from .errors import LayaError, TrainingInterrupted

try:  # POSIX; elsewhere outputs are not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None


def write_error(path: str | Path, e: OSError) -> LayaError:
    """One line for an OS fault on ``path``: 'cannot write m.pt: No space left on device'."""
    return LayaError(f"cannot write {path}: {e.strerror or e}")


def os_fault(e: BaseException) -> OSError | None:
    """The OSError behind ``e``, if any: itself, or one it was raised while handling (torch's
    writer answers a failed write with a RuntimeError of its own during cleanup)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def check_writable(path: str | Path) -> Path:
    """Fail early (before hours of training) if ``path`` cannot be written."""
    path = Path(path).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise LayaError(f"cannot write {path}: it is a directory")
    if not parent.is_dir():
        raise LayaError(f"cannot write {path}: folder {parent} does not exist")
    try:  # the only reliable test (root ignores mode bits, read-only mounts don't)
        fd, probe = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise LayaError(f"cannot write {path}: folder {parent} is not writable ({e.strerror})") from None
    return path


def check_folder_writable(folder: str | Path, what: str) -> Path:
    """``folder`` (made with its missing parents) takes a file of a few KiB: a folder under a file, on a read-only
    mount or on a full disk is one line (``what`` names it) before any work. The folders made to check are removed
    again either way: whoever writes there makes them."""
    folder = Path(folder).expanduser()
    missing, p = [], folder
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    made = []
    try:
        for m in reversed(missing):
            m.mkdir()
            made.append(m)
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        fd, probe = tempfile.mkstemp(prefix=".laya-probe-", dir=folder)
        try:
            os.write(fd, b"\0" * 4096)  # a full disk still creates empty files: write some bytes
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise LayaError(f"cannot write {what} {folder}: {e.strerror or e}") from None
    finally:
        for m in reversed(made):
            with contextlib.suppress(OSError):
                m.rmdir()
    return folder


def check_outputs(*paths: str | Path | None) -> None:
    """Each output file asked for (None: not asked) can be written: fail now, not after the work."""
    for path in paths:
        if path is not None:
            check_writable(path)


def check_new_outputs(outputs: Mapping[str, str | Path | None], overwrite: bool) -> None:
    """The output files a command was asked for (option → path; None: not asked), before any work: each can be
    written, no two options name the same file, and without ``overwrite`` none exists yet — an existing file is
    replaced only when the user said so (``--overwrite``), never silently after the work. One line naming the
    option."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        target = Path(os.path.abspath(Path(path).expanduser()))
        if target in seen:
            raise LayaError(f"{seen[target]} and {option} both name {path}: give each its own file")
        seen[target] = option
        check_writable(path)
        claim(path)  # before looking whether it exists: a run that claimed it first may be writing it now
        if not overwrite and (target.is_file() or target.is_symlink()):
            raise LayaError(f"{option} {path} exists; pass --overwrite to replace it, or choose another file")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temp path; on success it replaces ``path`` in one rename, on failure it vanishes."""
    path = check_writable(path)
    try:
        remove_stale(path)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: give the file the usual mode
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        fault = os_fault(e)
        if fault is not None:
            raise write_error(path, fault) from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_texts(files) -> None:
    """Each ``(path, make_text)`` whose path is not None, written atomically: all of them, or — when one fails (a
    full disk) — none of them (those already written are removed), so a command's outputs are never half there."""
    written = []
    try:
        for path, make_text in files:
            if path is not None:
                atomic_write_text(path, make_text())
                written.append(path)
    except BaseException:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` in one write (a file other steps also append to, e.g. ``$GITHUB_STEP_SUMMARY``)."""
    path = Path(path).expanduser()
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise write_error(path, e) from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


class _InterruptRecorder:
    """The file ``torch.save`` writes through: an interrupt (Ctrl-C, or SIGTERM made one) that lands in a write is
    kept and the write reports nothing written, so torch's C++ writer fails with its own RuntimeError ('unexpected
    pos …'), which ``atomic_torch_save`` turns back into the interrupt."""

    def __init__(self, f):
        self.f, self.interrupt = f, None

    def write(self, data) -> int:
        if self.interrupt is not None:
            return 0
        try:
            return self.f.write(data)
        except KeyboardInterrupt as e:
            self.interrupt = e
            return 0

    def flush(self) -> None:
        self.f.flush()


def atomic_torch_save(obj, path: str | Path) -> None:
    """``torch.save`` through a Python file object, so a full disk is an OSError (one line), not
    the C++ writer's RuntimeError, and an interrupt mid-write is the interrupt (the old file stays whole)."""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        out = _InterruptRecorder(f)
        try:
            torch.save(obj, out)
        except RuntimeError:
            if out.interrupt is not None:
                raise out.interrupt from None
            raise
        if out.interrupt is not None:
            raise out.interrupt


# --------------------------------------------------------------------------- whole folders


def existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def check_out_dir(out: str | Path, overwrite: bool, ours: Callable[[Path], bool], what: str) -> Path:
    """Validate an output folder before any work: fail early with one clear line.

    A missing or empty folder is fine (missing parents are created at the end); a non-empty
    folder is replaced only with ``overwrite`` AND only if ``ours(folder)`` says laya wrote it
    (``what`` names that kind of folder): laya never deletes a folder it did not write.
    """
    out = Path(out).expanduser()
    here, target = Path.cwd().resolve(), Path(os.path.abspath(out))
    if target == here or target in here.parents:
        raise LayaError(f"--out {out} is the current folder or one of its parents; give a subfolder such as export/")
    if out.exists() and not out.is_dir():
        raise LayaError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise LayaError(
                f"--out {out} is not empty; pass --overwrite to replace a previous {what}, or choose another folder"
            )
        if not ours(out):
            raise LayaError(
                f"--out {out} is not empty and is not a {what} (no summary.json marker); "
                f"refusing to replace it, even with --overwrite"
            )
    anchor = out.parent if out.exists() else existing_ancestor(out.parent)
    if not anchor.is_dir():
        raise LayaError(f"cannot write {out}: {anchor} is not a folder")
    try:  # the only reliable test: root ignores mode bits, read-only mounts do not
        os.rmdir(tempfile.mkdtemp(prefix=temp_prefix(out) + "probe-", dir=anchor))
    except OSError as e:
        raise LayaError(f"cannot write {out}: folder {anchor} is not writable ({e.strerror})") from None
    claim(out)
    return out


@contextlib.contextmanager
def atomic_folder(out: str | Path, overwrite: bool, ours: Callable[[Path], bool], what: str):
    """Yield an empty temp folder beside ``out``; on success it replaces ``out`` (see ``check_out_dir``),
    on any failure it is removed and ``out`` is left as it was."""
    out = check_out_dir(out, overwrite, ours, what)
    anchor = existing_ancestor(out.parent)
    try:
        remove_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out), dir=anchor))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: give the folder the usual mode
    except OSError as e:
        raise write_error(out, e) from None
    try:
        yield tmp
        _replace_folder(tmp, out, overwrite, ours, what)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        fault = os_fault(e)
        if fault is not None:
            raise write_error(out, fault) from None
        raise


def _replace_folder(tmp: Path, out: Path, overwrite: bool, ours, what: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        os.rename(tmp, out)
        return
    if out.is_dir() and not any(out.iterdir()):
        os.replace(tmp, out)  # POSIX rename onto an empty folder
        return
    check_out_dir(out, overwrite, ours, what)  # re-check right before replacing
    old = Path(tempfile.mkdtemp(prefix=temp_prefix(out) + "old-", dir=out.parent))
    os.rmdir(old)
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- temps, claims, folders made


def temp_prefix(path: Path) -> str:
    """How every temp of ``path`` begins: ``.NAME.laya-PID-`` (the process that writes it: ``remove_stale``)."""
    return f".{Path(path).name}.laya-{os.getpid()}-"


def _lock_file(path: Path) -> Path:
    return path.parent / f".{path.name}.laya-lock"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def stale_temps(path: str | Path) -> list[Path]:
    """The temps of ``path`` left by runs that are gone: ``.NAME.laya-PID-…`` whose process no longer runs, and —
    while this process holds ``path``'s claim, so no other laya run writes it — the temps laya wrote before they
    carried a PID (``.NAME.laya-XXXXXXXX``, ``.NAME.XXXXXXXX.tmp``). The claim's own lock file is never one."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    folder = path.parent if path.parent.is_dir() else None
    if folder is None:
        return []
    name = re.escape(path.name)
    with_pid = re.compile(rf"^\.{name}\.laya-(\d+)-")
    legacy = re.compile(rf"^\.{name}\.(laya-(?!lock$)(?!\d+-).+|[a-z0-9_]{{8}}\.(tmp|probe))$")
    owned, prefix = path in _claims, f".{path.name}."
    out = []
    with os.scandir(folder) as entries:  # a store folder holds thousands of shards: a cheap test first
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            m = with_pid.match(entry.name)
            if (m and not _alive(int(m.group(1)))) or (owned and not m and legacy.match(entry.name)):
                out.append(Path(entry.path))
    return out


def remove_stale(path: str | Path) -> list[Path]:
    """Remove ``stale_temps(path)`` (files and folders); the ones removed."""
    removed = []
    for entry in stale_temps(path):
        with contextlib.suppress(OSError):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            removed.append(entry)
    return removed


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # opening a link fails (ELOOP) instead of opening what it points to
_claims: dict[Path, tuple[int, Path]] = {}  # this process's claimed outputs: the lock's fd and file
_claiming: contextvars.ContextVar[bool] = contextvars.ContextVar("laya_claiming", default=False)


@contextlib.contextmanager
def claims():
    """Within the block (a command), ``claim`` locks the outputs it is given; every claim is released at its end.
    Outside one (the Python API), nothing is locked."""
    token = _claiming.set(True)
    try:
        yield
    finally:
        release_claims()
        _claiming.reset(token)


def claim(path: str | Path) -> None:
    """This run is the one laya run writing ``path`` until the command ends, else one line: an exclusive
    ``flock`` on ``.NAME.laya-lock`` beside it (released when the command ends, or by the system when its process
    dies). Then the temps of earlier runs on ``path`` that were killed are removed. Under torchrun rank 0 claims."""
    if not _claiming.get() or fcntl is None or os.environ.get("RANK", "0") != "0":
        return
    path = Path(os.path.abspath(Path(path).expanduser()))
    if path in _claims or not path.parent.is_dir():
        return  # a folder whose parents are still to be made: its temp lives elsewhere, nobody can write it yet
    lock = _lock_file(path)
    for _ in range(5):  # the lock file's previous owner may unlink it between our open and our flock
        try:  # never through a link: a lock planted as a symlink would have laya truncate the file it points to
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666 & ~_umask())
        except OSError as e:
            if os.path.islink(lock):
                raise LayaError(
                    f"{path}: its lock file {lock} is a symbolic link; laya never writes through a link: remove it "
                    f"(rm {lock}) and run again"
                ) from None
            raise write_error(path, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {owner})" if owner.isdigit() else ""
            raise LayaError(f"{path} is being written by another laya run{who}: wait until it ends, or choose "
                            f"another output") from None  # fmt: skip
        if _same_file(lock, fd):
            break
        os.close(fd)
    else:
        raise LayaError(f"{path}: cannot lock it for writing ({lock} keeps changing)")
    with contextlib.suppress(OSError):  # who holds it, for the message of a run refused (a full disk: none)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    _claims[path] = (fd, lock)
    remove_stale(path)


def _same_file(path: Path, fd: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def release_claims() -> None:
    """Release every claim of this process, removing its lock file (unlinked while held: a run that opened it in
    between finds it gone and makes its own)."""
    for fd, lock in _claims.values():
        with contextlib.suppress(OSError):
            os.unlink(lock)
        with contextlib.suppress(OSError):
            os.close(fd)
    _claims.clear()


@contextlib.contextmanager
def made_folders(folder: str | Path, what: str):
    """``folder`` made (with its missing parents) for the block. If the block fails — but for an interruption,
    which keeps its work to be continued — the folders made here are removed with everything in them: a run that
    failed leaves no folder it made (a folder that was there before keeps what it held)."""
    folder = Path(folder).expanduser()
    top = folder
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    made = None if folder.exists() else top
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LayaError(f"cannot create {what} {folder}: {e.strerror or e}") from None
    try:
        yield folder
    except (KeyboardInterrupt, TrainingInterrupted):
        raise
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- JSON


def json_safe(obj):
    """Strict-JSON-able copy: NaN and ±inf become None (null), numpy scalars become Python ones,
    dict keys become strings, recursively."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    item = getattr(obj, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(obj, "ndim", None) == 0:
        return json_safe(item())
    return obj


def strict_json(obj) -> str:
    return json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"


def digest(**parts) -> str:
    """A short, stable hash of JSON-able parts: feature-cache keys and resume fingerprints."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
